"""Post-search: the chunk filter over the hits of a caller's own search.

The cluster's scoring, filters, aggregations, sort, paging and security
decide *which documents*; this module decides *which passages of those
documents*. Each hit's text fields, as the caller's search returned them,
are split into passages (a :class:`PassageSource`), and each hit's passages
are scored and filtered on their own by the same filter as ``ext.chunkrag``
on a chunk index (redundancy, the calibrated default, the judge when asked,
threshold, rerank): a hit's passages and their decisions depend on that hit
and the query alone, never on which other hits share its page. The response
keeps the cluster's shape with the kept passages added to each hit. Nothing
here reads anything but the response it is given (and the passages of its
hits): the cost is O(hits), whatever the index holds.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers import Embedder
from chunkrag_core.providers.chat import ChatModel
from chunkrag_filter.budget import BudgetSpent, merged_ran_out
from chunkrag_filter.judging import JudgeMany
from chunkrag_filter.pipeline import Decision, FilterOptions, FilterResult, recounted, run_filter, undecided
from chunkrag_filter.processors.answer import Answer, answer_from_chunks
from chunkrag_filter.processors.thresholds import Threshold
from ingest_pipeline.source_fields import SourceField, title_value
from search_extension.bm25 import bm25_scores
from search_extension.passages import PassageSource, ScoringPassageSource
from search_extension.text_fields import TextFields, field_text

# Passages of one hit that go to the filter: the best by the cheap passage
# score (BM25 and cosine over the hit's own passages). A very long document
# yields hundreds of passages; past this many the rest are left out
# (counted per hit and in total as "capped"), so judging cost does not grow
# with a document's length.
DEFAULT_MAX_PASSAGES = 32
# The gate of each hit of a cluster's response when the caller names none:
# the cheap one (the cross-encoder gate, the filter's default, is chosen for
# a pool of candidates; read for every hit it costs ~2 s per 10 hits on two
# cores, the retrieval gate ~10 ms: results/post_search_gate.json).
POST_SEARCH_GATE = "retrieval"
EMPTY_HITS = ("keep", "drop")


@dataclass(frozen=True, slots=True)
class PostSearchOptions:
    """What the caller's ``ext.chunkrag`` says about post-search itself."""

    fields: tuple[str, ...] = ()
    title_field: str | None = None
    empty_hits: str = "keep"  # keep: kept and marked; drop: left out of hits.hits
    max_passages: int = DEFAULT_MAX_PASSAGES
    include_dropped: bool = False
    # False: no filter; every passage (within the cap) is kept, scored by
    # the cheap signals alone.
    stages: bool = True
    # The gate each hit is read by, over the filter options' own (None:
    # theirs); ext.chunkrag without a gate asks for POST_SEARCH_GATE.
    gate: str | None = None


@dataclass(frozen=True, slots=True)
class HitPassages:
    """What post-search made of one hit of the cluster's response."""

    index: str
    doc_id: str
    fields: tuple[str, ...]  # the text fields read for this hit
    has_text: bool  # False: the hit showed none of them ("no text")
    kept: tuple[Chunk, ...] = ()  # best first
    dropped: tuple[tuple[Chunk, str], ...] = ()  # with the filter's reason
    capped: int = 0  # passages over the per-hit cap, never judged
    doc_cosine: float | None = None  # the whole-document vector's, when one is declared
    # The cut this hit's passages were filtered at (None: not filtered).
    threshold: Threshold | None = None
    # Detected fields this hit holds whose value is not prose (JSON, a URL,
    # an id, a short label), each with why: not split.
    not_prose: tuple[tuple[str, str], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.index}/{self.doc_id}"


