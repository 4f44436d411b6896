"""Judging a query's candidates: how they are cut into batches, the record of
a chunk that was not judged, judging in this process's threads, and judging
that degrades (one place after another, the retrieval signals last) instead
of failing.

A ``JudgeMany`` takes (query, chunks, scoring options) and returns one
:class:`Judgement` per chunk, in order. Where it runs is injected: threads
here (:func:`judge_in_threads`), or Celery workers (``workers.dispatch``,
which sends the batches this module plans). This module knows only the core
and the other filter-library modules, never the workers or the gateway.
"""

from __future__ import annotations

import contextvars
import logging
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

from chunkrag_core import cancellation
from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatError, ChatModel
from chunkrag_filter import budget as budgets
from chunkrag_filter.processors import prompts
from chunkrag_filter.processors.relevance import Judgement, ScoreCache, ScoringOptions, judge, judge_listwise

log = logging.getLogger(__name__)

# The records judging trades in, for the workers, which reach the filter
# library through this module alone.
__all__ = [
    "BY_GATEWAY", "BY_RETRIEVAL", "BY_WORKERS", "Batch", "Degrading", "JudgeMany", "Judged", "Judgement",
    "JudgingUnavailable", "LATE", "Place", "ReportingJudge", "ScoringOptions", "judge_batch", "judge_candidates",
    "judge_in_threads", "passages", "plan_batches", "scoring_batches", "slices", "unscored", "within_request_budget",
]  # fmt: skip

JudgeMany = Callable[[str, Sequence[Chunk], ScoringOptions], list[Judgement]]

# How often a query judged in this process's threads looks whether its
# request is gone while it waits for the batches (seconds).
CANCEL_LOOK_S = 0.1

# Who judged a query's candidates (the ``judged_by`` of a filter result).
BY_WORKERS, BY_GATEWAY, BY_RETRIEVAL = "workers", "gateway", "retrieval"

# How the note of a chunk not judged for want of time begins (here and in
# the workers' dispatch): the filter counts those to say the budget ran out.
LATE = "not judged within the"


