"""The one engine call segment extraction makes: fetch chunks by document
and position, through the search backend (Elasticsearch or OpenSearch)."""

from __future__ import annotations

from typing import Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.engines.schema import chunk_from_hit
from search_extension import queries
from search_extension.segments import FetchPositions


def fetch_positions(
    backend: SearchBackend, index: str, wanted: Mapping[str, Sequence[int]], scale: int = BASE_SCALE
) -> list[Chunk]:
    """The chunks at ``wanted`` positions at ``scale``, in one search request."""
    if not any(wanted.values()):
        return []
    response = backend.search(index, queries.positions_body(wanted, scale))
    return [chunk_from_hit(hit) for hit in response["hits"]["hits"]]


def position_fetcher(backend: SearchBackend, index: str) -> FetchPositions:
    return lambda wanted, scale=BASE_SCALE: fetch_positions(backend, index, wanted, scale)
