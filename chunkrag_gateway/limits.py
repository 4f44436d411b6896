"""Limits that keep one caller, or a crowd, from exhausting the gateway: a
bounded queue in front of the model-stage queries, a cap on each caller's
filtered searches at once, and a per-caller token bucket. All answer 429
with Retry-After, which the official clients honour.
They live on the event loop (no locks needed) and the clock is injected."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

from chunkrag_gateway import errors

# Buckets kept at most; the least recently seen caller is forgotten first
# (a forgotten caller starts again with a full bucket, which is harmless).
MAX_TRACKED_CALLERS = 10_000


class FilteredQueue:
    """At most ``running`` model-stage queries at once and ``queued`` waiting;
    the next one gets 429 at once rather than waiting without bound."""

    def __init__(self, running: int, queued: int, retry_after_s: float):
        if running < 1 or queued < 0:
            raise ValueError(f"max_filtered must be at least 1 and max_queued at least 0, got {running} and {queued}")
        self.running, self.queued, self.retry_after_s = running, queued, retry_after_s
        self._slots: asyncio.Semaphore | None = None  # made on the serving loop
        self.waiting = 0
        self.in_use = 0  # running now (read by the metrics)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.running)
        if self._slots.locked():
            if self.waiting >= self.queued:
                raise errors.too_many(
                    f"the gateway is judging {self.running} filtered queries and {self.waiting} more are waiting "
                    f"(CHUNKRAG_GATEWAY_MAX_FILTERED, CHUNKRAG_GATEWAY_MAX_QUEUED); retry later",
                    self.retry_after_s,
                )
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
            self._slots.release()


# Filtered searches of one caller that may wait for one of its own places at
# once; more are refused at once (each waiting one holds a connection).
MAX_WAITING_PER_CALLER = 32


class CallerSlots:
    """At most ``per_caller`` filtered searches (``ext.chunkrag``, ``/v1/ask``)
    of one caller running in the gateway at once. The shared queue alone let
    one key fill every place (and the threads and CPU behind them) while
    everyone else waited. One more waits up to ``retry_after_s`` for one of
    the caller's own to end, then gets 429 with Retry-After: waiting, rather
    than refusing at once, keeps a client that ignores Retry-After from
    turning its refusals into a flood of requests."""

    def __init__(self, per_caller: int, retry_after_s: float):
        if per_caller < 0:
            raise ValueError(f"max_filtered_per_caller must be at least 0 (0: no cap), got {per_caller}")
        self.per_caller, self.retry_after_s = per_caller, retry_after_s
        # Per caller with a search in the gateway: its places, and how many hold or wait for one.
        self._places: dict[str, asyncio.Semaphore] = {}
        self._users: Counter[str] = Counter()

    @asynccontextmanager
    async def slot(self, caller: str) -> AsyncIterator[None]:
        if not self.per_caller:
            yield
            return
        if self._users[caller] >= self.per_caller + MAX_WAITING_PER_CALLER:
            raise self._refusal()
        places = self._places.setdefault(caller, asyncio.Semaphore(self.per_caller))
        self._users[caller] += 1
        try:
            try:
                await asyncio.wait_for(places.acquire(), self.retry_after_s)
            except TimeoutError:
                raise self._refusal() from None
            try:
                yield
            finally:
                places.release()
        finally:
            self._users[caller] -= 1
            if not self._users[caller]:
                del self._users[caller], self._places[caller]

    def _refusal(self) -> errors.GatewayError:
        return errors.too_many(
            f"this caller already has {self.per_caller} filtered searches running in the gateway "
            "(CHUNKRAG_GATEWAY_MAX_FILTERED_PER_CALLER); retry later",
            self.retry_after_s,
        )


class RateLimiter:
    """A token bucket per caller: ``rate`` requests a second, bursts of ``burst``."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, max(1, burst), clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, caller: str) -> None:
        """Spend one token of ``caller``'s or raise a 429 saying when one is back."""
        if not self.enabled:
            return
        now = self.clock()
        tokens, seen = self._buckets.pop(caller, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - seen) * self.rate)
        if tokens < 1.0:
            self._buckets[caller] = (tokens, now)
            raise rate_limited(self.rate, self.burst, (1.0 - tokens) / self.rate)
        self._buckets[caller] = (tokens - 1.0, now)
        while len(self._buckets) > MAX_TRACKED_CALLERS:
            self._buckets.popitem(last=False)

    async def acquire(self, caller: str) -> None:
        """``take``, behind the awaitable call the shared buckets need
        (``shared_state.SharedRateLimiter``)."""
        self.take(caller)


def rate_limited(rate: float, burst: int, wait_s: float) -> errors.GatewayError:
    """The 429 of a caller's empty bucket, saying when a token is back."""
    return errors.too_many(
        f"rate limit of {rate:g} requests/s (bursts of {burst}) reached for this caller (CHUNKRAG_GATEWAY_RATE_PER_S)",
        wait_s,
    )
