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

That trim never comes under steady relevance-model traffic, and glibc's
sliding mmap threshold made the freed pages pile up: a block above the
threshold (128 KiB at start) gets pages of its own, given back when freed,
but each such free raises the threshold to the block's size (up to 32 MiB),
so the next working buffers of that size come from the arenas, where what is
freed stays. Six keys sending cross-encoder searches for 90 s took the
gateway from 330 to 927 MB and still rising, glibc's free-but-kept bytes at
547 MB and Python's own allocations flat (57-58 MB by tracemalloc in a like
run). With the threshold fixed (``fix_mmap_threshold``) what onnxruntime's
shrinking arena frees goes straight back: the same 90 s held it at 314 MB
idle and 363 MB at most, at 5.1 searches a second against 3.8; ten minutes
at 1.16x its idle RSS (316 MB idle, 366 MB at most, 327 MB a minute after;
bench/results/gateway_steady_memory.json).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
from typing import Callable, Mapping

# mallopt's parameter numbers (glibc's malloc.h): the mmap threshold, the arena limit.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# Two arenas: the event loop's thread and the worker threads contend on two
# locks instead of one, and the pages freed by one request serve the next.
GATEWAY_ARENAS = 2


def _mallopt(parameter: int, value: int, variable: str, environ: Mapping[str, str] | None) -> bool:
    """glibc's ``mallopt(parameter, value)`` unless the operator set ``variable``
    (the environment glibc read at start); False on another libc."""
    env = os.environ if environ is None else environ
    if env.get(variable):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(parameter, value) == 1


def limit_malloc_arenas(arenas: int = GATEWAY_ARENAS, environ: Mapping[str, str] | None = None) -> bool:
    """Cap glibc's malloc arenas (the MALLOC_ARENA_MAX the process could have
    been started with); call before the threads start. An operator's own
    MALLOC_ARENA_MAX stands; on a libc other than glibc this does nothing.
    True when the limit was set here."""
    return _mallopt(M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX", environ)


# Blocks of at least this many bytes get pages of their own, given back to
# the system when freed. Any fixed value stops glibc's sliding threshold
# (above); 128 KiB to 4 MiB held the relevance model's working memory alike
# (four threads scoring sixteen pairs a run: 284-309 MB against 523 MB
# sliding). 1 MiB, within that range: the many small blocks of requests and
# Python stay below it, in the arenas, where reusing them costs no system call.
GATEWAY_MMAP_THRESHOLD = 1 << 20


def fix_mmap_threshold(threshold: int = GATEWAY_MMAP_THRESHOLD, environ: Mapping[str, str] | None = None) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes (the
    MALLOC_MMAP_THRESHOLD_ the process could have been started with), which
    also stops it sliding up; an operator's own MALLOC_MMAP_THRESHOLD_
    stands, and on a libc other than glibc this does nothing. True when the
    threshold was set here."""
    return _mallopt(M_MMAP_THRESHOLD, threshold, "MALLOC_MMAP_THRESHOLD_", environ)


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