@dataclass(frozen=True, slots=True)
class PostSearchResult:
    query: str
    hits: tuple[HitPassages, ...]  # in the cluster's order
    # Every hit's filter run as one (`merged_results`); None without the
    # model stages or without a passage to filter.
    filtered: FilterResult | None
    answer: Answer | None
    candidates: int  # passages that went to the filter
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    # Where the hits' passages were scored: "engine" (a companion index
    # scored them and only the candidates were read), "here" (read, or
    # chunked now, then scored in-process), or "both" (each hit one way).
    scored_by: str = "here"
    # Per concrete index of the hits: the fields read, how they were chosen
    # and those left out.
    fields: Mapping[str, TextFields] = field(default_factory=dict)

    @property
    def capped(self) -> int:
        return sum(h.capped for h in self.hits)


# --- the library call ------------------------------------------------------------


def post_search(
    response: Mapping[str, Any],
    *,
    query: str,
    options: PostSearchOptions,
    filter_options: FilterOptions,
    fields_of: Callable[[str], TextFields],
    passage_source: PassageSource,
    embedder: Embedder,
    model: ChatModel | None = None,
    judge_many: JudgeMany | None = None,
    reranker=None,
    relevance_model=None,
    weights: tuple[float, float] = (0.5, 0.5),
    doc_vector_field: str | None = None,
    pooled: bool = False,
) -> PostSearchResult:
    """The filter over the passages of ``response``'s hits (the cluster's
    answer to the caller's own search), each hit's on their own.
    ``fields_of(index)`` names the text fields of a hit's concrete index;
    ``weights`` are BM25's and the cosine's shares of the passage score
    (the retrieval settings'). ``pooled``: the hits are one pool of
    candidates, as a framework's retrieved texts are (``chunkrag_adapters``),
    whose passages are scored and filtered together, as a chunk retrieval's
    candidates are; passages are then never scored by a companion."""
    timings: dict[str, float] = {}
    started = clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round((now - clock) * 1000, 1)
        clock = now

    raw_hits = hits_of(response)
    read: list[tuple[Mapping[str, Any], TextFields, list[SourceField]]] = []
    refused: list[tuple[tuple[str, str], ...]] = []
    per_index: dict[str, TextFields] = {}
    for hit in raw_hits:
        index, doc_id = str(hit.get("_index", "")), str(hit.get("_id", ""))
        text_fields = per_index.setdefault(index, fields_of(index))
        title = (field_text(hit, text_fields.title) or "") if text_fields.title else ""
        sources, not_prose = [], []
        for name in text_fields.fields:
            text = field_text(hit, name)
            if text is None:
                continue
            why = text_fields.prose(text)
            if why is None:
                sources.append(SourceField(index, doc_id, name, text, title=title_value(title)))
            else:
                not_prose.append((name, why))
        read.append((hit, text_fields, sources))
        refused.append(tuple(not_prose))
    all_fields = [source for _, _, sources in read for source in sources]
    query_vector = np.asarray(embedder.embed([query])[0], dtype=np.float32)
    doc_cosines = [_doc_cosine(hit, doc_vector_field, query_vector) for hit, _, _ in read]
    lap("embedding")

    # The hits whose passages are scored and filtered together: each hit
    # alone, so what the filter reads of a passage (the signals'
    # normalisation, its rank, the best cosine, the cut, the fallback, the
    # judge's batches) is its hit's and not the page's; or one pool.
    pools = [list(range(len(read)))] if pooled else [[i] for i in range(len(read))]
    if not pooled and options.gate is not None:
        filter_options = dataclasses.replace(filter_options, gate=options.gate)

    engine = None
    if all_fields and not pooled and isinstance(passage_source, ScoringPassageSource):
        engine = passage_source.scored(
            [sources for _, _, sources in read],
            query=query,
            query_vector=query_vector,
            weights=weights,
            max_passages=options.max_passages,
            # Only the redundancy stage compares passages by their vectors.
            with_vectors=options.stages and filter_options.redundancy_threshold is not None,
        )
    # Each hit the engine scored (a companion's) brings its candidates; the
    # passages of the others are read, or chunked now, and scored here.
    served: list[tuple[Chunk, ...] | None] = list(engine.best) if engine is not None else [None] * len(read)
    rest = [source for (_, _, sources), got in zip(read, served) if got is None for source in sources]
    by_field = passage_source.passages(rest, query=query) if rest else {}
    lap("passages")
    best_per_hit: list[list[Chunk]] = [list(got or ()) for got in served]
    capped = list(engine.capped) if engine is not None else [0] * len(read)
    for pool in pools:
        mine = [i for i in pool if served[i] is None]
        chunks = [[c for s in read[i][2] for c in by_field.get(s.companion_id, ())] for i in mine]
        for i, scored in zip(mine, scored_together(query, query_vector, chunks, weights)):
            best = sorted(scored, key=lambda c: -(c.score or 0.0))
            best_per_hit[i] = best[: options.max_passages]
            capped[i] = max(0, len(best) - options.max_passages)
    lap("scoring")

    runs: list[FilterResult] = []
    run_of: list[FilterResult | None] = [None] * len(read)
    for pool in pools:
        candidates = sorted((c for i in pool for c in best_per_hit[i]), key=lambda c: -(c.score or 0.0))
        if not (options.stages and candidates):
            continue
        run = run_filter(
            query,
            candidates,
            model=model,
            options=filter_options,
            judge_many=judge_many,
            reranker=reranker,
            relevance_model=relevance_model,
        )
        runs.append(run)
        for i in pool:
            run_of[i] = run
    filtered = merged_results(runs)
    if filtered is not None and (stage := undecided(filtered)) is not None:
        raise BudgetSpent(filtered.budget_s or 0.0, stage)
    if filtered is not None:
        timings.update({f"filter_{k}": v for k, v in filtered.timings_ms.items()})
    clock = time.perf_counter()

    answer = None
    if filtered is not None and filter_options.answer and model is not None:
        # The kept passages hit by hit in the cluster's order (a pool's in its filter's order).
        answer = answer_from_chunks(query, list(filtered.kept), model)
        lap("answer")

    hits = []
    for i, (hit, text_fields, sources) in enumerate(read):
        run, owner = run_of[i], {s.companion_id for s in sources}
        if run is None:  # no stages (every candidate kept), or no passage
            kept_here, dropped_here = best_per_hit[i], []
        else:
            kept_here = [c for c in run.kept if c.doc_id in owner]
            dropped_here = [(d.chunk, d.reason) for d in run.decisions if not d.kept and d.chunk.doc_id in owner]
        kept = sorted(
            kept_here,
            # Best first: by the reranker's score when one ordered the kept passages.
            key=lambda c: -c.stage_scores.get("rerank", c.stage_scores.get("combined", c.score or 0.0)),
        )
        hits.append(
            HitPassages(
                index=str(hit.get("_index", "")),
                doc_id=str(hit.get("_id", "")),
                fields=tuple(s.field for s in sources) or text_fields.fields,
                has_text=bool(sources),
                kept=tuple(kept),
                dropped=tuple(dropped_here),
                capped=capped[i],
                doc_cosine=doc_cosines[i],
                not_prose=refused[i],
                threshold=run.threshold if run is not None else None,
            )
        )
    timings["total"] = round((time.perf_counter() - started) * 1000, 1)
    by_engine = [got is not None for got, (_, _, sources) in zip(served, read) if sources]
    return PostSearchResult(
        query,
        tuple(hits),
        filtered,
        answer,
        sum(len(best) for best in best_per_hit),
        timings,
        "engine" if by_engine and all(by_engine) else "both" if any(by_engine) else "here",
        per_index,
    )


