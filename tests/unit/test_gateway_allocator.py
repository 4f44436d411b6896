"""The gateway's malloc arena cap, and the free pages given back once no
filtered search runs (why: chunkrag_gateway/allocator.py)."""

import asyncio
import platform
import subprocess
import sys

import pytest

from chunkrag_gateway.allocator import TrimWhenIdle, fix_mmap_threshold, limit_malloc_arenas, return_free_memory
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


def test_an_operators_mmap_threshold_stands():
    assert fix_mmap_threshold(environ={"MALLOC_MMAP_THRESHOLD_": "65536"}) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's mmap threshold is glibc's")
def test_the_mmap_threshold_is_fixed_on_glibc_and_a_freed_block_goes_back():
    # In a process of its own. Fixed, the threshold no longer slides up when a
    # block above it is freed: the next block of that size gets pages of its
    # own again, so the process gives its pages back as soon as it frees it.
    code = """
import ctypes
from chunkrag_gateway.allocator import fix_mmap_threshold
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def rss_kb():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])
print(fix_mmap_threshold(environ={}))
libc.free(libc.malloc(8 << 20))  # a sliding threshold would rise to 8 MiB here
before = rss_kb()
block = libc.malloc(4 << 20)
ctypes.memset(block, 1, 4 << 20)
libc.free(block)
print(rss_kb() - before < 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True"]


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
