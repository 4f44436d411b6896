"""A request's model-stage budget (``budget_s``): seconds shared by every
model stage of one filtered request (the relevance model's stage, the
cross-encoder gate, the LLM judge, reranking), counted from the first
stage that asks for it.

Each stage works in batches and asks the budget before each batch; once it
is spent the stage stops and the filter answers with what was decided,
saying which stage ran out (:class:`RanOut`). Only where nothing usable was
decided is the request an error (:class:`BudgetSpent`, a 504 at the
gateway). This is not the request's deadline
(``chunkrag_core.cancellation``): a spent budget ends the model stages, not
the request, whose answer is still written.

The budget travels with the request's context, as the cancellation token
does: the judge and the relevance model are objects one process shares
between requests, behind protocols the workers and the adapters implement
too. Work outside a bound budget (the CLI, the adapters) is unbounded.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")

# The stages a budget bounds, as a response names them.
RELEVANCE, GATE, JUDGE, RERANK = "relevance", "gate", "judge", "rerank"


class Budget:
    """``seconds`` of model-stage work, started by the first stage that asks
    (``clock``: ``time.monotonic`` by default). Safe to share between threads."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic):
        if seconds <= 0:
            raise ValueError(f"a budget must be positive, got {seconds} s")
        self.seconds, self.clock = seconds, clock
        self._deadline: float | None = None
        self._lock = threading.Lock()

    def remaining(self) -> float:
        """Seconds left (the full budget when no stage has asked yet: this starts it)."""
        with self._lock:
            if self._deadline is None:
                self._deadline = self.clock() + self.seconds
            return max(0.0, self._deadline - self.clock())

    @property
    def spent(self) -> bool:
        return self.remaining() <= 0.0


@dataclass(frozen=True, slots=True)
class RanOut:
    """A stage the budget ran out in: it had decided ``decided`` of the
    ``of`` texts it was to read, and ``then`` says what stands instead."""

    stage: str
    decided: int
    of: int
    then: str

    def reason(self) -> str:
        return f"{self.stage} stage with {self.decided} of {self.of} read: {self.then}"


class BudgetSpent(RuntimeError):
    """The budget ran out before a stage the request asked for decided
    anything usable; the message names the stage."""

    def __init__(self, seconds: float, ran_out: RanOut):
        super().__init__(
            f"budget_s of {seconds:g} s ran out in the {ran_out.stage} stage before it scored any of "
            f"{ran_out.of} candidates"
        )
        self.seconds, self.ran_out = seconds, ran_out


def ran_out_reason(seconds: float | None, ran_out: Sequence[RanOut]) -> str | None:
    """The response's sentence on where the budget ran out (None: it did not)."""
    if not ran_out:
        return None
    budget = f"budget_s of {seconds:g} s" if seconds is not None else "budget"
    return f"the {budget} ran out in the " + "; in the ".join(r.reason() for r in ran_out)


def merged_ran_out(runs: Sequence[Sequence[RanOut]]) -> tuple[RanOut, ...]:
    """Several filter runs' reports (the hits of a post-search) as one per
    stage, in the order the stages first ran out, their counts summed."""
    merged: dict[str, RanOut] = {}
    for ran_out in runs:
        for r in ran_out:
            seen = merged.get(r.stage)
            merged[r.stage] = (
                r if seen is None else RanOut(r.stage, seen.decided + r.decided, seen.of + r.of, seen.then)
            )
    return tuple(merged.values())


def scored_within(budget: Budget | None, count: int, batch: int, score: Callable[[int, int], None]) -> int:
    """Calls ``score(start, stop)`` over ``count`` items ``batch`` at a time,
    in order, while ``budget`` lasts (asked before each batch; None: all);
    returns how many items were scored."""
    done = 0
    while done < count:
        if budget is not None and budget.spent:
            break
        stop = min(count, done + batch)
        score(done, stop)
        done = stop
    return done


def call_within(budget: Budget | None, call: Callable[[], T]) -> tuple[bool, T | None]:
    """``call()``'s result when it returns within what is left of ``budget``
    (``(True, result)``), else ``(False, None)``: for a stage that is one
    call (a remote reranker) and cannot stop between batches. A call still
    running is left to finish in the background, bounded by its own
    timeout; its errors propagate when it ends in time."""
    if budget is None:
        return True, call()
    if budget.spent:
        return False, None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="within-budget")
    try:
        future = pool.submit(copy_context().run, call)
        try:
            return True, future.result(timeout=budget.remaining())
        except TimeoutError:
            return False, None
    finally:
        pool.shutdown(wait=False)


_current: ContextVar[Budget | None] = ContextVar("chunkrag_budget", default=None)


def current() -> Budget | None:
    """The budget of the request this context works for, if any."""
    return _current.get()


@contextmanager
def bound(budget: Budget | None) -> Iterator[Budget | None]:
    """Make ``budget`` the current one for the block (None: unbounded)."""
    reset = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(reset)