def merged_results(runs: Sequence[FilterResult]) -> FilterResult | None:
    """The filter runs of a response's hits (in the cluster's order) as one
    result: the kept passages and decisions hit after hit, the model calls,
    tokens and stage timings summed, "nothing relevant" when no hit had a
    passage that passed; the threshold when every hit's is the same cut
    (its mean and spread over every hit's scores), else None; the gate's
    reading of the hit it found likeliest to hold something relevant (so
    when nothing was, the reading that came closest says why); where
    judging and the relevance model ran as `where_ran` says. None without
    a run."""
    if not runs:
        return None
    timings: dict[str, float] = {}
    for run in runs:
        for name, ms in run.timings_ms.items():
            timings[name] = round(timings.get(name, 0.0) + ms, 1)
    judged_by, judged_by_reason = where_ran([(run.judged_by, run.judged_by_reason) for run in runs])
    relevance_by, relevance_by_reason = where_ran([(run.relevance_by, run.relevance_by_reason) for run in runs])
    decisions = tuple(d for run in runs for d in run.decisions)
    return FilterResult(
        kept=tuple(c for run in runs for c in run.kept),
        decisions=decisions,
        threshold=shared_threshold([run.threshold for run in runs], decisions),
        nothing_relevant=all(run.nothing_relevant for run in runs),
        model_calls=sum(run.model_calls for run in runs),
        cached_calls=sum(run.cached_calls for run in runs),
        prompt_tokens=sum(run.prompt_tokens for run in runs),
        completion_tokens=sum(run.completion_tokens for run in runs),
        timings_ms=timings,
        judged_by=judged_by,
        judged_by_reason=judged_by_reason,
        relevance_by=relevance_by,
        relevance_by_reason=relevance_by_reason,
        ran_out=recounted(merged_ran_out([run.ran_out for run in runs]), decisions),
        budget_s=next((run.budget_s for run in runs if run.budget_s is not None), None),
        gate=max((run.gate for run in runs if run.gate is not None), key=lambda g: g.probability, default=None),
    )


