"""Turns at the relevance model, shared fairly between callers, one batch at
a time.

The model's unit of work is one batch of its pairs (four in the gateway,
``edges.GATEWAY_RELEVANCE_BATCH``). A heavy search is many batches, a
quiet caller's default filter one (the gate's best three). Batches that
simply ran on whichever threads asked shared the cores between searches,
and six keys with one heavy search each took a seventh key's default
filter from 280 ms to 8.9 s at p50
(bench/results/gateway_fair_turns_before.json). Here every batch first
takes a turn: at most ``slots`` batches run at once, and which waiting batch goes next is
decided per caller (:class:`FairTurns`), so a caller that comes with one
batch waits behind at most one batch of each other caller, however many
theirs have left, and a caller with several searches gets one caller's
share, not one per search. Batches of searches at the lower priority
(busy callers', heavy searches': ``filter_threads.py``) leave a slot to
the others, so a quiet caller's batch never waits for a thread that the
machine's other work holds up.

:class:`FairTurns` is the policy, pure and literal; :class:`ModelTurns`
the thin plumbing between the filter threads. The caller is the
request's identity, carried by the request's context (:func:`run_as`),
as the cancellation is; a batch waiting for its turn stops when its
request is cancelled. The turns are this process's: another instance,
a filter process or the Celery workers schedule their own.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, deque
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from chunkrag_core import cancellation

T = TypeVar("T")

# Batches begun, latest last, kept for the tests and for a look at a live
# gateway: enough for a few searches' worth.
RECENT_BATCHES = 512

_caller: ContextVar[tuple[str, bool]] = ContextVar("chunkrag_model_caller", default=("", False))


def run_as(caller: str, low: bool, function: Callable[..., T], /, *args, **kwargs) -> T:
    """``function(*args, **kwargs)`` with its model batches counted as
    ``caller``'s; ``low``: the search runs at the lower priority of busy
    callers and heavy searches (``filter_threads.py``)."""
    reset = _caller.set((caller, low))
    try:
        return function(*args, **kwargs)
    finally:
        _caller.reset(reset)


def current_caller() -> str:
    return _caller.get()[0]


@dataclass(frozen=True, slots=True)
class Ask:
    """One batch waiting for its turn. ``tag``: the round it may start in
    (start-time fair queueing); ``arrival``: the order batches asked in."""

    caller: str
    tag: int
    arrival: int
    low: bool = False


class FairTurns:
    """Which waiting batch runs next: start-time fair queueing with every
    batch costing one. A caller's batch may start in round ``max(now, the
    round after its previous batch's)``; the waiting batch of the earliest
    round goes first; in one round, a caller not served in the round before
    goes before those that were (a newcomer's first batch goes next), then
    the earlier asked. ``now`` is the round of the latest batch begun. So
    callers with batches waiting take one batch each in turn, whatever the
    number of their searches or batches, and a caller that was away gets
    no credit for it: it comes back in the current round.

    Batches of searches at the lower priority (``low``) hold at most
    ``slots - reserved`` slots together: a slot is always left for a batch
    at the filter priority, which never waits for a batch that the
    machine's other work may hold up (a thread at niceness 19 gets next to
    nothing beside busy cores).

    Not thread-safe: :class:`ModelTurns` holds its lock around every call."""

    def __init__(self, slots: int, reserved: int = 0):
        if slots < 1 or reserved < 0:
            raise ValueError(f"the relevance model needs at least one slot and none reserved or more, got {slots}")
        self.slots = slots
        # At least one slot is for anyone: with a single slot, none is reserved.
        self.reserved = min(reserved, slots - 1)
        self.running = self.running_low = 0
        self.now = 0
        self._next_round: dict[str, int] = {}  # per caller seen lately: the round its next batch may start in
        self._last_begun: dict[str, int] = {}  # and the round its latest batch began in
        self._running: Counter[str] = Counter()
        self._waiting: list[Ask] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> tuple[Ask, ...]:
        return tuple(self._waiting)

    def ask(self, caller: str, low: bool = False) -> Ask:
        """A batch of ``caller``'s waits for its turn (``low``: at the lower priority)."""
        tag = max(self.now, self._next_round.get(caller, self.now))
        self._next_round[caller] = tag + 1
        asked = Ask(caller, tag, next(self._arrivals), low)
        self._waiting.append(asked)
        return asked

    def next(self) -> Ask | None:
        """The batch to begin now, or None: every slot is taken or none waits."""
        low_may_start = self.running_low < self.slots - self.reserved
        startable = [a for a in self._waiting if low_may_start or not a.low]
        if self.running >= self.slots or not startable:
            return None
        chosen = min(startable, key=lambda a: (a.tag, self._last_begun.get(a.caller, -1), a.arrival))
        self._waiting.remove(chosen)
        self.running += 1
        self.running_low += chosen.low
        self._running[chosen.caller] += 1
        self.now = max(self.now, chosen.tag)
        self._last_begun[chosen.caller] = chosen.tag
        return chosen

    def finish(self, begun: Ask) -> None:
        """A batch that began has ended (or failed)."""
        self.running -= 1
        self.running_low -= begun.low
        self._running[begun.caller] -= 1
        if not self._running[begun.caller]:
            del self._running[begun.caller]
        self._forget_idle()

    def drop(self, asked: Ask) -> None:
        """A waiting batch whose request is gone leaves the line, and gives
        its round back when it was its caller's latest."""
        self._waiting.remove(asked)
        if self._next_round.get(asked.caller) == asked.tag + 1:
            self._next_round[asked.caller] = asked.tag
        self._forget_idle()

    @property
    def remembered(self) -> set[str]:
        """The callers whose rounds are kept: those active in the latest round."""
        return set(self._next_round)

    def _forget_idle(self) -> None:
        # A caller with nothing running or waiting whose rounds are behind
        # would start in the current round anyway: forgetting it bounds the
        # memory to the callers active lately.
        active = {a.caller for a in self._waiting} | set(self._running)
        for caller in [c for c, r in self._next_round.items() if r <= self.now and c not in active]:
            del self._next_round[caller]
            self._last_begun.pop(caller, None)


