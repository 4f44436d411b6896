"""The gateway's threads for filtered searches: the call's result and
errors, the caller's context, a lower priority where the system gives a
thread one, and calls not started dropped at close."""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading

import pytest

from chunkrag_gateway.filter_threads import FilterThreads, lower_priority

trace = contextvars.ContextVar("trace", default=None)


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_call_returns_its_value_and_its_error_on_a_thread_of_the_pool():
    threads = FilterThreads(nice=0)

    def boom():
        raise ValueError("bad body")

    async def main():
        name = await threads.run(lambda: threading.current_thread().name)
        with pytest.raises(ValueError, match="bad body"):
            await threads.run(boom)
        return name

    try:
        assert asyncio.run(main()).startswith("chunkrag-filter")
    finally:
        threads.close()


def test_the_call_sees_the_callers_context():
    threads = FilterThreads(nice=0)

    async def main():
        trace.set("00-abc-01")
        return await threads.run(trace.get)

    try:
        assert asyncio.run(main()) == "00-abc-01"
    finally:
        threads.close()


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="only Linux gives a thread a niceness of its own (elsewhere the threads keep the gateway's)",
)
def test_the_threads_run_at_the_lower_priority_and_the_event_loop_does_not():
    threads = FilterThreads(nice=5)
    loop_niceness = _niceness()

    async def main():
        return await threads.run(_niceness), _niceness()

    try:
        in_pool, on_loop = asyncio.run(main())
    finally:
        threads.close()
    assert in_pool == min(19, loop_niceness + 5)
    assert on_loop == loop_niceness


def test_a_system_that_refuses_a_threads_priority_leaves_it_at_the_gateways(monkeypatch):
    def refused(*_args):
        raise OSError(3, "No such process")

    monkeypatch.setattr(os, "setpriority", refused)
    assert lower_priority(10) is False
    assert lower_priority(0) is True  # nothing asked, nothing refused


def test_close_drops_the_calls_not_started_and_a_later_run_makes_a_new_pool():
    threads = FilterThreads(nice=0, max_threads=1)
    release = threading.Event()
    ran = []

    async def main():
        first = asyncio.ensure_future(threads.run(lambda: release.wait(5)))
        second = asyncio.ensure_future(threads.run(lambda: ran.append("second")))
        await asyncio.sleep(0.05)
        threads.close()
        release.set()
        assert await first is True
        with pytest.raises(asyncio.CancelledError):
            await second
        return await threads.run(lambda: "again")

    try:
        assert asyncio.run(main()) == "again"
    finally:
        threads.close()
    assert ran == []


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="only Linux gives a thread a niceness of its own (elsewhere the threads keep the gateway's)",
)
def test_a_busy_callers_searches_run_lower_still_in_a_pool_of_their_own():
    threads = FilterThreads(nice=5)
    loop_niceness = _niceness()

    async def main():
        return await threads.run(_niceness), await threads.run(_niceness, busy=True)

    try:
        normal, busy = asyncio.run(main())
    finally:
        threads.close()
    assert normal == min(19, loop_niceness + 5)
    assert busy == min(19, loop_niceness + 5 + 9)
    assert FilterThreads(nice=15).busy_nice == 19  # never past the lowest
    assert FilterThreads(nice=0, busy_nice=0).busy_nice == 0  # the filter processes' hand-off threads