class JudgingUnavailable(RuntimeError):
    """This place cannot judge now (its broker, its workers or its model
    cannot be reached); another may. Raised before any judgement is made.
    The message may name addresses (for the log); ``reason`` says the same
    without them, for the caller's response."""

    def __init__(self, message: str, *, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


# --- the batch plan -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """Chunks ``start`` to ``stop`` (exclusive) of a query's candidates."""

    start: int
    stop: int


def scoring_batches(count: int, batch_size: int) -> list[list[int]]:
    """Indices 0..count-1 cut into consecutive batches of ``batch_size``,
    the last one no smaller than necessary: 10 by 9 gives 5 + 5, not 9 + 1,
    so no passage is judged against a lone neighbour."""
    if count <= 0:
        return []
    batches = -(-count // max(1, batch_size))
    base, extra = divmod(count, batches)
    out, start = [], 0
    for b in range(batches):
        size = base + (1 if b < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def slices(count: int, size: int) -> list[Batch]:
    """Consecutive slices of ``count`` items, ``size`` at most each."""
    if size < 1:
        raise ValueError(f"batch size must be at least 1, got {size}")
    return [Batch(start, min(start + size, count)) for start in range(0, count, size)]


def plan_batches(count: int, options: ScoringOptions, batch_size: int = 1) -> list[Batch]:
    """The batches one query's ``count`` candidates are judged in, one model
    call (listwise) or one unit of work each. A listwise judgement is relative
    to the passages judged with it, so listwise batches are cut the same way
    wherever they run; per-chunk methods give the same scores however chunks
    are grouped, so they go ``batch_size`` at a time."""
    if options.method == "listwise":
        return [Batch(part[0], part[-1] + 1) for part in scoring_batches(count, options.listwise_batch)]
    return slices(count, batch_size)


def passages(chunks: Sequence[Chunk], batch: Batch) -> list[str]:
    """A batch's chunks as the judge reads them (headers in front)."""
    return [prompts.passage(c.text, c.header) for c in chunks[batch.start : batch.stop]]


def unscored(reason: str) -> Judgement:
    """A chunk that was not judged, and why: the filter reports it "unscored"."""
    return Judgement(None, None, None, None, notes=(reason,))


def judge_batch(
    query: str,
    texts: Sequence[str],
    model: ChatModel,
    options: ScoringOptions = ScoringOptions(),
    *,
    cache: ScoreCache | None = None,
    model_name: str = "",
) -> list[Judgement]:
    """Judge several passages for one query, in order: the unit of work one
    thread or one worker task takes. Listwise judges them in one call per
    ``options.listwise_batch`` passages; the other methods one by one.
    Provider errors propagate as :class:`ChatError`."""
    if options.method == "listwise":
        judged: list[Judgement] = []
        for part in scoring_batches(len(texts), options.listwise_batch):
            cancellation.check()  # a request gone makes no more calls, cached or not
            judged.extend(
                judge_listwise(query, [texts[i] for i in part], model, options, cache=cache, model_name=model_name)
            )
        return judged
    judged = []
    for text in texts:
        cancellation.check()
        judged.append(judge(query, text, model, options, cache=cache, model_name=model_name))
    return judged


# --- judging in this process -----------------------------------------------------


def judge_in_threads(
    model: ChatModel, threads: int = 4, cache=None, model_name: str = "", budget_s: float | None = None
) -> JudgeMany:
    """Judging in this process: one batch per thread (a listwise batch, or
    a single chunk for the per-chunk methods). With ``budget_s``, a chunk not
    judged in time is returned unjudged (the filter reports it "unscored")
    instead of holding the answer back, the same contract as the Celery
    dispatcher. A provider error propagates as soon as it happens."""

    def judge_many(query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> list[Judgement]:
        batches = plan_batches(len(chunks), options)
        pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="judge")
        try:
            # Each batch runs in a copy of the caller's context (a trace's current span among it).
            futures = [
                pool.submit(
                    contextvars.copy_context().run,
                    judge_batch,
                    query,
                    passages(chunks, batch),
                    model,
                    options,
                    cache=cache,
                    model_name=model_name,
                )
                for batch in batches
            ]
            waited_s = within_request_budget(budget_s)
            done = _wait_for(futures, waited_s)
        finally:
            # Calls already in flight finish in the background (each bounded
            # by the chat timeout); queued ones never start.
            pool.shutdown(wait=False, cancel_futures=True)
        for future in done:
            if future.exception() is not None:
                raise future.exception()
        late = unscored(f"{LATE} budget of {waited_s:g} s") if waited_s is not None else None
        judgements: list[Judgement] = []
        for batch, future in zip(batches, futures):
            judgements.extend(future.result() if future in done else [late] * (batch.stop - batch.start))
        return judgements

    return judge_many


def within_request_budget(budget_s: float | None) -> float | None:
    """The seconds judging may wait: its own budget, and no more than what
    the request's model-stage budget has left (``chunkrag_filter.budget``;
    the stages before judging spent the rest)."""
    request = budgets.current()
    if request is None:
        return budget_s
    left = request.remaining()
    return left if budget_s is None else min(budget_s, left)


def _wait_for(futures: Sequence[Future], budget_s: float | None) -> set[Future]:
    """The batches done within ``budget_s`` (all of them, or up to the
    first failure), waking as soon as the request they serve is gone: then
    its thread raises :class:`~chunkrag_core.cancellation.Cancelled` at
    once instead of waiting out the budget (the batches not started never
    start; those in flight stop at their next call)."""
    token = cancellation.current()
    end = None if budget_s is None else time.monotonic() + budget_s
    pending = set(futures)
    while pending:
        remaining = None if end is None else end - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        look = remaining if token is None else min(CANCEL_LOOK_S, CANCEL_LOOK_S if remaining is None else remaining)
        done, pending = wait(pending, timeout=look, return_when=FIRST_EXCEPTION)
        if any(future.exception() is not None for future in done):
            break
        cancellation.check()
    return {future for future in futures if future.done()}


# --- who judged, and judging that degrades ---------------------------------------


@dataclass(frozen=True, slots=True)
class Judged:
    """A query's judgements and where they were made. ``by`` is None when
    the caller's judge did not say; ``reason`` says why judging did not run
    where it was meant to (None when it did)."""

    judgements: tuple[Judgement, ...]
    by: str | None = None
    reason: str | None = None


@runtime_checkable
class ReportingJudge(Protocol):
    """A ``JudgeMany`` that also says where it judged."""

    def judged(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> Judged: ...


def judge_candidates(judge_many: JudgeMany, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> Judged:
    """Judge ``chunks`` with ``judge_many``, and where, when it says."""
    if isinstance(judge_many, ReportingJudge):
        return judge_many.judged(query, chunks, options)
    return Judged(tuple(judge_many(query, chunks, options)))


@dataclass(frozen=True, slots=True)
class Place:
    """A place judging runs, by name (``BY_WORKERS``, ``BY_GATEWAY``): a
    ``JudgeMany`` that says where it judged. Its errors propagate."""

    name: str
    judge_many: JudgeMany

    def __call__(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> list[Judgement]:
        return self.judge_many(query, chunks, options)

    def judged(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> Judged:
        return Judged(tuple(self.judge_many(query, chunks, options)), self.name)


class Degrading:
    """Judges in the first of ``places`` that can: a place that raises
    :class:`JudgingUnavailable`, or whose model cannot be reached (a
    retryable :class:`ChatError`), hands the query to the next; when none
    can, the candidates come back unjudged ``by`` :data:`BY_RETRIEVAL` and
    the filter scores them from the retrieval signals alone. Each step down
    is logged and named in :attr:`Judged.reason`. Other errors propagate."""

    def __init__(self, places: Sequence[Place]):
        if not places:
            raise ValueError("judging needs at least one place to run")
        self.places = tuple(places)

    def __call__(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> list[Judgement]:
        return list(self.judged(query, chunks, options).judgements)

    def judged(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> Judged:
        reasons: list[str] = []
        for step, place in enumerate(self.places):
            try:
                judgements = place.judge_many(query, chunks, options)
            except JudgingUnavailable as exc:
                log.warning("judging on %s is unavailable: %s", place.name, exc)
                reasons.append(f"{place.name}: {exc.reason}")
            except ChatError as exc:
                if not exc.retryable:
                    raise
                log.warning("judging on %s: the model provider is unavailable: %s", place.name, exc)
                reasons.append(f"{place.name}: the model provider is unavailable")
            else:
                return Judged(tuple(judgements), place.name, "; ".join(reasons) or None)
            after = self.places[step + 1].name if step + 1 < len(self.places) else BY_RETRIEVAL
            log.warning("judging falls back to %s: %s", after, reasons[-1])
        reason = "; ".join(reasons)
        return Judged(tuple(unscored(f"not judged: {reason}") for _ in chunks), BY_RETRIEVAL, reason)
