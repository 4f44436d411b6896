"""The gateway's malloc arena cap (why: chunkrag_gateway/allocator.py)."""

import platform
import subprocess
import sys

import pytest

from chunkrag_gateway.allocator import limit_malloc_arenas


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
