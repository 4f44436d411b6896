"""A companion chunk index kept in step with an index of someone else's.

``sync_index`` reads the source index whole through a point in time, page
after page (``search_after``), turns each text field of each document into
one document of the companion chunk index (`source_fields.SourceField`),
and ingests those with the ordinary ingest pipeline: a field whose
fingerprint the companion already holds is left alone (counted unchanged),
a new or changed one is chunked, embedded and written. Once the read is
complete, a sweep of the companion removes what the source no longer has
(a deleted document, a field removed or emptied).

Each pass is resumable: after every page that wrote something (and every
``UNCHANGED_SAVE_EVERY_S`` through pages that did not) the point in time and
the last sort values are kept in the companion's ``_meta``
(:class:`IndexMetaState`), so a pass that was interrupted goes on where it
stopped while its point in time lives (``PIT_KEEP_ALIVE``); after that it
starts again, and what it had already written is found unchanged.

Each chunk carries, in its metadata, the source index, ``_id`` and field
(part of the fingerprint) and the source document's ``_seq_no`` and
``_primary_term`` when it was written (a stamp, not part of the
fingerprint; when the engine gives none, the text's hash): a later version
of the document whose text of that field is the same keeps the chunks it has.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from chunkrag_core.engines import schema
from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.engines.errors import EngineRefused
from chunkrag_core.providers import Embedder
from chunkrag_core.settings import Settings
from ingest_pipeline.chunker import document_fingerprint
from ingest_pipeline.content_fields import left_out_by_path
from ingest_pipeline.pipeline import IngestReport, ingest_documents, pause_refresh, restore_refresh, shaping_of
from ingest_pipeline.source_fields import PART_CHARS, SourceField, source_of_doc_id, title_value
from ingest_pipeline.sources import Document
from ingest_pipeline.writer import StoredDocument, ensure_index_for, stored_documents

# The companion of index X is X + this, unless named.
COMPANION_SUFFIX = "-chunkrag"
# Field types whose values are prose to split into passages (keyword
# sub-fields and keyword fields are labels, not passages).
TEXT_TYPES = ("text", "match_only_text")
# Top-level fields taken, in this order, as a document's title: the header
# of every passage of its other fields, not synced as passages of its own.
TITLE_FIELDS = ("title", "name", "subject", "headline")
# How long the engine keeps a pass's point in time after each page: longer
# than any page takes to embed, and the time an interrupted pass has to
# resume where it stopped (after it, the pass starts over).
PIT_KEEP_ALIVE = "10m"
# Source documents per page: each page's fields are ingested, and the pass's
# position saved, before the next page is read.
DOCS_PER_PAGE = 500
# A page that wrote nothing saves the pass's position only when the last save
# is older than this: saving is a mapping update of the cluster, dearer than
# reading and checking a page again (a pass with nothing to do paid more for
# its saves than for its reads), so a resumed pass re-reads at most this
# long's worth of pages that were found unchanged.
UNCHANGED_SAVE_EVERY_S = 30.0
# Companion documents looked up per request in the sweep.
SWEEP_PAGE = 500
# Key of the sync's state in the companion's mapping `_meta`.
STATE_KEY = "chunkrag_sync"


class SyncError(RuntimeError):
    """The source cannot be synced (it does not exist, or a named field is
    not one of its text fields)."""


class MalformedField(ValueError):
    """A field's value is not text (a number, an object...)."""


def companion_name(source: str) -> str:
    return source + COMPANION_SUFFIX


@dataclass(frozen=True, slots=True)
class SyncReport:
    source: str
    companion: str
    read: int  # source documents read in this pass (resumed: since the resume)
    fields: int  # non-empty text fields among them
    unchanged: int  # fields whose chunks were already those of their text
    rechunked: int  # fields chunked, embedded and written
    deleted: int  # companion documents removed (source gone, field emptied)
    errors: tuple[str, ...]  # "<index>/<_id>#<field>: reason", each skipped
    seconds: float
    complete: bool  # the pass read the whole source and swept the companion
    resumed: bool = False  # went on from an interrupted pass's position
    restarted: str = ""  # why an interrupted pass could not go on, if so
    text_fields: tuple[str, ...] = ()
    title_field: str = ""
    # The companion was an index wildcards reached (made before companions
    # were hidden) and this pass made it hidden.
    made_hidden: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors


