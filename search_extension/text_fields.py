"""Which fields of an index hold the text post-search splits into passages,
and how a hit's text is read from what the caller's search returned.

Pure functions over a field-type listing (dotted path -> types, as
``_field_caps`` answers: `SearchBackend.field_types`) and over hits; the
listing is read through the engine seam and cached per index and caller by
:class:`FieldCatalog`.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ingest_pipeline.content_fields import left_out_by_path, not_prose

# Field types whose values are prose to split (not keywords, numbers, vectors).
TEXT_TYPES = frozenset({"text", "match_only_text"})
# Field types a title may have: a keyword title is as good a header as a text one.
TITLE_TYPES = TEXT_TYPES | {"keyword"}
# Looked for, in this order, when no title field is named: the first such
# field of the mapping is every passage's header (and is not itself split).
TITLE_NAMES = ("title", "name", "subject", "headline")
# Types that hold sub-fields by dotted path (a text field's sub-fields are
# multi-fields: the same value analysed again, never read on their own).
CONTAINER_TYPES = frozenset({"object", "nested"})
# Several values of one field (an array, or a nested field) are read as one
# text, joined by a blank line; offsets count within that joined text.
VALUE_SEPARATOR = "\n\n"
# Field listings kept per (index, caller): a listing is a few kilobytes.
FIELD_CACHE_ENTRIES = 512
# A listing is read again after this long: a mapping gains fields as
# documents arrive, and post-search should see them within a minute.
FIELD_CACHE_TTL_S = 60.0
# The chunk fields a chunk index (written by `chunkrag ingest`) holds, with
# the types that make it one (schema.py: doc_id, position, text, vector).
CHUNK_INDEX_FIELDS = {
    "doc_id": {"keyword"},
    "position": {"integer"},
    "text": {"text"},
    "vector": {"dense_vector", "knn_vector"},
}

FieldTypes = Mapping[str, Sequence[str]]


class FieldError(ValueError):
    """A field named for post-search that is not a text field; names it."""


# How a TextFields' fields were chosen: named by the request
# (ext.chunkrag.fields), by CHUNKRAG_POST_SEARCH_FIELDS, or detected from the
# mapping. Only detected fields have their values checked for prose.
CHOSEN_BY = ("request", "configured", "detected")


@dataclass(frozen=True, slots=True)
class TextFields:
    """The fields of one index whose text is split (in this order), and the
    field whose value heads every passage ("" when none). ``left_out``: the
    index's other text fields that detection passed over, each with why
    (`ingest_pipeline.content_fields.left_out_by_path`)."""

    fields: tuple[str, ...]
    title: str = ""
    chosen_by: str = "request"
    left_out: tuple[tuple[str, str], ...] = ()

    def prose(self, text: str) -> str | None:
        """Why a value of one of these fields is not read (not prose), or
        None; a named field is always read."""
        return not_prose(text) if self.chosen_by == "detected" else None

    def describe(self) -> dict[str, Any]:
        """As the response and the playground name them."""
        return {
            "read": list(self.fields),
            "title": self.title,
            "chosen_by": self.chosen_by,
            "left_out": dict(self.left_out),
        }


def is_chunk_index(types: FieldTypes) -> bool:
    """Whether an index holds chunks as `chunkrag ingest` writes them; for an
    expression of several indices, whether one of them does (its chunk
    retrieval then reads that one, and reports the others' failures in
    ``_shards``, as it always has)."""
    return all(set(types.get(name, ())) & wanted for name, wanted in CHUNK_INDEX_FIELDS.items())


def _is_text(types: Sequence[str]) -> bool:
    return bool(types) and any(t in TEXT_TYPES for t in types)


def _is_subfield(path: str, types: FieldTypes) -> bool:
    """A multi-field (``body.keyword``, ``title.raw``): some prefix of its
    path is a field that is not an object or nested."""
    parts = path.split(".")
    for cut in range(1, len(parts)):
        parent = types.get(".".join(parts[:cut]))
        if parent and not set(parent) <= CONTAINER_TYPES:
            return True
    return False


def detected_title(types: FieldTypes) -> str:
    for name in TITLE_NAMES:
        if any(t in TITLE_TYPES for t in types.get(name, ())):
            return name
    return ""


def detect_fields(
    types: FieldTypes,
    *,
    named: Sequence[str] = (),
    title: str | None = None,
    fields_option: str = "ext.chunkrag.fields",
    title_option: str = "ext.chunkrag.title_field",
    chosen_by: str = "request",
) -> TextFields:
    """The text fields of an index from its field types: every ``text`` and
    ``match_only_text`` field (nested and object fields by dotted path),
    multi-field sub-fields left out, in path order; or the ``named`` ones,
    each of which must be a text field. The title: ``title`` when given
    (a text or keyword field), else the first of TITLE_NAMES the index
    has; it heads the passages and is split only when named. Detected,
    a field that frameworks keep as metadata, an id or a URL is left out
    (`ingest_pipeline.content_fields`), and named in ``left_out``."""
    for name in named:
        if not _is_text(types.get(name, ())):
            raise FieldError(_not_text(name, types, fields_option))
    if title:
        if not any(t in TITLE_TYPES for t in types.get(title, ())):
            raise FieldError(_not_text(title, types, title_option, TITLE_TYPES))
    else:
        title = detected_title(types)
    if named:
        return TextFields(tuple(dict.fromkeys(named)), title, chosen_by)
    found = sorted(path for path, kinds in types.items() if _is_text(kinds) and not _is_subfield(path, types))
    left_out = tuple((path, why) for path in found if path != title and (why := left_out_by_path(path)))
    skipped = {path for path, _ in left_out}
    kept = tuple(path for path in found if path != title and path not in skipped)
    return TextFields(kept, title, "detected", left_out)


def fields_for_index(
    types: FieldTypes,
    *,
    named: Sequence[str] = (),
    title: str | None = None,
    configured: Sequence[str] = (),
    configured_option: str = "CHUNKRAG_POST_SEARCH_FIELDS",
) -> TextFields:
    """The text fields of one concrete index behind a search. Fields the
    caller named were checked against the whole index expression; one
    index of several (an alias, a pattern) uses those it holds as text.
    Configured fields must all be text fields of every index they name."""
    chosen_title = title if title and any(t in TITLE_TYPES for t in types.get(title, ())) else None
    if named:
        held = tuple(name for name in named if _is_text(types.get(name, ())))
        return TextFields(held, chosen_title or detected_title(types), "request")
    if configured:
        return detect_fields(
            types, named=configured, title=chosen_title, fields_option=configured_option, chosen_by="configured"
        )
    return detect_fields(types, title=chosen_title)


def _not_text(name: str, types: FieldTypes, option: str, wanted=TEXT_TYPES) -> str:
    kinds = types.get(name)
    what = " or ".join(sorted(wanted))
    if not kinds:
        return f"{option}: field [{name}] does not exist in the index mapping (a {what} field is needed)"
    return f"{option}: field [{name}] is a [{', '.join(kinds)}] field, not a {what} field"


# --- configuration -------------------------------------------------------------


def parse_field_patterns(
    raw: str, variable: str = "CHUNKRAG_POST_SEARCH_FIELDS"
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``"pattern:field,field;pattern2:field"`` as (pattern, fields) pairs."""
    out = []
    for entry in (part.strip() for part in raw.split(";")):
        if not entry:
            continue
        pattern, sep, names = entry.partition(":")
        fields = tuple(name.strip() for name in names.split(",") if name.strip())
        if not sep or not pattern.strip() or not fields:
            raise ValueError(f"{variable} entry {entry!r} is not 'index-pattern:field,field'")
        out.append((pattern.strip(), fields))
    return tuple(out)


