"""The passages of hit fields read from a companion chunk index
(``chunkrag sync``) instead of chunked and embedded at query time.

A companion's chunks of a field are used only when they are complete and
their stored ``doc_fingerprint`` is the fingerprint of the very text the
caller's own hit shows: a document changed since the sync, another version,
a field the caller cannot read (it is not in the hit, so never asked for)
never match, and go to the fallback. So a companion never widens what a
caller can read: it only saves the chunking and embedding of text the
caller's search already returned.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Mapping, Sequence

import numpy as np

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.engines import schema
from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.engines.errors import EngineRefused
from chunkrag_core.settings import Settings
from ingest_pipeline.chunker import document_fingerprint
from ingest_pipeline.document_context import wants_context
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.source_fields import SourceField
from ingest_pipeline.sync import companion_name
from search_extension.companion_scoring import UNREADABLE_STATUSES, NotServed, engine_scored
from search_extension.passages import PassageSource, ScoredHits

# Most chunks one request brings back (the engine's default result window);
# fields whose chunks did not all fit go to the fallback.
MAX_CHUNKS = 10_000
# A companion found missing (or not readable with some credentials) is not
# asked for again this long: post-search on an index without a companion
# costs no request, and one `chunkrag sync` makes is used this long after.
UNREADABLE_TTL_S = 30.0
# (credentials, companion) pairs remembered; the oldest go first.
UNREADABLE_ENTRIES = 4096


class UnreadableCompanions:
    """The companions each caller (``identity``: who the credentials are)
    found missing or refused, for ``ttl_s``. Thread-safe, bounded."""

    def __init__(
        self,
        *,
        ttl_s: float = UNREADABLE_TTL_S,
        entries: int = UNREADABLE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._ttl_s, self._entries, self._clock = ttl_s, entries, clock
        self._found: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, str]) -> bool:
        with self._lock:
            noted = self._found.get(key)
            return noted is not None and self._clock() - noted < self._ttl_s

    def note(self, identity: str, companion: str) -> None:
        with self._lock:
            self._found[(identity, companion)] = self._clock()
            self._found.move_to_end((identity, companion))
            while len(self._found) > self._entries:
                self._found.popitem(last=False)


class CompanionPassages:
    """:class:`PassageSource` reading ``companion_index``; what it cannot
    serve (no companion chunks, other text, the index missing) is asked of
    ``fallback``. ``settings``: the chunking and embedder the companion was
    synced with (their fingerprint must match)."""

    def __init__(
        self,
        client: SearchBackend,
        companion_index: str,
        fallback: PassageSource,
        *,
        settings: Settings,
        max_chunks: int = MAX_CHUNKS,
        on_unreadable: Callable[[], None] = lambda: None,
    ):
        """``on_unreadable`` is called when the companion answers that it is
        missing or not the caller's to read (everything goes to ``fallback``)."""
        self._client, self._index, self._fallback = client, companion_index, fallback
        self._shaping = shaping_of(settings)
        self._max_chunks = max_chunks
        self._on_unreadable = on_unreadable

    def passages(self, fields: Sequence[SourceField], *, query: str = "") -> Mapping[str, Sequence[Chunk]]:
        if not fields:
            return {}
        wanted = {f.companion_id: document_fingerprint(f.document(), self._shaping) for f in fields}
        try:
            stored = self._stored(sorted(wanted))
        except EngineRefused as exc:
            if exc.status not in UNREADABLE_STATUSES:
                raise
            self._on_unreadable()
            stored = {}
        found: dict[str, Sequence[Chunk]] = {
            doc_id: [chunk for _, chunk in rows] for doc_id, rows in stored.items() if _usable(rows, wanted[doc_id])
        }
        rest = [f for f in fields if f.companion_id not in found]
        if rest:
            found.update(self._fallback.passages(rest, query=query))
        return found

    def _stored(self, doc_ids: Sequence[str]) -> dict[str, list[tuple[str, Chunk]]]:
        """(stored fingerprint, chunk) of the base chunks of
        ``doc_ids``, in one search (EngineNotFound when the companion is
        missing: no request asks first whether it exists)."""
        body = {
            "size": self._max_chunks,
            "query": {"bool": {"filter": [{"terms": {schema.DOC_ID: list(doc_ids)}}, schema.base_scale_filter()]}},
            "sort": [{schema.DOC_ID: "asc"}, {schema.POSITION: "asc"}],
            **schema.vector_read(),
            "track_total_hits": False,
        }
        response = self._client.search(self._index, body)
        hits = response["hits"]["hits"]
        stored: dict[str, list[tuple[str, Chunk]]] = {}
        for hit in hits:
            chunk = schema.chunk_from_hit(hit)
            fingerprint = str((hit.get("_source") or {}).get(schema.DOC_FINGERPRINT, ""))
            stored.setdefault(chunk.doc_id, []).append((fingerprint, chunk))
        if len(hits) >= self._max_chunks and hits:
            # The last document may be cut short: never serve it partly.
            stored.pop(schema.chunk_from_hit(hits[-1]).doc_id, None)
        return stored


def _usable(stored: Sequence[tuple[str, Chunk]], fingerprint: str) -> bool:
    """All chunks made from this very text, positions 0..n-1 without a gap."""
    return (
        bool(stored)
        and all(fp == fingerprint for fp, _ in stored)
        and [chunk.position for _, chunk in stored] == list(range(len(stored)))
        and all(chunk.vector is not None and chunk.scale == BASE_SCALE for _, chunk in stored)
    )


