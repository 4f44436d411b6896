"""Hybrid retrieval against a chunk index: embed the query, send the body of
the chosen mode, fuse client-side where the cluster cannot."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.engines import schema
from chunkrag_core.engines.base import ClusterCapabilities, SearchBackend
from chunkrag_core.engines.schema import chunk_from_hit
from chunkrag_core.providers import Embedder
from chunkrag_core.settings import CHARS_PER_TOKEN, DEFAULT_SCALES, RetrievalSettings
from search_extension import ensemble, fusion, queries, shards
from search_extension.queries import MODES, QuerySpec
from search_extension.shards import Shards

# Ensembling fuses each scale's two sides client-side, as these modes do.
ENSEMBLE_MODES = ("minmax", "rrf")


class RetrievalError(ValueError):
    """A retrieval request that cannot be served as asked."""


class IndexNotFound(RetrievalError):
    """The index (or alias) searched does not exist."""


class SearchRefused(RetrievalError):
    """The cluster refused one side of a hybrid search for the credentials
    it came with (401, 403): the caller's, when a gateway forwards them."""

    def __init__(self, status: int, error: Any):
        super().__init__(f"the cluster refused the search ({status}): {error}")
        self.status, self.error = status, error


class SearchRejected(RetrievalError):
    """The cluster refused one side of a hybrid search as asked (a 4xx: a
    filter it cannot parse, a value of the wrong type): ``status`` and
    ``error`` are its own, passed on as it would answer the search itself;
    the message names the first root cause's reason."""

    def __init__(self, status: int, error: Any):
        causes = error.get("root_cause") if isinstance(error, dict) else None
        first = causes[0] if isinstance(causes, list) and causes and isinstance(causes[0], dict) else {}
        reason = first.get("reason") or (error.get("reason") if isinstance(error, dict) else None)
        super().__init__(f"one side of the hybrid search failed ({status}): {reason or 'no reason given'}")
        self.status, self.error = status, error


class SearchFailed(RuntimeError):
    """The cluster could not run one side of a hybrid search (every shard of
    it failed, or it was overloaded): ``status`` and ``error`` are its own,
    passed on rather than blamed on the request."""

    def __init__(self, status: int, error: Any):
        reason = error.get("reason") if isinstance(error, dict) else None
        super().__init__(f"the cluster could not run the search ({status}): {reason or error}")
        self.status, self.error = status, error


@dataclass(frozen=True, slots=True)
class Hit:
    """A hit of one side of a client-fused search, as fusion needs it: its
    fusion key (the chunk id, or the collapse value), where its chunk lives
    and the side's score. The chunk itself is fetched once fusion kept it."""

    key: str
    index: str
    id: str
    score: float

    @property
    def where(self) -> tuple[str, str]:
        return self.index, self.id


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    chunks: tuple[Chunk, ...]
    mode: str
    # How the mode was carried out: "native" (one request, fused by the
    # cluster), "retriever" (a fusion retriever), "client" (fused here).
    fusion: str
    took_ms: float
    embed_ms: float
    # The embedded query, for callers that compare it with chunk vectors
    # (the evaluation's cosine baseline) without embedding it again.
    query_vector: tuple[float, ...] | None = None
    # How many shards answered, the worst over the cluster searches made.
    shards: Shards = shards.ONE