def configured_fields(patterns: Sequence[tuple[str, tuple[str, ...]]], index: str) -> tuple[str, ...]:
    """The fields configured for ``index``: the first pattern it matches."""
    for pattern, fields in patterns:
        if fnmatch.fnmatchcase(index, pattern):
            return fields
    return ()


# --- reading a hit ---------------------------------------------------------------


def field_text(hit: Mapping[str, Any], path: str) -> str | None:
    """The text of ``path`` in a hit as the caller received it: from
    ``_source`` (objects and arrays followed by dotted path, or a key that is
    the dotted path itself), else from ``fields`` (asked for by the caller).
    None when the hit shows no text there (``_source`` filtering, field-level
    security, or no value)."""
    values = _values(hit.get("_source"), path.split("."))
    if not values:
        fields = hit.get("fields")
        if isinstance(fields, Mapping):
            values = [v for v in _as_list(fields.get(path)) if isinstance(v, str)]
    values = [v for v in values if v.strip()]
    return VALUE_SEPARATOR.join(values) if values else None


def _values(node: Any, parts: list[str]) -> list[str]:
    if not parts:
        return [v for v in _as_list(node) if isinstance(v, str)]
    if isinstance(node, list):
        return [value for item in node for value in _values(item, parts)]
    if not isinstance(node, Mapping):
        return []
    out: list[str] = []
    # "a.b.c" may be stored as {"a": {"b": ...}} or with the dotted key itself.
    for cut in range(1, len(parts) + 1):
        key = ".".join(parts[:cut])
        if key in node:
            out.extend(_values(node[key], parts[cut:]))
    return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


# --- the cache -----------------------------------------------------------------


class FieldCatalog:
    """Field listings read through ``read(index)`` (the caller's
    `SearchBackend.field_types`), cached per (index, identity): field-level
    security makes one caller's listing differ from another's. Thread-safe;
    bounded (FIELD_CACHE_ENTRIES) and expiring (FIELD_CACHE_TTL_S)."""

    def __init__(
        self,
        *,
        entries: int = FIELD_CACHE_ENTRIES,
        ttl_s: float = FIELD_CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._entries, self._ttl_s, self._clock = entries, ttl_s, clock
        self._cache: OrderedDict[tuple[str, str], tuple[float, dict[str, tuple[str, ...]]]] = OrderedDict()
        self._lock = threading.Lock()

    def types(self, index: str, identity: str, read: Callable[[str], Mapping[str, Sequence[str]]]):
        key = (index, identity)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[0] < self._ttl_s:
                self._cache.move_to_end(key)
                return cached[1]
        listing = {path: tuple(kinds) for path, kinds in read(index).items()}
        with self._lock:
            self._cache[key] = (now, listing)
            self._cache.move_to_end(key)
            while len(self._cache) > self._entries:
                self._cache.popitem(last=False)
        return listing