class SyncState(Protocol):
    """Where a pass keeps its position between pages."""

    def load(self) -> Mapping[str, Any] | None: ...
    def save(self, state: Mapping[str, Any] | None) -> None: ...


class IndexMetaState:
    """The pass's position in the companion index's own mapping `_meta`:
    it lives and dies with the companion, whichever machine runs the pass."""

    def __init__(self, client: SearchBackend, companion: str):
        self._client, self._companion = client, companion
        self._others: dict[str, Any] = {}  # the rest of `_meta`, written back as it was

    def load(self) -> Mapping[str, Any] | None:
        meta = self._client.index_meta(self._companion)
        self._others = {key: value for key, value in meta.items() if key != STATE_KEY}
        return meta.get(STATE_KEY)

    def save(self, state: Mapping[str, Any] | None) -> None:
        # `_meta` is replaced whole by a mapping update: keep what others put there.
        meta = {**self._others, STATE_KEY: dict(state) if state else None}
        self._client.set_index_meta(self._companion, meta)


# What ingests the new and changed field documents of one page, given what
# the companion holds of them: the in-process pipeline or the workers'
# (`workers.ingest_dispatch`), into the companion the pass made and whose
# periodic refresh it holds paused; the report's documents, unchanged and
# skipped are counted.
Ingest = Callable[[Sequence[Document], Mapping[str, StoredDocument]], IngestReport]


def text_fields(properties: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The paths of the text fields of a mapping (objects and nested
    objects walked; multi-fields, which index the same value again, not)."""
    found: list[str] = []
    for name, spec in properties.items():
        path = prefix + name
        if spec.get("type") in TEXT_TYPES:
            found.append(path)
        if "properties" in spec:
            found.extend(text_fields(spec["properties"], path + "."))
    return found


def title_field_of(properties: Mapping[str, Any]) -> str:
    """The first title-like top-level field the mapping has ("" if none)."""
    return next((name for name in TITLE_FIELDS if name in properties), "")


def field_text(source: Mapping[str, Any], path: str) -> str:
    """The text of ``path`` in a document's ``_source``: a string as it is;
    several (an array, or an array of objects on the way) joined by a blank
    line; "" when absent or null. Raises :class:`MalformedField` for a value
    that is not text."""
    values = list(_leaves(source, path.split(".")))
    texts = []
    for value in values:
        if isinstance(value, str):
            texts.append(value)
        elif value is not None:
            raise MalformedField(f"field {path!r} holds {type(value).__name__}, not text")
    return "\n\n".join(t for t in texts if t)


def _leaves(value: Any, parts: list[str]) -> Iterator[Any]:
    if isinstance(value, list):
        for item in value:
            yield from _leaves(item, parts)
        return
    if not parts:
        yield value
        return
    if not isinstance(value, Mapping):
        return
    # `_source` may hold a path as one dotted key ({"a.b": ...}) as well as nested.
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in value:
            yield from _leaves(value[key], parts[cut:])


def source_version(hit: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The stamp of a field's chunks: the document's sequence number and
    primary term, or (where the engine gave none) the hash of the text."""
    if isinstance(hit.get("_seq_no"), int) and isinstance(hit.get("_primary_term"), int):
        return {"source_seq_no": hit["_seq_no"], "source_primary_term": hit["_primary_term"]}
    return {"source_hash": hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]}


def field_documents(
    hit: Mapping[str, Any], fields: Sequence[str], title_field: str
) -> tuple[list[Document], list[str]]:
    """The companion documents of one source hit (one per non-empty text
    field) and the errors of the fields that cannot be synced."""
    index, doc_id, source = hit["_index"], hit["_id"], hit.get("_source") or {}
    where = f"{index}/{doc_id}"
    try:
        title = title_value(field_text(source, title_field)) if title_field else ""
    except MalformedField as exc:
        return [], [f"{where}: title {exc}; document not synced"]
    documents, errors = [], []
    for name in fields:
        try:
            text = field_text(source, name)
        except MalformedField as exc:
            errors.append(f"{where}#{name}: {exc}; not synced")
            continue
        if not text.strip():
            continue
        try:
            document = SourceField(index, doc_id, name, text, title).document()
        except ValueError as exc:
            errors.append(f"{where}#{name}: {exc}; not synced")
            continue
        documents.append(replace(document, stamp=source_version(hit, text)))
    return documents, errors


