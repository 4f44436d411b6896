"""Post-search: the chunk filter over the hits of a caller's own search.

The cluster's scoring, filters, aggregations, sort, paging and security
decide *which documents*; this module decides *which passages of those
documents*. Each hit's text fields, as the caller's search returned them,
are split into passages (a :class:`PassageSource`), every passage of every
hit is scored together by the same filter as ``ext.chunkrag`` on a chunk
index (redundancy, the calibrated default, the judge when asked, threshold,
rerank), and the response keeps the cluster's shape with the kept passages
added to each hit. Nothing here reads anything but the response it is given
(and the passages of its hits): the cost is O(hits), whatever the index holds.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers import Embedder
from chunkrag_core.providers.chat import ChatModel
from chunkrag_filter.judging import JudgeMany
from chunkrag_filter.pipeline import FilterOptions, FilterResult, run_filter
from chunkrag_filter.processors.answer import Answer, answer_from_chunks
from ingest_pipeline.source_fields import SourceField, title_value
from search_extension.bm25 import bm25_scores
from search_extension.passages import PassageSource, ScoringPassageSource
from search_extension.text_fields import TextFields, field_text

# Passages of one hit that go to the filter: the best by the cheap passage
# score (BM25 and cosine over this response's passages). A very long
# document yields hundreds of passages; past this many the rest are left
# out (counted per hit and in total as "capped"), so one document cannot
# crowd out the others nor make judging cost grow with its length.
DEFAULT_MAX_PASSAGES = 32
EMPTY_HITS = ("keep", "drop")
# Share of a passage's pre-filter score taken from its hit's whole-document
# vector similarity, when the source index holds one (a declared
# dense_vector field): it orders the candidates (and so which reach the
# judge first) but is never a passage's own vector or cosine.
DOC_PRIOR_WEIGHT = 0.2


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
    filtered: FilterResult | None  # None without the model stages
    answer: Answer | None
    candidates: int  # passages that went to the filter
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    # Where the passages were scored: "engine" (a companion index scored
    # them and only the candidates were read) or "here" (read, then scored
    # in-process).
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
) -> PostSearchResult:
    """The filter over the passages of ``response``'s hits (the cluster's
    answer to the caller's own search). ``fields_of(index)`` names the text
    fields of a hit's concrete index; ``weights`` are BM25's and the
    cosine's shares of the passage score (the retrieval settings')."""
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

    engine = None
    if all_fields and isinstance(passage_source, ScoringPassageSource):
        engine = passage_source.scored(
            [sources for _, _, sources in read],
            query=query,
            query_vector=query_vector,
            doc_cosines=doc_cosines,
            weights=weights,
            max_passages=options.max_passages,
            # Only the redundancy stage compares passages by their vectors.
            with_vectors=options.stages and filter_options.redundancy_threshold is not None,
        )
    if engine is not None:
        best_per_hit, capped = [list(best) for best in engine.best], list(engine.capped)
        lap("passages")
    else:
        by_field = passage_source.passages(all_fields, query=query) if all_fields else {}
        lap("passages")
        per_hit_chunks = [[c for s in sources for c in by_field.get(s.companion_id, ())] for _, _, sources in read]
        scored = score_passages(query, query_vector, per_hit_chunks, doc_cosines, weights)
        best_per_hit, capped = [], []
        for chunks in scored:
            best = sorted(chunks, key=lambda c: -(c.score or 0.0))
            best_per_hit.append(best[: options.max_passages])
            capped.append(max(0, len(best) - options.max_passages))
        lap("scoring")

    candidates = [c for best in best_per_hit for c in best]
    candidates.sort(key=lambda c: -(c.score or 0.0))

    filtered = None
    if options.stages and candidates:
        filtered = run_filter(
            query,
            candidates,
            model=model,
            options=filter_options,
            judge_many=judge_many,
            reranker=reranker,
            relevance_model=relevance_model,
        )
        timings.update({f"filter_{k}": v for k, v in filtered.timings_ms.items()})
        kept_all = list(filtered.kept)
        dropped_all = [(d.chunk, d.reason) for d in filtered.decisions if not d.kept]
    else:
        kept_all, dropped_all = list(candidates), []
    clock = time.perf_counter()

    answer = None
    if filtered is not None and filter_options.answer and model is not None:
        answer = answer_from_chunks(query, kept_all, model)
        lap("answer")

    hits = []
    for i, (hit, text_fields, sources) in enumerate(read):
        owner = {s.companion_id for s in sources}
        kept = sorted(
            (c for c in kept_all if c.doc_id in owner),
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
                dropped=tuple((c, r) for c, r in dropped_all if c.doc_id in owner),
                capped=capped[i],
                doc_cosine=doc_cosines[i],
                not_prose=refused[i],
            )
        )
    timings["total"] = round((time.perf_counter() - started) * 1000, 1)
    return PostSearchResult(
        query,
        tuple(hits),
        filtered,
        answer,
        len(candidates),
        timings,
        "engine" if engine is not None else "here",
        per_index,
    )


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
    hit_of: Sequence[int],
    bm25: Sequence[float],
    similarities: Sequence[float],
    cosines: Sequence[float],
    doc_cosines: Sequence[float | None],
    weights: tuple[float, float] = (0.5, 0.5),
) -> list[PassageScore]:
    """The numeric core of the passage score, one per passage (``hit_of``:
    its hit's number): ``bm25`` (raw) and ``similarities`` ((1 + cos) / 2,
    the kNN score) min-max normalised over all passages of the response,
    their weighted sum, with the hit's whole-document cosine as a prior when
    known; ``cosines`` are reported raw (rounded)."""
    b_norm, k_norm = minmax(bm25), minmax(similarities)
    known = [x for x in doc_cosines if x is not None]
    priors = dict(zip([i for i, x in enumerate(doc_cosines) if x is not None], minmax(known)))
    w_bm25, w_knn = weights
    total = (w_bm25 + w_knn) or 1.0
    out = []
    for h, cosine, b, k in zip(hit_of, cosines, b_norm, k_norm):
        score = (w_bm25 * b + w_knn * k) / total
        if h in priors:
            score = (1 - DOC_PRIOR_WEIGHT) * score + DOC_PRIOR_WEIGHT * priors[h]
        out.append(PassageScore(round(score, 6), round(b, 6), round(k, 6), round(cosine, 6)))
    return out


def score_passages(
    query: str,
    query_vector: np.ndarray,
    per_hit: Sequence[Sequence[Chunk]],
    doc_cosines: Sequence[float | None],
    weights: tuple[float, float] = (0.5, 0.5),
) -> list[list[Chunk]]:
    """Every passage with the signals the filter's calibration reads, as the
    hybrid search gives a chunk: ``bm25`` (over the passages' texts) and
    ``knn`` (their vectors' cosine) min-max normalised over all passages of
    the response, ``cosine`` raw; its score is their weighted sum (with a
    hit's whole-document cosine as a prior, when known)."""
    flat = [(h, c) for h, chunks in enumerate(per_hit) for c in chunks]
    if not flat:
        return [[] for _ in per_hit]
    cosines = [
        float(np.asarray(c.vector, dtype=np.float32) @ query_vector) if c.vector is not None else 0.0 for _, c in flat
    ]
    scores = passage_scores(
        [h for h, _ in flat],
        bm25_scores(query, [c.text for _, c in flat]),
        [(1.0 + x) / 2.0 for x in cosines],
        cosines,
        doc_cosines,
        weights,
    )
    out: list[list[Chunk]] = [[] for _ in per_hit]
    for (h, chunk), scored in zip(flat, scores):
        signals = scored.signals()
        out[h].append(dataclasses.replace(chunk, score=scored.score, stage_scores={**chunk.stage_scores, **signals}))
    return out


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