def where_ran(places: Sequence[tuple[str | None, str | None]]) -> tuple[str | None, str | None]:
    """Where a stage ran for the hits of a response, from each hit's (place,
    why not where meant to): the place of the last hit that fell back, if
    one did, with every reason once; else the place where it ran."""
    fell_back = [(by, why) for by, why in places if why]
    if fell_back:
        return fell_back[-1][0], "; ".join(dict.fromkeys(why for _, why in fell_back))
    return next((by for by, _ in places if by is not None), None), None


def shared_threshold(thresholds: Sequence[Threshold | None], decisions: Sequence[Decision]) -> Threshold | None:
    """The cut every hit was filtered at, when it is one (the default's
    fixed cut is), with the mean and spread of all the hits' scores; None
    when the hits' cuts differ (a cut computed from each hit's scores)."""
    known = [t for t in thresholds if t is not None]
    if not known or len({(t.value, t.method) for t in known}) > 1:
        return None
    mean, variance = score_spread(decisions)
    return Threshold(known[0].value, known[0].method, mean, variance**0.5, variance)


def score_spread(decisions: Sequence[Decision]) -> tuple[float, float]:
    """The mean and (population) variance of the filter's scores of ``decisions``."""
    scores = [d.chunk.stage_scores["combined"] for d in decisions if "combined" in d.chunk.stage_scores]
    mean = statistics.fmean(scores) if scores else 0.0
    return mean, statistics.pvariance(scores, mu=mean) if scores else 0.0