def resolve_fields(
    client: SearchBackend, source: str, fields: Sequence[str] | None, title_field: str | None
) -> tuple[tuple[str, ...], str]:
    """The text fields to sync and the title field: those named, checked
    against the source's mapping, or those the mapping declares, less what
    frameworks keep there as metadata, ids and URLs (post-search passes
    them over too: `content_fields.left_out_by_path`)."""
    if not client.index_exists(source):
        raise SyncError(f"index {source!r} does not exist")
    properties = client.mapping_properties(source)
    declared = text_fields(properties)
    title = title_field if title_field is not None else title_field_of(properties)
    if fields:
        unknown = [f for f in fields if f not in declared]
        if unknown:
            raise SyncError(
                f"{', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not a text field "
                f"of {source!r} (its text fields: {', '.join(declared) or 'none'})"
            )
        chosen = tuple(fields)
    else:
        chosen = tuple(f for f in declared if f != title and left_out_by_path(f) is None)
    if not chosen:
        passed = [f for f in declared if f != title]
        raise SyncError(
            f"index {source!r} has no text field to sync (name one with fields"
            + (f"; passed over as metadata, ids or URLs: {', '.join(passed)})" if passed else ")")
        )
    return chosen, title


def sync_index(
    source: str,
    *,
    client: SearchBackend,
    embedder: Embedder | None,
    settings: Settings,
    companion: str | None = None,
    fields: Sequence[str] | None = None,
    title_field: str | None = None,
    batch: int = DOCS_PER_PAGE,
    state: SyncState | None = None,
    ingest: Ingest | None = None,
    on_page: Callable[[SyncReport], None] | None = None,
) -> SyncReport:
    """One pass of keeping ``companion`` (default ``<source>-chunkrag``) in
    step with ``source``: resumed where an interrupted pass stopped, else
    from the start. ``ingest`` replaces the in-process pipeline (the
    workers'); ``on_page`` is told the running totals after each page."""
    began = time.perf_counter()
    companion = companion or companion_name(source)
    chosen, title = resolve_fields(client, source, fields, title_field)
    created = ensure_index_for(client, companion, settings, hidden=True)
    made_hidden = not created and hide(client, companion)  # one made before companions were hidden
    state = state or IndexMetaState(client, companion)
    if ingest is None:
        if embedder is None:
            raise ValueError("sync_index needs an embedder, or an ingest to hand the documents to")

        def ingest(items: Sequence[Document], stored: Mapping[str, StoredDocument]) -> IngestReport:
            return ingest_documents(
                items,
                client=client,
                embedder=embedder,
                settings=settings,
                index=companion,
                progress=False,
                stored=stored,
                index_ready=True,
            )

    shaping = shaping_of(settings)
    pass_ = _Pass(client, source, companion, chosen, title, state, batch)
    totals = _Totals(made_hidden=made_hidden)
    refresh = _RefreshHold(client, companion)
    try:
        for hits in pass_.pages():
            documents: list[Document] = []
            for hit in hits:
                made, errors = field_documents(hit, chosen, title)
                documents.extend(made)
                totals.errors.extend(errors)
            totals.read += len(hits)
            totals.fields += len(documents)
            stored = stored_documents(client, companion, [d.doc_id for d in documents])
            todo = changed_documents(documents, stored, shaping)
            totals.unchanged += len(documents) - len(todo)
            if todo:
                refresh.hold()
                for group in ingest_groups(todo):
                    report = ingest(group, stored)
                    not_chunked = len(report.skipped)
                    totals.unchanged += report.unchanged
                    totals.rechunked += report.documents - report.unchanged - not_chunked
                    totals.errors.extend(str(s) for s in report.skipped)
                    totals.errors.extend(report.errors)
            pass_.checkpoint(wrote=bool(todo))
            if on_page is not None:
                on_page(totals.report(pass_, began, complete=False))
    finally:
        refresh.release()
    totals.deleted = sweep(client, companion, chosen, title)
    pass_.finish()
    return totals.report(pass_, began, complete=True)


