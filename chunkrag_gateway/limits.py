"""Limits that keep one caller, or a crowd, from exhausting the gateway: a
bounded queue in front of the model-stage queries that serves callers
without a search running first, a cap on each caller's filtered searches at
once, and a per-caller token bucket. All answer 429 with Retry-After, which
the official clients honour.
They live on the event loop (no locks needed) and the clock is injected."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from chunkrag_gateway import errors

# Buckets kept at most; the least recently seen caller is forgotten first
# (a forgotten caller starts again with a full bucket, which is harmless).
MAX_TRACKED_CALLERS = 10_000


class FilteredQueue:
    """At most ``running`` model-stage queries at once and ``queued`` waiting;
    the next one gets 429 at once rather than waiting without bound.

    The places are shared fairly between callers. A caller with no other
    filtered search in the gateway (none running, none waiting; ``busy``
    says, with shared state for every instance) is served before one that
    has, in the order they came; callers that have others hold at most
    ``running - reserved`` places together, so ``reserved`` places are left
    for callers with none, and a flood of busy keys cannot take every
    place. Among busy callers, a place goes to the one holding the fewest,
    then to whoever waited longest. With a first-come queue, two flooding
    keys held all four places and another key's default filter waited 45 s.

    A ``heavy`` search (one that has the relevance model read every
    candidate, or every kept one) waits and holds places as a busy caller's does, whoever
    sends it: keys with one heavy search each were all quiet callers, and
    six of them held every place while a seventh key's default filter
    waited for one of theirs to end (its p50 60 times its own)."""

    def __init__(
        self,
        running: int,
        queued: int,
        retry_after_s: float,
        *,
        reserved: int = 0,
        busy: Callable[[str], bool] | None = None,
        when_idle: Callable[[], None] | None = None,
    ):
        if running < 1 or queued < 0 or reserved < 0:
            raise ValueError(
                f"max_filtered must be at least 1, max_queued and reserved_filtered at least 0, "
                f"got {running}, {queued} and {reserved}"
            )
        self.running, self.queued, self.retry_after_s = running, queued, retry_after_s
        # At least one place is for anyone: with a single place, none is reserved.
        self.reserved = min(reserved, running - 1)
        self._busy_elsewhere = busy
        self._when_idle = when_idle  # called when the last place is given back and none waits
        self._held: Counter[str] = Counter()  # places held, per caller
        self._waiters: list[_Waiter] = []  # in the order they came
        self._arrivals = itertools.count()
        self.in_use = 0  # running now (read by the metrics)

    @property
    def waiting(self) -> int:
        """Queries waiting for a place (read by the metrics)."""
        return len(self._waiters)

    def busy(self, caller: str, *, holding: bool = False) -> bool:
        """Whether ``caller`` has another filtered search than the one asking
        (which holds a place when ``holding``, else waits for one): a place
        held, another waiting, or (``busy``) one elsewhere."""
        held = self._held[caller] - (1 if holding else 0)
        waiting = sum(1 for w in self._waiters if w.caller == caller) - (0 if holding else 1)
        return held > 0 or waiting > 0 or bool(self._busy_elsewhere and self._busy_elsewhere(caller))

    @asynccontextmanager
    async def slot(self, caller: str = "", *, heavy: bool = False) -> AsyncIterator[None]:
        waiter = _Waiter(caller, next(self._arrivals), asyncio.get_running_loop().create_future(), heavy)
        self._waiters.append(waiter)
        self._grant()
        if not waiter.granted.done() and len(self._waiters) > self.queued:
            self._waiters.remove(waiter)
            raise errors.too_many(
                f"the gateway is judging {self.in_use} filtered queries and {len(self._waiters)} more are waiting "
                f"(CHUNKRAG_GATEWAY_MAX_FILTERED, CHUNKRAG_GATEWAY_MAX_QUEUED); retry later",
                self.retry_after_s,
            )
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                self._grant()  # another may be served now (this one counted as busy for its caller)
            elif waiter.granted.done() and not waiter.granted.cancelled():
                self._release(caller)  # granted as it was cancelled: the place goes back
            raise
        try:
            yield
        finally:
            self._release(caller)

    def _release(self, caller: str) -> None:
        self.in_use -= 1
        self._held[caller] -= 1
        if not self._held[caller]:
            del self._held[caller]
        self._grant()
        if not self.in_use and not self._waiters and self._when_idle is not None:
            self._when_idle()

    def _grant(self) -> None:
        """Give free places to waiters, as the class says."""
        while self.in_use < self.running and (chosen := self._next()) is not None:
            self._waiters.remove(chosen)
            self.in_use += 1
            self._held[chosen.caller] += 1
            chosen.granted.set_result(None)

    def _next(self) -> _Waiter | None:
        waiting = [w for w in self._waiters if not w.granted.done()]
        idle = [w for w in waiting if not w.heavy and not self.busy(w.caller)]
        if idle:
            return idle[0]
        if self.running - self.in_use <= self.reserved or not waiting:
            return None
        return min(waiting, key=lambda w: (self._held[w.caller], w.arrival))


@dataclass(eq=False)
class _Waiter:
    """One query waiting for a place (identity equality: one per query)."""

    caller: str
    arrival: int
    granted: asyncio.Future
    heavy: bool = False


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
    turning its refusals into a flood of requests.

    It also counts each caller's filtered searches in the gateway (running,
    or waiting for a place; with ``shared``, in every instance), which the
    model-stage queue reads to serve callers without one first (``busy``)."""

    def __init__(self, per_caller: int, retry_after_s: float, shared=None):
        if per_caller < 0:
            raise ValueError(f"max_filtered_per_caller must be at least 0 (0: no cap), got {per_caller}")
        self.per_caller, self.retry_after_s = per_caller, retry_after_s
        # Per caller with a search in the gateway: its places, and how many hold or wait for one.
        self._places: dict[str, asyncio.Semaphore] = {}
        self._users: Counter[str] = Counter()
        # Every instance's searches (shared_state.SharedSearches), or None:
        # this instance alone; and per caller, how many other instances held
        # when its latest search here began.
        self.shared = shared
        self._elsewhere: dict[str, int] = {}

    def busy(self, caller: str) -> bool:
        """Whether ``caller`` has more than one filtered search in the
        gateway (the one asking among them), or any in another instance."""
        return self._users[caller] > 1 or self._elsewhere.get(caller, 0) > 0

    @asynccontextmanager
    async def slot(self, caller: str) -> AsyncIterator[None]:
        if self.per_caller and self._users[caller] >= self.per_caller + MAX_WAITING_PER_CALLER:
            raise self._refusal()
        self._users[caller] += 1
        entry = None
        try:
            if self.shared is not None:
                entry, self._elsewhere[caller] = await self.shared.enter(caller)
            if not self.per_caller:
                yield
                return
            places = self._places.setdefault(caller, asyncio.Semaphore(self.per_caller))
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
                del self._users[caller]
                self._places.pop(caller, None)
                self._elsewhere.pop(caller, None)
            if entry is not None:
                self.shared.leave(caller, entry)

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
