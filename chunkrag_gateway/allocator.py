"""glibc's malloc, tuned for the long-running gateway process.

Every thread that allocates may get a malloc arena of its own (up to eight
per core): anyio's worker threads, each filtered query's judging pool,
onnxruntime's. Memory freed in one arena cannot serve another, so under load
free pages pile up scattered across arenas and the RSS creeps. Measured on a
16-client, 90 s soak (bench/results/gateway_memory.json): Python's own
allocations (tracemalloc) stayed flat near 70 MB while glibc's free-but-kept
bytes and the RSS kept rising; with two arenas the RSS was flat (+0.8 MB
after warm-up, against +17 MB), at the same throughput.
"""

from __future__ import annotations

import ctypes
import os
from typing import Mapping

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
