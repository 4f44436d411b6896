"""Ask a question of a chunk index: optional query rewriting, hybrid
retrieval, then the chunk filter. One call, used by the CLI, the gateway and
(through an injected ``judge_many``) the Celery workers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chunkrag_core.providers.chat import ChatModel
from search_extension.chunk_filter import FilterOptions, FilterResult, JudgeMany, judge_in_threads, run_filter
from search_extension.processors.rewrite import Rewrite, rewrite_query
from search_extension.retriever import HybridRetriever, RetrievalResult

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

    @property
    def query(self) -> str:
        """The text that was retrieved and judged with."""
        return self.rewrite.query if self.rewrite is not None else self.question

    @property
    def usage(self) -> Usage:
        rewrite_calls = 1 if self.rewrite is not None else 0
        rewrite_tokens = self.rewrite.prompt_tokens if self.rewrite is not None else 0
        f = self.filtered
        if f is None:
            return Usage(rewrite_calls, 0, rewrite_tokens, 0)
        return Usage(f.model_calls + rewrite_calls, f.cached_calls, f.prompt_tokens + rewrite_tokens, f.completion_tokens)


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
) -> AskResult:
    """Rewrite (optional), retrieve ``candidates`` chunks, filter them.

    With ``stages=False`` no model is called: the result is the hybrid
    retrieval alone (``filtered`` is None). ``judge_many`` decides where the
    judging runs; by default threads in this process, ``parallel`` at once.
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
    retrieval = retriever.search(query, mode=mode, size=candidates, filters=filters, include_vectors=wants_vectors)
    timings["embed"] = retrieval.embed_ms
    timings["retrieval"] = retrieval.took_ms
    filtered = None
    if stages:
        judge_many = judge_many or judge_in_threads(model, threads=parallel, model_name=model_name)
        filtered = run_filter(query, retrieval.chunks, model=model, options=options, judge_many=judge_many, reranker=reranker)
        timings.update(filtered.timings_ms)
    timings["total"] = _ms_since(started)
    return AskResult(question, retrieval, filtered, rewritten, timings)


def judge_many_for(settings, model: ChatModel | None, *, budget_s: float | None = None, cache=None, celery_app=None) -> JudgeMany:
    """Where judging runs, as ``settings.workers.judge`` says: on the Celery
    workers, or in threads here (``settings.chat.parallel`` at once)."""
    if settings.workers.judge == "celery":
        from workers.dispatch import celery_judge_many

        return celery_judge_many(celery_app, settings=settings, budget_s=budget_s)
    return judge_in_threads(model, threads=settings.chat.parallel, cache=cache, model_name=settings.chat.model, budget_s=budget_s)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
