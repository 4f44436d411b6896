"""Where the passages of a hit's text fields come from.

A passage of a hit field is a chunk the ingest chunker makes of
``SourceField.document()``: the same sentence / semantic chunking and
vectors as `chunkrag ingest`, offsets counting within the field's text.
:class:`QueryTimePassages` chunks and embeds at query time, with an
in-process cache keyed by the fingerprint of what it chunked; a companion
chunk index (`search_extension.companion`) serves the same protocol from
stored chunks. At query time a field may be narrowed first to the sentences
BM25 prefers for the query (``CHUNKRAG_POST_SEARCH_PRESELECT_SENTENCES``,
`search_extension.preselect`): only those are embedded, all the fields' in
one call, and each text's vector is kept by its sha256
(`search_extension.vector_cache`: in memory, and in Redis where the gateway
uses it), so a sentence embedded for one search is not embedded again.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
from cachetools import LRUCache

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.providers import Embedder
from chunkrag_core.settings import Settings
from ingest_pipeline.chunker import chunk_documents, document_fingerprint
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.source_fields import SourceField
from ingest_pipeline.sources import Document
from search_extension.preselect import SentenceCache, preselected
from search_extension.vector_cache import VectorStore, cached_embedder

# Fields whose passages the query-time cache keeps (least recently used go
# first). An entry is the chunks of one field with their 384-dimension
# vectors: about 1.5 kB per passage, so a 3,000-word field (~40 passages)
# costs ~60 kB and a full cache of long fields stays under ~60 MB.
PASSAGE_CACHE_ENTRIES = 1024


class PassageSource(Protocol):
    """The passages of each field, keyed by ``SourceField.companion_id``;
    the chunks carry vectors and offsets within the field's text. A field
    that yields no passage (blank text) may be left out."""

    def passages(self, fields: Sequence[SourceField], *, query: str = "") -> Mapping[str, Sequence[Chunk]]: ...


@dataclass(frozen=True, slots=True)
class ScoredHits:
    """Per hit (in the response's order): its candidates best first, each
    with its passage score and signals (None: a hit not served this way),
    and how many passages were over the cap."""

    best: tuple[tuple[Chunk, ...] | None, ...]
    capped: tuple[int, ...]


@runtime_checkable
class ScoringPassageSource(Protocol):
    """A passage source that can also have the passages of a response's
    hits scored where they are stored, and return only each hit's best
    ``max_passages`` (the candidates), with the same signals as
    ``post_search.scored_together`` gives; None for a hit it cannot serve,
    and None when it serves none (those hits' passages are then asked for
    and scored in-process). ``with_vectors``: the candidates must carry
    their vectors."""

    def scored(
        self,
        fields_by_hit: Sequence[Sequence[SourceField]],
        *,
        query: str,
        query_vector: np.ndarray,
        weights: tuple[float, float],
        max_passages: int,
        with_vectors: bool,
    ) -> ScoredHits | None: ...


def fingerprint_of(field: SourceField, settings: Settings) -> str:
    """The fingerprint a companion chunk index stores for this field's
    chunks: it matches only the very text (and chunking) they were made from."""
    return document_fingerprint(field.document(), shaping_of(settings))


class QueryTimePassages:
    """Chunk and embed at query time (all cache misses of one request in one
    chunker call), caching each chunked document's chunks by fingerprint.

    With ``preselect`` sentences (``settings.post_search.preselect_sentences``
    unless given) and a query, a field with more sentences is narrowed to
    its best ``preselect`` by BM25 (`search_extension.preselect`); the
    narrowed document's sections are part of its fingerprint, so its entry
    is never taken for the whole field's chunks nor the other way round.

    ``vectors``: where the texts' vectors are kept (default:
    ``vector_cache.vector_store_for(settings)``)."""

    def __init__(
        self,
        embedder: Embedder,
        settings: Settings,
        *,
        entries: int = PASSAGE_CACHE_ENTRIES,
        preselect: int | None = None,
        vectors: VectorStore | None = None,
    ):
        self._embedder = cached_embedder(embedder, settings, vectors)
        self._settings = settings
        self._preselect = settings.post_search.preselect_sentences if preselect is None else preselect
        # Base chunks only: the larger ensembling scales are retrieval's,
        # and the base chunks do not depend on them.
        self._chunking = dataclasses.replace(settings.chunking, scales=())
        self._shaping = shaping_of(settings)
        self._cache: LRUCache[str, tuple[Chunk, ...]] = LRUCache(maxsize=max(1, entries))
        self._sentences = SentenceCache()
        self._lock = threading.Lock()
        self.hits = self.misses = 0  # cache use, for the response's report

    def passages(self, fields: Sequence[SourceField], *, query: str = "") -> Mapping[str, Sequence[Chunk]]:
        found: dict[str, tuple[Chunk, ...]] = {}
        missing: dict[str, tuple[SourceField, Document, str]] = {}
        for field in fields:
            document = preselected(
                field.document(),
                query,
                self._preselect,
                self._chunking.max_chars,
                self._chunking.language,
                self._sentences,
            )
            key = document_fingerprint(document, self._shaping)
            with self._lock:
                cached = self._cache.get(key)  # marks it used
            if cached is not None:
                found[field.companion_id] = _renamed(cached, field)
                self.hits += 1
            else:
                missing.setdefault(field.companion_id, (field, document, key))
        if missing:
            self.misses += len(missing)
            chunked = chunk_documents(
                [document for _, document, _ in missing.values()], self._embedder, self._chunking, self._shaping
            )
            with self._lock:
                for (field, _, key), item in zip(missing.values(), chunked):
                    chunks = tuple(c for c in item.chunks if c.scale == BASE_SCALE)
                    found[field.companion_id] = chunks
                    self._cache[key] = chunks
        return found


def _renamed(chunks: tuple[Chunk, ...], field: SourceField) -> tuple[Chunk, ...]:
    """Cached chunks of the same text under another hit's name (the same
    fingerprint means the same text, title and metadata, hence the same
    field of the same hit; kept for safety should that ever differ)."""
    if not chunks or chunks[0].doc_id == field.companion_id:
        return chunks
    return tuple(dataclasses.replace(c, doc_id=field.companion_id) for c in chunks)
