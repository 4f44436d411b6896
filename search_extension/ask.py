"""Ask a question of a chunk index: optional query rewriting, hybrid
retrieval, the chunk filter, then the answer. One call, used by the CLI and
the gateway; where judging runs (threads here, or the Celery workers) comes
in as ``judge_many``, wired by the caller. The one place an answer is
written (:func:`answer_for`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatModel
from chunkrag_filter.budget import BudgetSpent
from chunkrag_filter.judging import JudgeMany, judge_in_threads
from chunkrag_filter.pipeline import FilterOptions, FilterResult, run_filter, undecided
from chunkrag_filter.processors.answer import Answer, answer_from_chunks
from chunkrag_filter.processors.rewrite import Rewrite, rewrite_query
from search_extension.neighbours import position_fetcher
from search_extension.retriever import HybridRetriever, RetrievalResult
from search_extension.segments import FetchPositions, Segment, SegmentSettings, extract_segments

# Candidates handed to the filter: each costs at least one model call.
DEFAULT_CANDIDATES = 8


@dataclass(frozen=True, slots=True)
class Usage:
    model_calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class AskResult:
    question: str
    retrieval: RetrievalResult
    # None when the model stages were switched off (retrieval only).
    filtered: FilterResult | None
    rewrite: Rewrite | None = None
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    # Relevant segments, best first, when asked for (None when not); the
    # answer, if any, was then written from them.
    segments: tuple[Segment, ...] | None = None
    # Written from the segments when there are any, else from the kept
    # chunks; None when not asked for or without the model stages.
    answer: Answer | None = None

    @property
    def query(self) -> str:
        """The text that was retrieved and judged with."""
        return self.rewrite.query if self.rewrite is not None else self.question

    @property
    def usage(self) -> Usage:
        rewrite_calls = 1 if self.rewrite is not None else 0
        rewrite_tokens = self.rewrite.prompt_tokens if self.rewrite is not None else 0
        a = self.answer
        calls, prompt_tokens, completion_tokens = (
            (a.calls, a.prompt_tokens, a.completion_tokens) if a is not None else (0, 0, 0)
        )
        f = self.filtered
        if f is None:
            return Usage(rewrite_calls + calls, 0, rewrite_tokens + prompt_tokens, completion_tokens)
        return Usage(
            f.model_calls + rewrite_calls + calls,
            f.cached_calls,
            f.prompt_tokens + rewrite_tokens + prompt_tokens,
            f.completion_tokens + completion_tokens,
        )


def ask(
    question: str,
    *,
    retriever: HybridRetriever,
    model: ChatModel,
    options: FilterOptions = FilterOptions(),
    candidates: int = DEFAULT_CANDIDATES,
    parallel: int = 2,
    model_name: str = "",
    mode: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    rewrite: bool = False,
    stages: bool = True,
    judge_many: JudgeMany | None = None,
    reranker=None,
    relevance_model=None,
    segments: SegmentSettings | None = None,
    fetch_positions: FetchPositions | None = None,
    ensemble: Sequence[int] | None = None,
) -> AskResult:
    """Rewrite (optional), retrieve ``candidates`` chunks, filter them.

    With ``stages=False`` no model is called: the result is the hybrid
    retrieval alone (``filtered`` is None). ``judge_many`` decides where the
    judging runs; by default threads in this process, ``parallel`` at once.
    ``relevance_model`` scores the candidates with ``relevance: crossencoder``
    (and orders the kept ones with ``rerank: local``); by default the
    project's model in this process.

    With ``segments``, relevant segment extraction runs over the candidates
    (relevance: the judge's probability, or the retrieval score without the
    model stages), missing neighbours come from the index in one request
    (``fetch_positions``, by default from the retriever's client), and the
    answer is written from the segments instead of the kept chunks.

    With ``ensemble`` (the larger scales the index holds), the candidates
    come from multi-scale ensembling (one ``_msearch`` over every scale,
    de-duplicated by span) instead of the base chunks alone; the filter and
    RSE take them as they take chunks.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    rewritten = None
    if rewrite and stages:
        rewritten = rewrite_query(question, model)
        timings["rewrite"] = _ms_since(started)
    query = rewritten.query if rewritten is not None else question
    # Vectors come along for the redundancy filter: nothing is re-embedded.
    wants_vectors = stages and options.redundancy_threshold is not None
    if ensemble is not None:
        retrieval = retriever.search_ensemble(
            query, scales=ensemble, mode=mode, size=candidates, filters=filters, include_vectors=wants_vectors
        )
    else:
        retrieval = retriever.search(query, mode=mode, size=candidates, filters=filters, include_vectors=wants_vectors)
    timings["embed"] = retrieval.embed_ms
    timings["retrieval"] = retrieval.took_ms
    filtered = None
    if stages:
        judge_many = judge_many or judge_in_threads(model, threads=parallel, model_name=model_name)
        filtered = run_filter(
            query,
            retrieval.chunks,
            model=model,
            options=options,
            judge_many=judge_many,
            reranker=reranker,
            relevance_model=relevance_model,
        )
        if (stage := undecided(filtered)) is not None:
            raise BudgetSpent(filtered.budget_s or 0.0, stage)
        timings.update(filtered.timings_ms)
    found: tuple[Segment, ...] | None = None
    if segments is not None:
        clock = time.perf_counter()
        fetch = fetch_positions or position_fetcher(retriever.client, retriever.index)
        found = tuple(extract_segments(judged_in_rank_order(retrieval, filtered), fetch, segments))
        timings["segments"] = _ms_since(clock)
    answer = None
    if filtered is not None and options.answer:
        clock = time.perf_counter()
        answer = answer_for(query, filtered, found, model)
        timings["answer"] = _ms_since(clock)
    timings["total"] = _ms_since(started)
    return AskResult(question, retrieval, filtered, rewritten, timings, found, answer)


def answer_for(
    query: str, filtered: FilterResult, segments: Sequence[Segment] | None, model: ChatModel, *, max_tokens: int = 256
) -> Answer:
    """The answer, from the relevant segments when there are any, else from
    the kept chunks (none when nothing relevant was kept and the fallback is
    "not_found": then "not found", without a call)."""
    # No segment worth its minimum value: answer from the kept chunks as usual.
    passages = [segment_as_chunk(s) for s in segments or ()] or list(filtered.kept)
    return answer_from_chunks(query, passages, model, max_tokens=max_tokens)


def judged_in_rank_order(retrieval: RetrievalResult, filtered: FilterResult | None) -> list[Chunk]:
    """The candidates in retrieval order, each with the judge's scores when
    it was judged."""
    judged = {d.chunk.chunk_id: d.chunk for d in filtered.decisions} if filtered is not None else {}
    return [judged.get(c.chunk_id, c) for c in retrieval.chunks]


def segment_as_chunk(segment: Segment) -> Chunk:
    """A segment as one passage for the answer prompt; a citation of it
    names the segment's first chunk."""
    return Chunk(
        doc_id=segment.doc_id,
        position=segment.first,
        text=segment.text,
        start=segment.start,
        end=segment.end,
        title=segment.title,
        header=segment.header,
    )


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
