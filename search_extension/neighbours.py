"""The one engine call segment extraction makes: fetch chunks by document
and position, through the search backend (Elasticsearch or OpenSearch)."""

from __future__ import annotations

from typing import Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.es_schema import chunk_from_hit
from chunkrag_core.search_backend import as_backend
from search_extension import queries
from search_extension.segments import FetchPositions


def fetch_positions(client, index: str, wanted: Mapping[str, Sequence[int]], scale: int = BASE_SCALE) -> list[Chunk]:
    """The chunks at ``wanted`` positions at ``scale``, in one search request
    (``client``: a search backend, or a raw client of either engine)."""
    if not any(wanted.values()):
        return []
    response = as_backend(client).search(index, queries.positions_body(wanted, scale))
    return [chunk_from_hit(hit) for hit in response["hits"]["hits"]]


def position_fetcher(client, index: str) -> FetchPositions:
    return lambda wanted, scale=BASE_SCALE: fetch_positions(client, index, wanted, scale)
