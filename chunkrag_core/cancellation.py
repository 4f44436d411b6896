"""A request's cancellation: its deadline and a stop flag, which the loops
doing its work in batches check between batches.

The gateway makes one :class:`Cancellation` per filtered request, with the
request's deadline, and cancels it when the deadline passes or the client
goes away; the stages that loop over batches (the embedder's batches, the
relevance model's, sentence splitting and embedding for passages, the
judge's batches and model calls, the waits on the Celery workers) call
:func:`check` between batches, which raises :class:`Cancelled` once the
request is gone. So a request's work ends within one batch of its 504, and
the thread that ran it is free again, instead of running on to the end for
nobody.

The token travels with the request's context (a context variable), as the
trace does, rather than as an argument: the loops live in objects one
process shares between requests (one embedder, one relevance model) behind
protocols the adapters, the workers and the CLI implement too, and the
threads that run a request's work (the gateway's filter threads, the
judge's threads) already run in a copy of the caller's context. Work done
outside a request (ingest, a worker's task, the CLI) has no token, and its
checks cost a context-variable read.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

# How often a wait that must also notice another process's stop flag looks
# at it (seconds): the gateway's cancel of a search in a filter process.
WATCH_EVERY_S = 0.1


class Cancelled(RuntimeError):
    """The request this work was for is gone (its deadline passed, or its
    client went away): the work stops here. ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self):
        # Crosses back from a filter process whole.
        return Cancelled, (self.reason,)


class Cancellation:
    """One request's token: a deadline (on ``clock``, ``time.monotonic`` by
    default, which every process of a machine shares) and a stop flag set
    by :meth:`cancel`. ``watch``: another stop flag, read at each check (a
    flag the gateway sets in shared memory for a search in a filter
    process). Safe to share between threads."""

    def __init__(
        self,
        deadline: float | None = None,
        *,
        watch: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.deadline, self.watch, self.clock = deadline, watch, clock
        self._stopped = threading.Event()
        self._reason: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def within(cls, seconds: float, **kwargs) -> Cancellation:
        """A token whose deadline is ``seconds`` from now."""
        clock = kwargs.get("clock", time.monotonic)
        return cls(clock() + seconds, **kwargs)

    def cancel(self, reason: str) -> None:
        """Stop the work; the first reason given is kept."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
        self._stopped.set()

    @property
    def reason(self) -> str | None:
        """Why the work must stop, or None while it may go on."""
        if self._stopped.is_set():
            return self._reason
        if self.watch is not None and self.watch():
            self.cancel("the request was cancelled")
            return self._reason
        if self.deadline is not None and self.clock() >= self.deadline:
            self.cancel("the request's deadline passed")
            return self._reason
        return None

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def check(self) -> None:
        """Raise :class:`Cancelled` once the work must stop."""
        reason = self.reason
        if reason is not None:
            raise Cancelled(reason)

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())

    def wait(self, timeout: float | None) -> bool:
        """Sleep up to ``timeout`` seconds (None: until stopped), waking as
        soon as the work must stop; True when it must."""
        end = None if timeout is None else self.clock() + max(0.0, timeout)
        while not self.cancelled:
            now = self.clock()
            if end is not None and now >= end:
                return False
            slices = [limit - now for limit in (end, self.deadline) if limit is not None]
            if self.watch is not None:
                slices.append(WATCH_EVERY_S)
            if self._stopped.wait(min(slices) if slices else None):
                break
        return True


_current: ContextVar[Cancellation | None] = ContextVar("chunkrag_cancellation", default=None)


def current() -> Cancellation | None:
    """The token of the request this context works for, if any."""
    return _current.get()


def check() -> None:
    """Raise :class:`Cancelled` when the current request is gone; nothing
    outside a request."""
    token = _current.get()
    if token is not None:
        token.check()


@contextmanager
def bound(token: Cancellation | None) -> Iterator[Cancellation | None]:
    """Make ``token`` the current one for the block (None: no token)."""
    reset = _current.set(token)
    try:
        yield token
    finally:
        _current.reset(reset)


def run_bound(token: Cancellation | None, function: Callable[..., T], *args, **kwargs) -> T:
    """``function(*args, **kwargs)`` with ``token`` current: what a thread or
    process running a request's work calls."""
    with bound(token):
        return function(*args, **kwargs)
