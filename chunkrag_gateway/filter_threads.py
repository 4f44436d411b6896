"""The gateway's threads for filtered searches, at a lower CPU priority.

A filtered search (``ext.chunkrag``, post-search, ``/v1/ask``) runs its
library call on a worker thread; a plain search is forwarded by the event
loop. On a small machine both want the same cores, and the operating system
shared them evenly: one caller's flood of filtered searches raised a plain
caller's p95 3.5x (bench/REPORT.md, fairness). On Linux a thread has a
niceness of its own, so these threads run at ``nice`` (the same setting as
the filter processes, ``CHUNKRAG_GATEWAY_FILTER_NICE``) and the event loop,
and Elasticsearch on the same machine, get a core first when both want one.
Elsewhere the call is refused by the system and the threads run at the
gateway's own priority (each refused thread logs a warning).

A search of a caller that has other filtered searches in the gateway (a
busy caller, ``limits.FilteredQueue.busy``), or one that has the relevance
model read every candidate (a heavy search), runs in a second pool, lower
still (``busy_nice``, by default nine steps lower, at most 19): where the
fair queue gives a quiet caller a place, this gives its search the CPU
first (otherwise it shares the cores evenly with the flooding keys'
relevance-model searches; bench/results/gateway_flood.json has the
figures with it).

The calls keep the caller's context (the trace, and the request's
cancellation), as ``anyio.to_thread`` does. A call whose awaiting is
cancelled (the request's deadline, or its client gone: ``deadline.py``) and
that has not started never starts; one that has is stopped by its request's
cancellation at its next check, between two batches, and the awaiting task
ends only then: whatever the task holds (a place in the model-stage queue)
is held while the thread is still busy.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

log = logging.getLogger("chunkrag.gateway")

T = TypeVar("T")

# Threads at most per pool, as anyio's default limiter for its worker threads.
# A call past its deadline keeps its thread until its next check (one batch).
MAX_THREADS = 40
# How much lower a busy caller's searches run than ``nice``: nine steps, about
# a seventh of the CPU weight (Linux weighs each step ~1.25x).
BUSY_NICE_STEP = 9
LOWEST_PRIORITY = 19


def lower_priority(nice: int) -> bool:
    """This thread's niceness raised by ``nice``; False where the system
    does not give a thread a niceness of its own."""
    if not nice:
        return True
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
    except (AttributeError, OSError) as exc:
        log.warning("filtered searches run at the gateway's own priority: %s", exc)
        return False
    return True


class FilterThreads:
    """Two pools of threads, each made on first use: one at ``nice`` lower
    priority, one at ``busy_nice`` (default: BUSY_NICE_STEP lower, at most
    LOWEST_PRIORITY) for the searches of busy callers."""

    def __init__(self, nice: int, max_threads: int = MAX_THREADS, busy_nice: int | None = None):
        self.nice, self.max_threads = nice, max_threads
        self.busy_nice = min(LOWEST_PRIORITY, nice + BUSY_NICE_STEP) if busy_nice is None else busy_nice
        self._pools: dict[bool, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def _executor(self, busy: bool) -> ThreadPoolExecutor:
        with self._lock:
            if busy not in self._pools:
                self._pools[busy] = ThreadPoolExecutor(
                    self.max_threads,
                    thread_name_prefix="chunkrag-filter-busy" if busy else "chunkrag-filter",
                    initializer=lower_priority,
                    initargs=(self.busy_nice if busy else self.nice,),
                )
            return self._pools[busy]

    async def run(self, call: Callable[[], T], *, busy: bool = False) -> T:
        """``call()`` on a thread of the pool (``busy``: the busy callers')."""
        context = contextvars.copy_context()
        future = self._executor(busy).submit(context.run, call)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.cancel():
                # Running: stopped by its request's cancellation at its next
                # check; the awaiting ends once the thread is free.
                ended = asyncio.wrap_future(future)
                ended.add_done_callback(lambda done: done.cancelled() or done.exception())
                await asyncio.wait([ended])
            raise

    def close(self) -> None:
        """Calls not started are dropped; running ones end on their own
        (their requests, answered or cancelled, stop them at their next check)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