class ModelTurns:
    """:class:`FairTurns` between threads: :meth:`turn` around each batch
    waits for the batch's turn, checking its request's cancellation every
    ``check_every_s``; ``begun`` lists the callers of the latest batches.
    ``reserved``: slots only batches at the filter priority may take."""

    def __init__(self, slots: int, reserved: int = 0, check_every_s: float = cancellation.WATCH_EVERY_S):
        self._policy = FairTurns(slots, reserved)
        self._check_every_s = check_every_s
        self._changed = threading.Condition()
        self._granted: set[Ask] = set()
        self.begun: deque[str] = deque(maxlen=RECENT_BATCHES)

    @property
    def slots(self) -> int:
        return self._policy.slots

    def counts(self) -> tuple[int, int]:
        """Batches running and waiting now (read by the metrics)."""
        with self._changed:
            return self._policy.running, len(self._policy.waiting)

    def waiting(self) -> list[str]:
        """The callers of the batches waiting for a turn, in the order they asked."""
        with self._changed:
            return [a.caller for a in self._policy.waiting]

    @contextmanager
    def turn(self) -> Iterator[None]:
        token = cancellation.current()
        with self._changed:
            asked = self._policy.ask(*_caller.get())
            self._grant()
            try:
                while asked not in self._granted:
                    if token is not None:
                        token.check()
                    self._changed.wait(self._check_every_s if token is not None else None)
            except BaseException:
                self._policy.drop(asked)
                self._grant()
                raise
            self._granted.discard(asked)
        try:
            yield
        finally:
            with self._changed:
                self._policy.finish(asked)
                self._grant()

    def _grant(self) -> None:
        granted = False
        while (chosen := self._policy.next()) is not None:
            self._granted.add(chosen)
            self.begun.append(chosen.caller)
            granted = True
        if granted:
            self._changed.notify_all()
