"""Which way a ``_search`` with ``ext.chunkrag`` goes: the chunk index's own
retrieval, or post-search over the hits of the caller's own body.

Decided on the *concrete* indices the path's expression covers (wildcards,
lists, aliases, data streams and exclusions resolved by the cluster for the
caller: ``SearchBackend.concrete_indices``), never on the expression's
text, and asked again for every search: an index made, synced or deleted
since is seen at once.

- Chunk retrieval only when every concrete index is a chunk index
  ``chunkrag ingest`` made, and the body is one it serves (``query``,
  ``size`` and ``ext``, no post-search option); otherwise post-search over
  all of them, whose hits are the cluster's own (their real ``_index`` and
  ``_id``).
- A companion index (made by ``chunkrag sync`` for another index) never
  answers for its source unless asked for. It is a hidden index, which no
  wildcard reaches; one a wildcard still reached (made before companions
  were hidden, or made visible) is left out of the search (an exclusion is
  added to the expression); one named in the path, or in an alias named
  there, is searched like any other index (post-searched: it is not an
  index ``chunkrag ingest`` made).

Pure: :func:`decide` reads the cluster's answer and the request, and its
refusals name what would have worked. The I/O is the caller's
(``PostSearcher.route``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from chunkrag_core.engines import schema
from search_extension.options import OptionError

# The body keys chunk retrieval reads; any other key (aggs, sort, from,
# highlight, pit, ...) is the cluster's to read, so such a body is
# post-searched (or, with a chunk retrieval mode asked for, refused).
CHUNK_BODY_KEYS = ("query", "size", "ext")
# A chunk index (as `chunkrag ingest` and `chunkrag sync` write one): each of
# these fields with one of these types (schema.py).
CHUNK_FIELDS = {
    schema.DOC_ID: {"keyword"},
    schema.POSITION: {"integer"},
    schema.TEXT: {"text"},
    schema.VECTOR: {"dense_vector", "knn_vector"},
}
# What only a companion's chunks hold: the source index, _id and field each
# was made from (`ingest_pipeline.source_fields.SourceField.document`).
COMPANION_FIELDS = tuple(f"{schema.METADATA}.{name}" for name in ("source_index", "source_id", "source_field"))
# The fields asked of the cluster for each concrete index.
ROUTING_FIELDS = (*CHUNK_FIELDS, *COMPANION_FIELDS)
WILDCARD = "*"
# The expression of every index; an exclusion cannot follow it, "*" can.
ALL = "_all"

CHUNKS, POST_SEARCH = "chunks", "post_search"


@dataclass(frozen=True, slots=True)
class IndexKind:
    """One concrete index, as far as routing is concerned."""

    name: str
    chunks: bool  # holds chunks (doc_id, position, text, vector)
    companion: bool  # a companion `chunkrag sync` made for another index

    @property
    def ingested(self) -> bool:
        """A chunk index `chunkrag ingest` made (not a companion)."""
        return self.chunks and not self.companion


@dataclass(frozen=True, slots=True)
class Route:
    """Where a search goes. ``target``: the expression to search (the
    path's, with an exclusion added for each companion left out);
    ``indices``: the concrete indices it covers (empty when the cluster
    found none, or said the expression names a missing index: the search
    itself then answers as the cluster does)."""

    way: str  # CHUNKS or POST_SEARCH
    target: str
    indices: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()  # companions a wildcard reached


def kinds_of(resolved: Mapping[str, Mapping[str, Sequence[str]]]) -> tuple[IndexKind, ...]:
    """The kind of each concrete index from its types of ROUTING_FIELDS
    (``SearchBackend.concrete_indices``), in name order."""
    out = []
    for name in sorted(resolved):
        types = resolved[name]
        chunks = all(set(types.get(field, ())) & wanted for field, wanted in CHUNK_FIELDS.items())
        companion = chunks and all(types.get(field) for field in COMPANION_FIELDS)
        out.append(IndexKind(name, chunks, companion))
    return tuple(out)


def _entries(expression: str) -> list[str]:
    return [entry.strip() for entry in expression.split(",") if entry.strip()]


def _is_wildcard(entry: str) -> bool:
    return WILDCARD in entry or entry == ALL


def left_out_companions(expression: str, kinds: Sequence[IndexKind]) -> tuple[str, ...]:
    """The companions a wildcard of ``expression`` reached: neither named
    (an entry that is the companion's name) nor already excluded (an
    exclusion of it that the cluster did not apply, as when an alias the
    expression names holds it). An expression without a wildcard reaches a
    companion it does not name only through an alias: kept."""
    entries = _entries(expression)
    included = [entry for entry in entries if not entry.startswith("-")]
    if not any(_is_wildcard(entry) for entry in included):
        return ()
    named = set(included)
    excluded = {entry[1:] for entry in entries if entry.startswith("-")}
    return tuple(k.name for k in kinds if k.companion and k.name not in named and k.name not in excluded)


def excluding(expression: str, names: Sequence[str]) -> str:
    """``expression`` with an exclusion of each of ``names`` at its end,
    where it follows a wildcard on both engines (``_all`` is written as
    ``*``: an exclusion cannot follow it)."""
    if not names:
        return expression
    entries = [WILDCARD if entry == ALL else entry for entry in _entries(expression)]
    return ",".join([*entries, *(f"-{name}" for name in names)])


def decide(
    expression: str,
    kinds: Sequence[IndexKind] | None,
    *,
    target: str = "auto",
    mode: str | None = None,
    body_keys: Sequence[str] = CHUNK_BODY_KEYS,
    post_search_given: Sequence[str] = (),
) -> Route:
    """The way a search of ``expression`` goes, from the concrete indices
    the cluster resolved it to (``kinds``; None when the cluster answered
    that the expression names a missing index) and the request:
    ``target`` (``ext.chunkrag.mode`` as auto, chunks or post_search; a
    retrieval mode is chunks, named by ``mode``), the body's keys, and the
    post-search options given. A request that cannot be served is an
    OptionError naming what would have worked."""
    if kinds is None:  # a missing index: the search answers 404 as the cluster does
        return Route(CHUNKS if target == CHUNKS else POST_SEARCH, expression)
    left_out = left_out_companions(expression, kinds)
    searched = tuple(k for k in kinds if k.name not in left_out)
    if kinds and not searched:
        raise OptionError(
            f"[{expression}] covers only companion indices made by `chunkrag sync` ([{', '.join(left_out)}]), "
            "and a companion never answers for its source: search the source index, "
            "or name the companion itself in the path to search it"
        )
    route = excluding(expression, left_out)
    names = tuple(k.name for k in searched)
    extra = [key for key in body_keys if key not in CHUNK_BODY_KEYS]
    if target == POST_SEARCH:
        return Route(POST_SEARCH, route, names, left_out)
    if target == CHUNKS:
        asked = f'"mode": "{mode or CHUNKS}"'
        # Named explicitly, a companion holds chunks as well as any.
        not_chunks = [k.name for k in searched if not k.chunks]
        if not_chunks:
            raise OptionError(
                f"ext.chunkrag {asked} retrieves from chunk indices `chunkrag ingest` made, and "
                f"[{', '.join(not_chunks)}] is not one; "
                'set "mode": "post_search" (or leave mode unset) to filter the passages of its hits'
            )
        if extra:
            raise OptionError(
                f"a search with ext.chunkrag {asked} may hold only [{', '.join(CHUNK_BODY_KEYS)}], got [{extra[0]}]; "
                'set "mode": "post_search" (or leave mode unset) to send the body to the cluster as written '
                "and filter the passages of its hits"
            )
        return Route(CHUNKS, route, names, left_out)
    if searched and all(k.ingested for k in searched) and not extra and not post_search_given:
        return Route(CHUNKS, route, names, left_out)
    return Route(POST_SEARCH, route, names, left_out)