class CompanionsFirst:
    """:class:`PassageSource` of post-search: the fields of each hit's index
    from that index's companion (``<index>-chunkrag``, the name ``chunkrag
    sync`` gives it) where there is one, read with ``client`` (the caller's
    own credentials, or in service mode the key's derived ones: a companion
    the caller may not read is passed over); everything else from
    ``fallback`` (chunked and embedded at query time).

    With ``engine_scoring`` it is also a :class:`ScoringPassageSource`: the
    engine scores the chunks of each hit whose every field is complete and
    current in its companion, and only their candidates are fetched
    (``companion_scoring``); the passages of the other hits are fetched
    with their vectors (or chunked now) and scored here."""

    def __init__(
        self,
        client: SearchBackend,
        fallback: PassageSource,
        *,
        settings: Settings,
        engine_scoring: bool = True,
        bm25: str = "engine",
        rebuild: bool = True,
        unreadable: UnreadableCompanions | None = None,
        identity: str = "",
    ):
        """``unreadable``: the companions found missing or refused, shared
        between requests (those of ``identity``, who ``client``'s credentials
        are, are not asked for again while remembered). ``rebuild``: the
        engine-scored candidates are rebuilt from the hits' text where they
        can be exactly (one companion request); False fetches them always
        (a second request, as before; for comparisons)."""
        self._client, self._fallback, self._settings = client, fallback, settings
        self._engine_scoring, self._bm25 = engine_scoring, bm25
        # The header of a rebuilt chunk is the chunker's only without document
        # context written by the model (a summary, a title, sections it found).
        chunking = settings.chunking
        self._headers = chunking.headers if rebuild and not wants_context(chunking) else None
        self._unreadable = unreadable if unreadable is not None else UnreadableCompanions()
        self._identity = identity
        # Why a hit of the last response was not scored by the engine (None:
        # every hit was, or never asked).
        self.not_scored_because: str | None = None

    def scored(
        self,
        fields_by_hit: Sequence[Sequence[SourceField]],
        *,
        query: str,
        query_vector: np.ndarray,
        weights: tuple[float, float],
        max_passages: int,
        with_vectors: bool,
    ) -> ScoredHits | None:
        if not self._engine_scoring:
            self.not_scored_because = "engine scoring is off"
            return None
        fields = [field for sources in fields_by_hit for field in sources]
        companions = {field.index: companion_name(field.index) for field in fields}
        known = {c for c in set(companions.values()) if (self._identity, c) in self._unreadable}
        # The hits whose companion is not known to be unreadable are asked for, each served or not on its own.
        asked = [i for i, sources in enumerate(fields_by_hit) if not any(companions[f.index] in known for f in sources)]
        reasons = [f"the companion [{min(known)}] cannot be read (noted earlier)"] if known else []
        best: list[tuple[Chunk, ...] | None] = [None] * len(fields_by_hit)
        capped = [0] * len(fields_by_hit)
        if asked:
            shaping = shaping_of(self._settings)
            try:
                outcome = engine_scored(
                    self._client,
                    [fields_by_hit[i] for i in asked],
                    companions,
                    {field.companion_id: document_fingerprint(field.document(), shaping) for field in fields},
                    query=query,
                    query_vector=query_vector,
                    weights=weights,
                    max_passages=max_passages,
                    with_vectors=with_vectors,
                    bm25=self._bm25,
                    headers=self._headers,
                )
            except NotServed as exc:
                self.not_scored_because = str(exc)
                return None
            for name in outcome.unreadable:
                self._unreadable.note(self._identity, name)
            for i, chosen, count in zip(asked, outcome.scored.best, outcome.scored.capped):
                best[i], capped[i] = chosen, count
            reasons.extend([outcome.why_not] if outcome.why_not else [])
        # Why a hit was not served (None: every hit was).
        self.not_scored_because = reasons[0] if reasons else None
        if not any(chosen is not None and sources for chosen, sources in zip(best, fields_by_hit)):
            return None
        return ScoredHits(tuple(best), tuple(capped))

    def passages(self, fields: Sequence[SourceField], *, query: str = "") -> Mapping[str, Sequence[Chunk]]:
        by_index: dict[str, list[SourceField]] = {}
        for field in fields:
            by_index.setdefault(field.index, []).append(field)
        found: dict[str, Sequence[Chunk]] = {}
        # What no companion serves, of every index, goes to the fallback in
        # one call: one embedding call for all the response's fields.
        deferred = _Deferred()
        for index, group in by_index.items():
            name = companion_name(index)
            if (self._identity, name) in self._unreadable:
                deferred.passages(group)
                continue
            companion = CompanionPassages(
                self._client,
                name,
                deferred,
                settings=self._settings,
                on_unreadable=lambda name=name: self._unreadable.note(self._identity, name),
            )
            try:
                found.update(companion.passages(group, query=query))
            except EngineRefused:
                deferred.passages(group)
        if deferred.fields:
            found.update(self._fallback.passages(deferred.fields, query=query))
        return found


class _Deferred:
    """A passage source that only notes the fields it is asked for."""

    def __init__(self) -> None:
        self.fields: list[SourceField] = []

    def passages(self, fields: Sequence[SourceField], *, query: str = "") -> Mapping[str, Sequence[Chunk]]:
        self.fields.extend(fields)
        return {}
