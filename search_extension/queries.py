"""Search request bodies as plain values, one function per retrieval mode.

Nothing here calls a cluster: tests assert on these dictionaries, and the
retriever sends them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE
from chunkrag_core.engines import schema

MODES = ("native_sum", "minmax", "rrf", "linear", "bm25", "knn")

# BM25 matches the chunk text and, with less weight, the document title every
# chunk carries, so a chunk that never names its subject can still match it;
# the contextual header (title and section path) adds the section names. It
# repeats the title, so it weighs less again.
DEFAULT_TEXT_FIELDS = (f"{schema.TEXT}^1", f"{schema.TITLE}^0.5", f"{schema.HEADER}^0.25")


@dataclass(frozen=True, slots=True)
class QuerySpec:
    """Everything a hybrid query needs, independent of how it is fused."""

    text: str
    vector: Sequence[float]
    size: int = 10
    num_candidates: int = 100
    # Hits each side (BM25, kNN) contributes before fusion; larger finds more
    # hits that only one side ranks well, at some latency.
    window: int = 100
    filters: tuple[Mapping[str, Any], ...] = ()
    text_fields: tuple[str, ...] = DEFAULT_TEXT_FIELDS
    # Collapse hits to the best chunk per value of this field (e.g. doc_id).
    collapse_field: str | None = None
    include_vectors: bool = False
    source_excludes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be at least 1, got {self.size}")
        object.__setattr__(self, "window", max(self.window, self.size))
        object.__setattr__(self, "vector", [float(v) for v in self.vector])
        object.__setattr__(self, "filters", tuple(self.filters))


def _source(spec: QuerySpec) -> dict[str, Any]:
    if spec.include_vectors:
        # Vectors are left out of _source by default on recent clusters; ask
        # for them explicitly when a later stage (redundancy) needs them.
        return {"excludes": list(spec.source_excludes), "exclude_vectors": False}
    return {"excludes": [schema.VECTOR, *spec.source_excludes]}


def _common(spec: QuerySpec, size: int, *, sources: bool = True) -> dict[str, Any]:
    # Without sources a hit is its index, id and score: enough to fuse.
    body: dict[str, Any] = {"size": size, "_source": _source(spec) if sources else False}
    if spec.collapse_field:
        body["collapse"] = {"field": spec.collapse_field}
    return body


def text_query(spec: QuerySpec, boost: float | None = None) -> dict[str, Any]:
    """The BM25 clause, with the filters as non-scoring filter clauses."""
    clause: dict[str, Any] = {
        "bool": {
            "must": [{"multi_match": {"query": spec.text, "fields": list(spec.text_fields), "type": "most_fields"}}]
        }
    }
    if spec.filters:
        clause["bool"]["filter"] = list(spec.filters)
    if boost is not None:
        clause["bool"]["boost"] = boost
    return clause


def knn_clause(spec: QuerySpec, k: int, boost: float | None = None) -> dict[str, Any]:
    clause: dict[str, Any] = {
        "field": schema.VECTOR,
        "query_vector": spec.vector,
        "k": k,
        # HNSW explores this many candidates per shard; twice k keeps recall
        # close to exact search at small cost.
        "num_candidates": max(spec.num_candidates, 2 * k),
    }
    if spec.filters:
        clause["filter"] = list(spec.filters)
    if boost is not None:
        clause["boost"] = boost
    return clause


def bm25_body(spec: QuerySpec, size: int | None = None, *, sources: bool = True) -> dict[str, Any]:
    size = size or spec.size
    return {**_common(spec, size, sources=sources), "query": text_query(spec)}


def knn_body(spec: QuerySpec, size: int | None = None, *, sources: bool = True) -> dict[str, Any]:
    size = size or spec.size
    # Collapsing happens after the k nearest chunks are chosen, so gather a
    # window of them to still fill `size` distinct groups.
    k = max(size, spec.window) if spec.collapse_field else size
    return {**_common(spec, size, sources=sources), "knn": knn_clause(spec, k=k)}


def native_sum_body(spec: QuerySpec, bm25_weight: float = 0.5, knn_weight: float = 0.5) -> dict[str, Any]:
    """One request, ``query`` and ``knn`` side by side: Elasticsearch adds the
    boosted BM25 score (unbounded) to the boosted kNN similarity (0..1). Works
    on every licence and on the server-only distribution."""
    return {
        **_common(spec, spec.size),
        "query": text_query(spec, boost=bm25_weight),
        "knn": knn_clause(spec, k=spec.window, boost=knn_weight),
    }


def msearch_bodies(spec: QuerySpec, index: str, *, sources: bool = True) -> list[dict[str, Any]]:
    """BM25 and kNN as two searches in one ``_msearch`` (header, body pairs),
    for fusing client-side where the cluster offers no fusion retriever.
    ``sources=False``: hits without their chunks (a window of 100 per side
    is 200 chunks, vectors included when asked, of which fusion keeps
    ``size``); fetch the kept ones with :func:`fetch_body`."""
    return [
        {"index": index},
        bm25_body(spec, spec.window, sources=sources),
        {"index": index},
        knn_body(spec, spec.window, sources=sources),
    ]


def fetch_body(spec: QuerySpec, ids_by_index: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """A search for exactly these chunks (ids per concrete index: an alias or
    a pattern may hold one id in two indices), with what ``spec`` asks of
    their ``_source``."""
    wanted = [
        {"bool": {"filter": [{"term": {"_index": index}}, {"ids": {"values": list(ids)}}]}}
        for index, ids in ids_by_index.items()
    ]
    return {
        "size": sum(len(ids) for ids in ids_by_index.values()),
        "_source": _source(spec),
        "query": {"bool": {"should": wanted, "minimum_should_match": 1}},
    }


def rrf_retriever_body(spec: QuerySpec, rank_constant: int = 60) -> dict[str, Any]:
    return {
        **_common(spec, spec.size),
        "retriever": {
            "rrf": {
                "retrievers": [
                    {"standard": {"query": text_query(spec)}},
                    {"knn": {**knn_clause(spec, k=spec.window)}},
                ],
                "rank_window_size": spec.window,
                "rank_constant": rank_constant,
            }
        },
    }


def linear_retriever_body(spec: QuerySpec, bm25_weight: float = 0.5, knn_weight: float = 0.5) -> dict[str, Any]:
    return {
        **_common(spec, spec.size),
        "retriever": {
            "linear": {
                "retrievers": [
                    {
                        "retriever": {"standard": {"query": text_query(spec)}},
                        "weight": bm25_weight,
                        "normalizer": "minmax",
                    },
                    {
                        "retriever": {"knn": knn_clause(spec, k=spec.window)},
                        "weight": knn_weight,
                        "normalizer": "minmax",
                    },
                ],
                "rank_window_size": spec.window,
            }
        },
    }


def position_runs(positions: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted positions as inclusive runs: (1, 2, 3, 7) -> [(1, 3), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for position in sorted(set(positions)):
        if runs and position == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], position)
        else:
            runs.append((position, position))
    return runs


def positions_body(wanted: Mapping[str, Sequence[int]], scale: int = BASE_SCALE) -> dict[str, Any]:
    """One request for the chunks at ``wanted`` positions of each document
    (a segment's neighbours) at ``scale``: a filter per document and run of
    positions, sorted by document and position, without vectors."""
    clauses = [
        {"bool": {"filter": [{"term": {schema.DOC_ID: doc_id}}, {"range": {schema.POSITION: {"gte": lo, "lte": hi}}}]}}
        for doc_id in sorted(wanted)
        for lo, hi in position_runs(wanted[doc_id])
    ]
    if not clauses:
        raise ValueError("no positions asked for")
    return {
        "size": sum(hi - lo + 1 for doc_id in wanted for lo, hi in position_runs(wanted[doc_id])),
        "query": {
            "bool": {"filter": [{"bool": {"should": clauses, "minimum_should_match": 1}}, schema.scale_filter(scale)]}
        },
        "sort": [{schema.DOC_ID: "asc"}, {schema.POSITION: "asc"}],
        "_source": {"excludes": [schema.VECTOR]},
        "track_total_hits": False,
    }