def hits_of(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    hits = response.get("hits")
    found = hits.get("hits") if isinstance(hits, Mapping) else None
    return [h for h in found if isinstance(h, Mapping)] if isinstance(found, list) else []


def _doc_cosine(hit: Mapping[str, Any], vector_field: str | None, query_vector: np.ndarray) -> float | None:
    """The cosine of the hit's whole-document vector (as the caller's hit
    shows it) with the query's; None when there is none of the right size."""
    if not vector_field:
        return None
    source = hit.get("_source")
    value = source.get(vector_field) if isinstance(source, Mapping) else None
    if value is None and isinstance(hit.get("fields"), Mapping):
        value = hit["fields"].get(vector_field)
    try:
        vector = np.asarray(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        return None
    if vector.shape != query_vector.shape or not np.all(np.isfinite(vector)):
        return None
    norm = float(np.linalg.norm(vector)) * float(np.linalg.norm(query_vector))
    return round(float(vector @ query_vector) / norm, 6) if norm > 0 else None


# --- the passage score (pure) ---------------------------------------------------------


def minmax(values: Sequence[float]) -> list[float]:
    """Min-max normalised; all 0.5 when they are equal (nothing tells them apart)."""
    if not values:
        return []
    low, high = min(values), max(values)
    return [0.5 if high == low else (v - low) / (high - low) for v in values]


@dataclass(frozen=True, slots=True)
class PassageScore:
    """One passage's pre-filter score and the signals the filter's
    calibration reads (``bm25``, ``knn`` normalised, ``cosine`` raw)."""

    score: float
    bm25: float
    knn: float
    cosine: float

    def signals(self) -> dict[str, float]:
        return {"bm25": self.bm25, "knn": self.knn, "cosine": self.cosine}


def passage_scores(
    bm25: Sequence[float],
    similarities: Sequence[float],
    cosines: Sequence[float],
    weights: tuple[float, float] = (0.5, 0.5),
) -> list[PassageScore]:
    """The numeric core of the passage score, for the passages of one hit
    (or one pool): ``bm25`` (raw) and ``similarities`` ((1 + cos) / 2, the
    kNN score) min-max normalised over them, as the hybrid search normalises
    each side over its hits, and their weighted sum; ``cosines`` are
    reported raw (rounded). Never over a page of hits: a passage's score
    depends on its hit and the query alone."""
    b_norm, k_norm = minmax(bm25), minmax(similarities)
    w_bm25, w_knn = weights
    total = (w_bm25 + w_knn) or 1.0
    return [
        PassageScore(round((w_bm25 * b + w_knn * k) / total, 6), round(b, 6), round(k, 6), round(cosine, 6))
        for cosine, b, k in zip(cosines, b_norm, k_norm)
    ]


def scored_together(
    query: str,
    query_vector: np.ndarray,
    per_hit: Sequence[Sequence[Chunk]],
    weights: tuple[float, float] = (0.5, 0.5),
) -> list[list[Chunk]]:
    """The passages of the hits given (one hit, or a pool), each with the
    signals the filter's calibration reads, as the hybrid search gives a
    chunk: ``bm25`` (these passages being the collection) and ``knn``
    (their vectors' cosine) min-max normalised over these passages,
    ``cosine`` raw; the score is their weighted sum (`passage_scores`)."""
    flat = [c for chunks in per_hit for c in chunks]
    cosines = [
        float(np.asarray(c.vector, dtype=np.float32) @ query_vector) if c.vector is not None else 0.0 for c in flat
    ]
    scores = iter(
        passage_scores(bm25_scores(query, [c.text for c in flat]), [(1.0 + x) / 2.0 for x in cosines], cosines, weights)
    )
    return [
        [
            dataclasses.replace(chunk, score=scored.score, stage_scores={**chunk.stage_scores, **scored.signals()})
            for chunk, scored in zip(chunks, scores)
        ]
        for chunks in per_hit
    ]


# --- vectors already in the source index -------------------------------------------


class VectorFieldError(ValueError):
    """A declared document vector field that cannot be used; says why."""


def declared_vector_field(settings) -> str | None:
    """CHUNKRAG_POST_SEARCH_VECTOR_FIELD when it may be used: its declared
    model (CHUNKRAG_POST_SEARCH_VECTOR_MODEL) must be the configured
    embedder's (CHUNKRAG_EMBED_MODEL), else the vectors of two models would
    be compared, which is refused here rather than mixed silently."""
    declared = settings.post_search
    if not declared.vector_field:
        return None
    if not declared.vector_model:
        raise VectorFieldError(
            "CHUNKRAG_POST_SEARCH_VECTOR_FIELD is set without CHUNKRAG_POST_SEARCH_VECTOR_MODEL: "
            "name the model that made the vectors"
        )
    if declared.vector_model != settings.embedder.model:
        raise VectorFieldError(
            f"CHUNKRAG_POST_SEARCH_VECTOR_MODEL is [{declared.vector_model}] but the configured embedder is "
            f"[{settings.embedder.model}] (CHUNKRAG_EMBED_MODEL): vectors of different models are not comparable; "
            "unset CHUNKRAG_POST_SEARCH_VECTOR_FIELD or configure the same model"
        )
    return declared.vector_field
