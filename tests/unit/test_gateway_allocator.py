"""The gateway's malloc arena cap, and the free pages given back once no
filtered search runs (why: chunkrag_gateway/allocator.py)."""

import asyncio
import platform
import subprocess
import sys

import pytest

from chunkrag_gateway.allocator import TrimWhenIdle, limit_malloc_arenas, return_free_memory
from chunkrag_gateway.limits import FilteredQueue


def test_an_operators_malloc_arena_max_stands():
    assert limit_malloc_arenas(environ={"MALLOC_ARENA_MAX": "16"}) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's arena limit is glibc's")
def test_the_cap_is_set_on_glibc():
    # In a process of its own: the test runner's allocator is left as it was.
    code = "from chunkrag_gateway.allocator import limit_malloc_arenas; print(limit_malloc_arenas(environ={}))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "True"
    )


def test_the_free_pages_go_back_once_the_last_filtered_search_has_ended_a_while():
    trimmed = []

    async def scenario():
        queue = None
        trim = TrimWhenIdle(lambda: queue.in_use == 0, after_s=0.05, trim=lambda: trimmed.append(1))
        queue = FilteredQueue(2, 4, 1, when_idle=trim)
        async with queue.slot("key:a"):
            async with queue.slot("key:b"):
                pass
            await asyncio.sleep(0.1)
            assert trim.trims == 0  # one still runs
        async with queue.slot("key:a"):  # another begins before the wait is over: no trim yet
            pass
        await asyncio.sleep(0.02)
        async with queue.slot("key:a"):
            await asyncio.sleep(0.1)  # running when the first wait ends: not idle, no trim
        assert trim.trims == 0
        await asyncio.sleep(0.15)
        assert trim.trims == 1
        await asyncio.sleep(0.05)  # the trim ran on a worker thread

    asyncio.run(scenario())
    assert trimmed == [1]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_called_on_glibc():
    assert return_free_memory() in (True, False)  # called without error; True when pages went back