def hide(client: SearchBackend, companion: str) -> bool:
    """Make an existing companion a hidden index (True), unless it is one
    already (False): the callers' own searches, counts and aggregations over
    a pattern (``kb-*``) then no longer reach it, while post-search and sync
    name it. A companion is created hidden; this migrates one made before."""
    if client.index_hidden(companion):
        return False
    client.hide_index(companion)
    return True


def changed_documents(
    documents: Sequence[Document], stored: Mapping[str, StoredDocument], shaping: str
) -> list[Document]:
    """The documents whose chunks the companion does not hold whole for
    their text (``stored``: what it holds of a page's documents, asked in
    one request): a page with nothing new costs no ingest at all."""
    return [
        d
        for d in documents
        if d.doc_id not in stored or not stored[d.doc_id].is_complete(document_fingerprint(d, shaping))
    ]


def ingest_groups(documents: Sequence[Document]) -> list[list[Document]]:
    """The page's documents as ingest calls: the ordinary ones together, and
    each field longer than PART_CHARS (chunked in parts) on its own, so one
    call never holds the sentences and vectors of more than one such text."""
    ordinary = [d for d in documents if len(d.text) <= PART_CHARS]
    large = [[d] for d in documents if len(d.text) > PART_CHARS]
    return ([ordinary] if ordinary else []) + large


class _RefreshHold:
    """The companion's periodic refresh, paused at the first page that has
    something to write and restored once the pass ends: once per pass, not
    once per page (each pause and restore is a settings update of the
    cluster), and not at all by a pass with nothing to write. Each page's
    ingest still refreshes, so what is written shows page by page. A pass
    killed meanwhile leaves "-1", which the next one restores to the default."""

    def __init__(self, client: SearchBackend, index: str):
        self._client, self._index = client, index
        self._held = False
        self._previous: str | None = None

    def hold(self) -> None:
        if not self._held:
            self._previous = pause_refresh(self._client, self._index)
            self._held = True

    def release(self) -> None:
        if self._held:
            restore_refresh(self._client, self._index, self._previous)
            self._held = False


@dataclass
class _Totals:
    read: int = 0
    fields: int = 0
    unchanged: int = 0
    rechunked: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)
    made_hidden: bool = False

    def report(self, pass_: _Pass, began: float, *, complete: bool) -> SyncReport:
        return SyncReport(
            source=pass_.source,
            companion=pass_.companion,
            read=self.read,
            fields=self.fields,
            unchanged=self.unchanged,
            rechunked=self.rechunked,
            deleted=self.deleted,
            errors=tuple(self.errors),
            seconds=round(time.perf_counter() - began, 3),
            complete=complete,
            resumed=pass_.resumed,
            restarted=pass_.restarted,
            text_fields=pass_.fields,
            title_field=pass_.title,
            made_hidden=self.made_hidden,
        )


class _Pass:
    """One read of the whole source through a point in time, its position
    saved after each page so an interrupted pass goes on from there."""

    def __init__(
        self,
        client: SearchBackend,
        source: str,
        companion: str,
        fields: tuple[str, ...],
        title: str,
        state: SyncState,
        size: int,
    ):
        self.client, self.source, self.companion = client, source, companion
        self.fields, self.title, self._state, self._size = fields, title, state, size
        self.resumed, self.restarted = False, ""
        self._pit: str | None = None
        self._after: tuple[Any, ...] | None = None
        self._last: tuple[Any, ...] = ()  # sort values of the last hit yielded
        self._saved_at = time.monotonic()
        saved = state.load()
        if saved and saved.get("pit_id"):
            if saved.get("source") == source and tuple(saved.get("fields") or ()) == fields:
                self._pit, self._after = saved["pit_id"], tuple(saved.get("search_after") or ()) or None
                self.resumed = True
            else:
                self.restarted = "the interrupted pass synced other fields or another source; started over"

    def _source_filter(self) -> list[str]:
        return sorted({*self.fields, *([self.title] if self.title else [])})

    def pages(self) -> Iterator[tuple[dict[str, Any], ...]]:
        if self._pit is None:
            self._pit = self.client.open_point_in_time(self.source, PIT_KEEP_ALIVE)
        first = True
        while True:
            try:
                page = self.client.read_page(
                    self._pit,
                    keep_alive=PIT_KEEP_ALIVE,
                    size=self._size,
                    search_after=self._after,
                    source=self._source_filter(),
                )
            except EngineRefused as exc:
                if not (first and self.resumed):
                    raise
                # The interrupted pass's point in time has expired: start over
                # (what it wrote is found unchanged).
                self.resumed, self.restarted = False, f"the interrupted pass could not go on ({exc}); started over"
                self._pit = self.client.open_point_in_time(self.source, PIT_KEEP_ALIVE)
                self._after = None
                continue
            first = False
            self._pit = page.pit_id
            if page.hits:
                self._last = tuple(page.hits[-1]["sort"])
                yield page.hits
            if page.search_after is None:
                return
            self._after = page.search_after

    def checkpoint(self, *, wrote: bool = True) -> None:
        """The page just yielded is written: a resumed pass starts after it
        (after a page that wrote nothing, only every UNCHANGED_SAVE_EVERY_S)."""
        if not wrote and time.monotonic() - self._saved_at < UNCHANGED_SAVE_EVERY_S:
            return
        self._saved_at = time.monotonic()
        self._state.save(
            {
                "source": self.source,
                "fields": list(self.fields),
                "pit_id": self._pit,
                "search_after": list(self._last),
                "saved_at": time.time(),
            }
        )

    def finish(self) -> None:
        self._state.save({"source": self.source, "fields": list(self.fields), "completed_at": time.time()})
        if self._pit is not None:
            try:
                self.client.close_point_in_time(self._pit)
            except EngineRefused:
                pass  # expired already: nothing held


