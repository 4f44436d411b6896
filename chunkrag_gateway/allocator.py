"""glibc's malloc, tuned for the long-running gateway process.

Every thread that allocates may get a malloc arena of its own (up to eight
per core): anyio's worker threads, each filtered query's judging pool,
onnxruntime's. Memory freed in one arena cannot serve another, so under load
free pages pile up scattered across arenas and the RSS creeps. Measured on a
16-client, 90 s soak (bench/results/gateway_memory.json): Python's own
allocations (tracemalloc) stayed flat near 70 MB while glibc's free-but-kept
bytes and the RSS kept rising; with two arenas the RSS was flat (+0.8 MB
after warm-up, against +17 MB), at the same throughput.

glibc keeps what it freed for the next allocations, too. After a burst of
relevance-model searches the gateway held its peak (531 MB before a flood,
755 MB a minute after it, bench/results/gateway_flood_arena.json:
onnxruntime's memory arena, which the gateway's
relevance model now shrinks after each run, and glibc's free pages), so
once no filtered search has run for a few seconds the free pages go back
to the system (``malloc_trim``: ``TrimWhenIdle``).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
from typing import Callable, Mapping

# mallopt's parameter number for the arena limit (glibc's malloc.h).
M_ARENA_MAX = -8
# Two arenas: the event loop's thread and the worker threads contend on two
# locks instead of one, and the pages freed by one request serve the next.
GATEWAY_ARENAS = 2


def limit_malloc_arenas(arenas: int = GATEWAY_ARENAS, environ: Mapping[str, str] | None = None) -> bool:
    """Cap glibc's malloc arenas (the MALLOC_ARENA_MAX the process could have
    been started with); call before the threads start. An operator's own
    MALLOC_ARENA_MAX stands; on a libc other than glibc this does nothing.
    True when the limit was set here."""
    env = os.environ if environ is None else environ
    if env.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(M_ARENA_MAX, arenas) == 1


# How long no filtered search must run before the free pages go back (s):
# long enough that a steady stream of searches pays nothing.
TRIM_AFTER_S = 5.0


def return_free_memory() -> bool:
    """A full garbage collection (the gateway makes them rarely: heap.py,
    and what a stopped search left in reference cycles waits for one), then
    glibc's ``malloc_trim(0)``: the free pages of every arena go back to the
    system. False where there is no glibc."""
    gc.collect()
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


class TrimWhenIdle:
    """Called (on the event loop) each time the last filtered search ends:
    ``after_s`` later, if ``idle()`` still says so, ``trim`` runs on a
    worker thread (it walks the arenas: milliseconds the loop need not wait)."""

    def __init__(
        self,
        idle: Callable[[], bool],
        after_s: float = TRIM_AFTER_S,
        trim: Callable[[], object] = return_free_memory,
    ):
        self.idle, self.after_s, self.trim = idle, after_s, trim
        self._later: asyncio.TimerHandle | None = None
        self.trims = 0

    def __call__(self) -> None:
        if self._later is not None:
            self._later.cancel()
        self._later = asyncio.get_running_loop().call_later(self.after_s, self._trim_if_idle)

    def _trim_if_idle(self) -> None:
        self._later = None
        if self.idle():
            self.trims += 1
            asyncio.get_running_loop().run_in_executor(None, self.trim)