class HybridRetriever:
    def __init__(
        self,
        client: SearchBackend,
        embedder: Embedder,
        index: str,
        settings: RetrievalSettings = RetrievalSettings(),
        capabilities: ClusterCapabilities | None = None,
    ):
        # Elasticsearch or OpenSearch, behind the backend seam.
        self.client = client
        self.embedder = embedder
        self.index = index
        self.settings = settings
        self._capabilities = capabilities

    @property
    def capabilities(self) -> ClusterCapabilities:
        if self._capabilities is None:
            self._capabilities = self.client.capabilities()
        return self._capabilities

    def _offers_hybrid_query(self) -> bool:
        # Capabilities given (or probed already) answer it; else the backend
        # does, without a probe where the engine can have no such query.
        if self._capabilities is not None:
            return self._capabilities.has_hybrid_query
        return self.client.offers_hybrid_query()

    def _spec(
        self, text: str, *, size: int | None, filters: Sequence[Mapping[str, Any]], **options: Any
    ) -> tuple[QuerySpec, float]:
        started = time.perf_counter()
        vector = self.embedder.embed([text])[0]
        # Base chunks only: the larger scales of ensembling share the index.
        filters = (*filters, schema.base_scale_filter())
        spec = QuerySpec(
            text=text,
            vector=vector,
            size=size or self.settings.size,
            num_candidates=self.settings.num_candidates,
            filters=filters,
            **options,
        )
        return spec, (time.perf_counter() - started) * 1000

    def search(
        self,
        text: str,
        *,
        mode: str | None = None,
        size: int | None = None,
        filters: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> RetrievalResult:
        mode = mode or self.settings.mode
        if mode not in MODES:
            raise RetrievalError(f"unknown retrieval mode {mode!r}; choose one of {', '.join(MODES)}")
        if not text.strip():
            raise RetrievalError("the query text is empty")
        spec, embed_ms = self._spec(text, size=size, filters=filters, **options)
        started = time.perf_counter()
        chunks, tally, how = self._run(mode, spec)
        return RetrievalResult(
            tuple(chunks),
            mode,
            how,
            round((time.perf_counter() - started) * 1000, 2),
            round(embed_ms, 2),
            tuple(spec.vector),
            tally,
        )

    def _run(self, mode: str, spec: QuerySpec) -> tuple[list[Chunk], Shards, str]:
        w_text, w_knn = self.settings.bm25_weight, self.settings.knn_weight
        if mode == "bm25":
            return *self._hits(queries.bm25_body(spec)), "native"
        if mode == "knn":
            return *self._hits(queries.knn_body(spec)), "native"
        if mode == "native_sum":
            return *self._hits(queries.native_sum_body(spec, w_text, w_knn)), "native"
        if mode == "linear":
            if not self.capabilities.has_linear_retriever:
                raise RetrievalError(
                    "this cluster offers no `linear` retriever "
                    "(Elasticsearch offers it with an Enterprise licence, OpenSearch not at all); "
                    "use mode `minmax`, the same fusion done client-side"
                )
            return *self._hits(queries.linear_retriever_body(spec, w_text, w_knn)), "retriever"
        if mode == "rrf" and self.capabilities.has_rrf_retriever:
            return *self._hits(queries.rrf_retriever_body(spec, self.settings.rrf_rank_constant)), "retriever"
        if mode == "minmax" and not spec.collapse_field and self._offers_hybrid_query():
            # A cluster with a native `hybrid` query (OpenSearch's neural-search):
            # the same min-max fusion in the cluster (unboosted BM25 and kNN
            # as the hybrid's sub-queries).
            response = self.client.hybrid_search(self.index, queries.native_sum_body(spec, None, None), [w_text, w_knn])
            return (
                [self._chunk(hit) for hit in response["hits"]["hits"]],
                shards.of_response(response) or shards.ONE,
                "native",
            )
        # Fuse on the collapse key when collapsing (BM25 and kNN may pick
        # different best chunks of one document), else on the chunk id.
        bodies = queries.msearch_bodies(spec, self.index, sources=False)
        (text_hits, knn_hits), tally = self._msearch_all(bodies, spec.collapse_field)
        fused = self._client_fused(mode, spec.size, text_hits, knn_hits)
        found, fetched = self._fetch(spec, [hit for _, hit, _ in fused])
        chunks = [found[hit.where].with_score(score, **sides) for sides, hit, score in fused if hit.where in found]
        return chunks, shards.worst([tally, fetched]), "client"

    def search_ensemble(
        self, text: str, *, size: int | None = None, max_span_chars: int | None = None, **options: Any
    ) -> RetrievalResult:
        """Multi-scale ensembling: :meth:`ensemble_candidates` (every scale
        in one ``_msearch``, each fused and min-max normalised on its own,
        then merged), de-duplicated by span (``search_extension.ensemble``).
        Returns at most ``size`` spans, the score of each its ensemble
        score. No span is longer than ``max_span_chars`` (by default the
        largest scale's chunk length, or the longest base chunk retrieved
        when that is longer: the base chunker's ~500-character chunks
        outgrow small scales, and a base chunk is never dropped for its
        length alone)."""
        ranked = self.ensemble_candidates(text, size=size, **options)
        scales = options.get("scales", DEFAULT_SCALES)
        cap = max_span_chars
        if cap is None:
            longest_base = max((c.end - c.start for c in ranked.chunks if c.scale == BASE_SCALE), default=0)
            cap = max(max(scales, default=0) * CHARS_PER_TOKEN, longest_base) or None
        chunks = ensemble.merge_spans(ranked.chunks, size or self.settings.size, cap)
        return replace(ranked, chunks=tuple(chunks))

    def ensemble_candidates(
        self,
        text: str,
        *,
        scales: Sequence[int] = DEFAULT_SCALES,
        mode: str | None = None,
        size: int | None = None,
        filters: Sequence[Mapping[str, Any]] = (),
        weights: Mapping[int, float] | None = None,
        **options: Any,
    ) -> RetrievalResult:
        """The fused chunks of every scale before de-duplication by span
        (``size`` from each scale), best first: for callers that
        de-duplicate under caps of their own (``ensemble.merge_spans``)."""
        mode = mode or self.settings.mode
        if mode not in ENSEMBLE_MODES:
            raise RetrievalError(
                f"ensembling fuses each scale client-side: use mode {' or '.join(ENSEMBLE_MODES)}, not {mode!r}"
            )
        if options.get("collapse_field"):
            raise RetrievalError("ensembling returns spans, not one chunk per field value: it cannot collapse")
        if not text.strip():
            raise RetrievalError("the query text is empty")
        all_scales = (BASE_SCALE, *sorted({int(s) for s in scales if int(s) != BASE_SCALE}))
        started = time.perf_counter()
        vector = self.embedder.embed([text])[0]
        embed_ms = (time.perf_counter() - started) * 1000
        size = size or self.settings.size
        specs = [
            QuerySpec(
                text=text,
                vector=vector,
                size=size,
                num_candidates=self.settings.num_candidates,
                filters=(*filters, schema.scale_filter(scale)),
                **options,
            )
            for scale in all_scales
        ]
        started = time.perf_counter()
        bodies = [body for spec in specs for body in queries.msearch_bodies(spec, self.index, sources=False)]
        sides, tally = self._msearch_all(bodies)
        per_scale, best = [], {}
        for scale, text_hits, knn_hits in zip(all_scales, sides[0::2], sides[1::2]):
            fused = self._client_fused(mode, size, text_hits, knn_hits)
            per_scale.append((scale, [(hit.key, score) for _, hit, score in fused]))
            best.update((hit.key, (hit, score, scores)) for scores, hit, score in fused)
        found, fetched = self._fetch(specs[0], [hit for hit, _, _ in best.values()])
        ranked = []
        for key, score in ensemble.fuse_scales(per_scale, weights):
            hit, hybrid, scores = best[key]
            if hit.where in found:
                ranked.append(found[hit.where].with_score(score, **scores, hybrid=hybrid))
        tally = shards.worst([tally, fetched])
        return RetrievalResult(
            tuple(ranked),
            mode,
            "ensemble",
            round((time.perf_counter() - started) * 1000, 2),
            round(embed_ms, 2),
            tuple(float(v) for v in vector),
            tally,
        )

    def _client_fused(
        self, mode: str, size: int, text_hits: Sequence[Hit], knn_hits: Sequence[Hit]
    ) -> list[tuple[dict[str, float], Hit, float]]:
        """One scale's BM25 and kNN hits fused client-side (minmax or rrf),
        best first: each kept hit's per-side scores, the hit (the BM25
        side's where both sides found one key) and its fused score."""
        lists = [[(hit.key, hit.score) for hit in side] for side in (text_hits, knn_hits)]
        if mode == "minmax":
            fused = fusion.minmax_fuse(lists, [self.settings.bm25_weight, self.settings.knn_weight], size)
        else:
            fused = fusion.rrf_fuse(lists, size, self.settings.rrf_rank_constant)
        found = {hit.key: hit for hit in (*knn_hits, *text_hits)}
        sides = side_scores(lists[0], lists[1])
        return [(sides[key], found[key], score) for key, score in fused]

    def _fetch(self, spec: QuerySpec, hits: Sequence[Hit]) -> tuple[dict[tuple[str, str], Chunk], Shards | None]:
        """The chunks of the hits fusion kept, in one search, by index and id.
        A chunk deleted (or its shard lost) since the first search is left out,
        and the tally says so for a shard."""
        if not hits:
            return {}, None
        ids_by_index: dict[str, list[str]] = {}
        for hit in hits:
            ids_by_index.setdefault(hit.index, []).append(hit.id)
        response = self.client.search(self.index, queries.fetch_body(spec, ids_by_index))
        found = {(doc["_index"], doc["_id"]): self._chunk(doc) for doc in response["hits"]["hits"]}
        return found, shards.of_response(response)

    def _hits(self, body: dict[str, Any]) -> tuple[list[Chunk], Shards]:
        response = self.client.search(self.index, body)
        return [self._chunk(hit) for hit in response["hits"]["hits"]], shards.of_response(response) or shards.ONE

    def _chunk(self, hit: Mapping[str, Any]) -> Chunk:
        """A hit as a chunk; a hit that is not one (an index not made by
        ingestion) is the caller's error, named, not a failure of the gateway."""
        try:
            return chunk_from_hit(hit)
        except (KeyError, TypeError, ValueError) as exc:
            raise RetrievalError(
                f"index [{self.index}] does not hold chunks as `chunkrag ingest` writes them "
                f"(a hit lacks or mistypes {exc}); chunk retrieval searches chunk indices only: "
                'leave ext.chunkrag mode unset, or set "mode": "post_search", to filter the passages of its hits'
            ) from None

    def _msearch_all(
        self, searches: Sequence[Mapping[str, Any]], collapse_field: str | None = None
    ) -> tuple[list[list[Hit]], Shards]:
        """The hits of each search of one ``_msearch``, keyed for fusion, and
        the worst shard tally among them. A search that failed as a whole
        fails the request with the cluster's own status and error."""
        response = self.client.msearch(searches)
        sides, tallies = [], []
        for item in response["responses"]:
            if "error" in item:
                error = item["error"]
                if item.get("status") == 404 or (
                    isinstance(error, dict) and error.get("type") == "index_not_found_exception"
                ):
                    raise IndexNotFound(f"no such index [{self.index}]")
                status = int(item.get("status") or 0)
                if status in (401, 403):
                    raise SearchRefused(status, error)
                if status == 429 or status >= 500:
                    raise SearchFailed(status, error)
                raise SearchRejected(status or 400, error)
            sides.append([_hit(item_hit, collapse_field) for item_hit in item["hits"]["hits"]])
            tallies.append(shards.of_response(item))
        return sides, shards.worst(tallies)


def side_scores(text_side: fusion.Ranked, knn_side: fusion.Ranked) -> dict:
    """Per hit, what each side of the hybrid search thought of it: ``bm25``
    and ``knn`` min-max normalised over this search's hits (0 where a side
    did not return the hit), and ``cosine``, the raw query-chunk cosine read
    back from the kNN score (Elasticsearch and OpenSearch's Lucene engine
    both report a cosine similarity as (1 + cos) / 2). The chunk filter's
    calibrated judge uses them as cheap relevance signals."""
    bm25, knn = fusion.minmax_normalise(text_side), fusion.minmax_normalise(knn_side)
    raw_knn = dict(knn_side)
    scores = {}
    for key in {*bm25, *knn}:
        entry = {"bm25": round(bm25.get(key, 0.0), 6), "knn": round(knn.get(key, 0.0), 6)}
        if key in raw_knn:
            entry["cosine"] = round(2.0 * raw_knn[key] - 1.0, 6)
        scores[key] = entry
    return scores


def _hit(hit: Mapping[str, Any], collapse_field: str | None) -> Hit:
    return Hit(_fusion_key(hit, collapse_field), hit["_index"], hit["_id"], float(hit.get("_score") or 0.0))


def _fusion_key(hit: Mapping[str, Any], collapse_field: str | None) -> str:
    if collapse_field:
        values = (hit.get("fields") or {}).get(collapse_field) or [None]
        return f"{collapse_field}={values[0]}"
    return hit["_id"]