def _document_buckets(
    client: SearchBackend, companion: str, sub_aggs: dict[str, Any]
) -> Iterator[list[dict[str, Any]]]:
    """Pages of the companion's per-document buckets (a composite
    aggregation on doc_id, SWEEP_PAGE at a time, each with ``sub_aggs``),
    in doc_id order; non-empty pages only."""
    after: dict[str, Any] | None = None
    while True:
        composite: dict[str, Any] = {"size": SWEEP_PAGE, "sources": [{"doc": {"terms": {"field": schema.DOC_ID}}}]}
        if after is not None:
            composite["after"] = after
        body = {"size": 0, "aggs": {"docs": {"composite": composite, "aggs": sub_aggs}}}
        answer = client.search(companion, body)["aggregations"]["docs"]
        if answer["buckets"]:
            yield answer["buckets"]
        after = answer.get("after_key")
        if not answer["buckets"] or after is None:
            return


def _companion_documents(client: SearchBackend, companion: str) -> Iterator[list[tuple[str, str, str, str]]]:
    """Pages of (companion doc_id, source index, source _id, field) of every
    document the companion holds, in doc_id order. A doc_id names its
    source field (`source_fields.source_doc_id`); only those that do not
    (hashed, or not a synced field's) are looked up in a chunk's metadata:
    one small request per page, not a chunk fetched per document."""
    for buckets in _document_buckets(client, companion, {}):
        keys = [bucket["key"]["doc"] for bucket in buckets]
        named = {key: source_of_doc_id(key) for key in keys}
        unnamed = [key for key, found in named.items() if found is None]
        looked_up = _metadata_sources(client, companion, unnamed) if unnamed else {}
        yield [(key, *(named[key] or looked_up.get(key, ("", "", "")))) for key in keys]


def _metadata_sources(client: SearchBackend, companion: str, doc_ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """(source index, source _id, field) of ``doc_ids`` as one chunk of each
    holds them in its metadata ("" where it holds none)."""
    body = {
        "size": 0,
        "query": {"terms": {schema.DOC_ID: list(doc_ids)}},
        "aggs": {
            "docs": {
                "terms": {"field": schema.DOC_ID, "size": len(doc_ids)},
                "aggs": {"one": {"top_hits": {"size": 1, "_source": {"includes": [schema.METADATA]}}}},
            }
        },
    }
    found = {}
    for bucket in client.search(companion, body)["aggregations"]["docs"]["buckets"]:
        metadata = bucket["one"]["hits"]["hits"][0]["_source"].get(schema.METADATA) or {}
        found[bucket["key"]] = tuple(
            str(metadata.get(name, "")) for name in ("source_index", "source_id", "source_field")
        )
    return found


def sweep(client: SearchBackend, companion: str, fields: Sequence[str], title: str) -> int:
    """Remove the companion documents whose source field is gone: the
    document deleted, the field emptied, or no longer one of those synced.
    The source is asked as it is now (not as of the pass's point in time).
    Returns how many companion documents were removed."""
    removed = 0
    synced = set(fields)
    for rows in _companion_documents(client, companion):
        wanted = {(index, doc_id) for _, index, doc_id, _ in rows if index and doc_id}
        present: dict[tuple[str, str], Mapping[str, Any]] = {}
        for index in {index for index, _ in wanted}:
            ids = sorted(doc_id for i, doc_id in wanted if i == index)
            for found in client.fetch(index, ids):
                present[(index, found["_id"])] = found
        gone = []
        for companion_id, index, doc_id, name in rows:
            hit = present.get((index, doc_id))
            if hit is None or name not in synced or not _has_text(hit, name):
                gone.append(companion_id)
        if gone:
            delete_documents(client, companion, gone)
            removed += len(gone)
    return removed


def delete_documents(client: SearchBackend, index: str, doc_ids: Sequence[str]) -> int:
    """Delete every chunk of ``doc_ids``, by id (a delete by query needs a
    module not every distribution has); the chunks deleted."""
    deleted = 0
    body = {"size": SWEEP_PAGE, "query": {"terms": {schema.DOC_ID: list(doc_ids)}}, "_source": False}
    while hits := client.search(index, body)["hits"]["hits"]:
        deleted += client.delete_ids(index, [hit["_id"] for hit in hits])
        client.refresh(index)
    return deleted


def _has_text(hit: Mapping[str, Any], name: str) -> bool:
    try:
        return bool(field_text(hit.get("_source") or {}, name).strip())
    except MalformedField:
        return False


@dataclass(frozen=True, slots=True)
class Drift:
    """How far a companion is from its source: fields the source has and
    the companion lacks, companion documents the source does not have, and
    those whose chunks are not of the source's text as it is now."""

    expected: int
    missing: int
    extra: int
    stale: int

    @property
    def exact(self) -> bool:
        return self.missing == self.extra == self.stale == 0


def companion_drift(
    client: SearchBackend,
    source: str,
    settings: Settings,
    *,
    companion: str | None = None,
    fields: Sequence[str] | None = None,
    title_field: str | None = None,
) -> Drift:
    """Read the whole source and the whole companion and count their
    differences (a check, for tests and benchmarks: it reads everything)."""
    companion = companion or companion_name(source)
    chosen, title = resolve_fields(client, source, fields, title_field)
    shaping = shaping_of(settings)
    expected: dict[str, str] = {}
    pit = client.open_point_in_time(source, PIT_KEEP_ALIVE)
    after = None
    try:
        while True:
            page = client.read_page(pit, keep_alive=PIT_KEEP_ALIVE, size=DOCS_PER_PAGE, search_after=after, source=True)
            pit = page.pit_id
            for hit in page.hits:
                for document in field_documents(hit, chosen, title)[0]:
                    expected[document.doc_id] = document_fingerprint(document, shaping)
            if page.search_after is None:
                break
            after = page.search_after
    finally:
        client.close_point_in_time(pit)
    held = _held_fingerprints(client, companion)
    return Drift(
        expected=len(expected),
        missing=sum(1 for doc_id in expected if doc_id not in held),
        extra=sum(1 for doc_id in held if doc_id not in expected),
        stale=sum(1 for doc_id, fp in expected.items() if doc_id in held and held[doc_id] != (fp,)),
    )


def _held_fingerprints(client: SearchBackend, companion: str) -> dict[str, tuple[str, ...]]:
    """Each companion document's stored fingerprints: one, unless a write
    was cut short; none when it holds another number of chunks than it
    declares (some lost, or some twice)."""
    held: dict[str, tuple[str, ...]] = {}
    sub_aggs = {
        "fp": {"terms": {"field": schema.DOC_FINGERPRINT, "size": 4}},
        "declared": {"max": {"field": schema.DOC_CHUNK_COUNT}},
    }
    for buckets in _document_buckets(client, companion, sub_aggs):
        for bucket in buckets:
            whole = bucket["doc_count"] == int(bucket["declared"]["value"] or 0)
            held[bucket["key"]["doc"]] = tuple(sorted(b["key"] for b in bucket["fp"]["buckets"])) if whole else ()
    return held
