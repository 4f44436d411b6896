"""Filtered searches (``Edges.ask``) in processes of their own, at a lower
CPU priority than the gateway's (``CHUNKRAG_GATEWAY_FILTER_PROCESSES``).

In the gateway's own threads, a filtered search's Python work (decoding the
candidates and their vectors, building the chunk records, ensembling, the
filter) holds the interpreter's lock, and the event loop serving every other
request waits for it at each step of each request. In a process of its own
the search holds only that process's lock, and with its priority lowered
(``nice``) the operating system runs the event loop first whenever both want
a core.

The processes start on demand, one per filtered search running at once up
to ``max_filtered`` (spawned: the gateway has threads, which a fork would
copy half-way); each makes its own parts (clients, embedder, model) from the
settings it was started with, so a search sends only the request's own
small values (text, options, filters, the caller with any derived key
already bound, the trace) and gets back the result without the chunks'
vectors. A process that dies while searching fails the searches then
running in the pool with 503; a search the pool had not yet started in any
process (it waited for one, or was sent to a process that was dying) is sent
once more to a fresh pool, which the next searches use too. Each process
marks the search it runs in a shared slot, so the gateway can tell the two
apart.

A search carries its request's deadline into its process (the machine's
monotonic clock is every process's), and one the gateway stops (its client
gone, its deadline passed) is named in a small ring of stopped searches in
shared memory: the search's own cancellation reads both at each check, so
it stops between two batches, as in the gateway's threads.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import CancelledError, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.reduction import ForkingPickler
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from chunkrag_core import cancellation, tracing
from chunkrag_core.cancellation import Cancellation
from chunkrag_core.chunk import Chunk
from chunkrag_core.settings import GATEWAY_NICE_RANGE, Settings
from chunkrag_gateway import errors
from chunkrag_gateway.allocator import fix_mmap_threshold, limit_malloc_arenas
from chunkrag_gateway.heap import settle_heap

log = logging.getLogger("chunkrag.gateway")

# How often a filter process looks whether its gateway still runs (seconds):
# a gateway killed outright cannot stop them, and they would wait for work
# forever.
PARENT_CHECK_S = 2.0
# At the gateway's end, how long idle processes get to end on their own
# (their spans exported) before those still running an abandoned search are
# stopped (seconds).
CLOSE_GRACE_S = 2.0
# The niceness the operating system accepts.
NICE_RANGE = GATEWAY_NICE_RANGE
# Searches the gateway stopped, the latest this many: a search looks for its
# own id among them at each check (it stops within one batch of being named,
# long before this many more are stopped).
STOPPED_RING = 64

# This process's Edges, when it is a filter process.
_edges = None
# In a filter process: the pool's slots (one per process: the id of the call
# it runs or ran last, 0 before its first) and this process's own; the ring
# of the calls the gateway stopped.
_slots = None
_slot = -1
_stopped = None
_allocator = (False, False)  # (arena limit, mmap threshold) set by this process's start


def check_niceness(nice: int) -> None:
    if nice not in NICE_RANGE:
        raise ValueError(f"CHUNKRAG_GATEWAY_FILTER_NICE must be 0 to 19, got {nice}")


def _read_only(contents: dict) -> MappingProxyType:
    return MappingProxyType(contents)


def _chunk(fields: dict[str, Any]) -> Chunk:
    return Chunk(**fields)


def _records_travel() -> None:
    """The records hold read-only mappings (MappingProxyType), which pickle
    does not take: between these processes they travel as their contents.
    Registered with multiprocessing's own pickler, in both processes."""
    ForkingPickler.register(MappingProxyType, lambda proxy: (_read_only, (dict(proxy),)))


def _chunks_travel_without_vectors() -> None:
    """In a filter process: a chunk goes back without its vector (1.5 kB
    each, hundreds per search with ensembling), which no response shows."""
    names = tuple(field.name for field in dataclasses.fields(Chunk) if field.name != "vector")
    ForkingPickler.register(Chunk, lambda chunk: (_chunk, ({name: getattr(chunk, name) for name in names},)))


def _start(settings: Settings, nice: int, gateway_pid: int, slots, taken, stopped) -> None:
    """Each process's first step: glibc's malloc set as the gateway's (the
    settings are per process; without them a process's memory grew as the
    gateway's did), take a slot, lower its priority (threads it starts
    later, onnxruntime's and the judge's, inherit it), continue the
    gateway's tracing, and watch for the gateway's end."""
    global _edges, _slots, _slot, _stopped, _allocator
    _allocator = (limit_malloc_arenas(), fix_mmap_threshold())  # before any thread of its own
    with taken.get_lock():
        _slot, taken.value = taken.value, taken.value + 1
    _slots, _stopped = slots, stopped
    _records_travel()
    _chunks_travel_without_vectors()
    threading.Thread(target=_end_with, args=(gateway_pid,), daemon=True, name="chunkrag-filter-watch").start()
    if nice:
        os.nice(nice)
    tracing.configure_from_env(service_name="chunkrag-gateway")
    from chunkrag_gateway.edges import Edges

    _edges = Edges(settings)  # its parts are made on first use, as the gateway's are
    settle_heap()  # the imports above live as long as the process


def allocator_set() -> tuple[bool, bool]:
    """In a filter process: whether its start set malloc's arena limit and
    mmap threshold (False where an operator's variable or another libc rules)."""
    return _allocator


def _end_with(gateway_pid: int) -> None:
    while os.getppid() == gateway_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _marked(call: int, deadline: float | None, function: Callable[..., Any], args: tuple) -> Any:
    """``function(*args)`` with ``call`` in this process's slot from its
    start until the process's next call (not cleared at the end: a process
    dying between its answer and the answer's arrival must not look as if
    it never began). The gateway reads the slots when a process dies, to
    tell a search that began (never sent twice) from one none had begun.
    The call runs with its request's cancellation: its ``deadline`` (on the
    monotonic clock) and its id named in the ring of stopped calls."""
    _slots[_slot] = call
    token = Cancellation(deadline, watch=lambda: call in _stopped[:])
    return cancellation.run_bound(token, function, *args)


def _ask(index: str, text: str, options, filters, candidates: int, caller, trace_headers: dict[str, str]):
    """``Edges.ask`` in a filter process. The request's trace goes on here:
    this span, under the request's, holds the search's own. Every failure
    goes back as the gateway's error (the library's exceptions need not
    survive a pickle)."""
    with tracing.span("filtered search", parent=tracing.extract(trace_headers)):
        try:
            return _edges.ask(
                index,
                text,
                options,
                filters=filters,
                candidates=candidates,
                caller=caller,
                trace_headers=tracing.headers() or trace_headers,
            )
        except Exception as exc:  # noqa: BLE001 - each becomes the status the gateway would answer
            raise errors.from_exception(exc) from None


class FilterProcesses:
    """Up to ``processes`` filtered searches at once, each in one of as many
    processes at ``nice`` lower priority; more wait for one of them."""

    def __init__(self, settings: Settings, processes: int, nice: int):
        if processes < 1:
            raise ValueError(f"CHUNKRAG_GATEWAY_MAX_FILTERED must be at least 1, got {processes}")
        check_niceness(nice)
        self.settings, self.processes, self.nice = settings, processes, nice
        self._pool: ProcessPoolExecutor | None = None  # made on the first search
        self._slots = None  # the pool's slots (see _marked)
        self._stopped = None  # the ring of calls stopped (see _marked), and where the next goes
        self._next_stopped = 0
        self._lock = threading.Lock()  # searches arrive on worker threads
        self._calls = itertools.count(1)
        # Set by close(): no pool is made again, so a search still waiting
        # at the end (or one its broken pool would have sent to a fresh one)
        # is told the gateway is stopping instead of starting processes.
        self._closed = False

    def _current(self) -> tuple[ProcessPoolExecutor, Any]:
        with self._lock:
            if self._closed:
                raise errors.unavailable("the gateway is stopping")
            if self._pool is None:
                _records_travel()
                context = multiprocessing.get_context("spawn")
                # Written by one process each and read only after a process
                # died: no lock (an aligned 64-bit store is whole).
                self._slots = context.Array("q", self.processes, lock=False)
                if self._stopped is None:  # one ring for every pool: a call keeps its id
                    self._stopped = context.Array("q", STOPPED_RING, lock=False)
                self._pool = ProcessPoolExecutor(
                    self.processes,
                    mp_context=context,
                    initializer=_start,
                    initargs=(
                        self.settings,
                        self.nice,
                        os.getpid(),
                        self._slots,
                        context.Value("i", 0),
                        self._stopped,
                    ),
                )
            return self._pool, self._slots

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """Blocking: ``function(*args)`` in one of the processes (a
        module-level function, its arguments and result pickled). A call no
        process had started when its pool broke (a process died, idle or
        searching) goes once more to a fresh pool. One that had started
        fails with 503 (never run twice); so does a call whose second pool
        broke too."""
        call = next(self._calls)
        token = cancellation.current()
        for attempt in range(2):
            pool, slots = self._current()
            try:
                future = pool.submit(_marked, call, token.deadline if token is not None else None, function, args)
                return self._result(future, call, token)
            except BrokenProcessPool as exc:
                self._drop(pool)
                if attempt == 0 and call not in slots[:]:
                    continue  # no process began it: nothing of it ran
                raise errors.unavailable(
                    "a filter process ended before answering; try again", detail=f"{exc}: {exc.__cause__ or ''}"
                ) from None
            except CancelledError:  # still waiting for a process when the gateway closed
                raise errors.unavailable("the gateway is stopping") from None
        raise AssertionError("unreachable")

    def _result(self, future, call: int, token: Cancellation | None) -> Any:
        """The call's result; with its request's ``token``, looking every
        WATCH_EVERY_S whether the request is gone: then the call is named in
        the ring of stopped calls (its process stops it at its next check)
        and this thread is free at once."""
        if token is None:
            return future.result()
        while not wait([future], timeout=cancellation.WATCH_EVERY_S).done:
            if token.cancelled:
                if not future.cancel():
                    self._stop(call)
                token.check()
        return future.result()

    def _stop(self, call: int) -> None:
        with self._lock:
            stopped, place = self._stopped, self._next_stopped
            self._next_stopped = (place + 1) % STOPPED_RING
        if stopped is not None:
            stopped[place] = call

    def ask(
        self,
        index: str,
        text: str,
        options,
        *,
        filters: Sequence[Mapping[str, Any]] = (),
        candidates: int,
        caller,
    ):
        """Blocking, as ``Edges.ask``, whose place it takes."""
        traced = tracing.headers()  # the request's trace, which the process continues
        return self.run(_ask, index, text, options, tuple(filters), candidates, caller, traced)

    def _drop(self, broken: ProcessPoolExecutor) -> None:
        """The pool that broke, unless another search already replaced it
        (its processes were stopped by the pool itself)."""
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)

    def pids(self) -> tuple[int, ...]:
        """The processes running now (none before the first search)."""
        with self._lock:
            pool = self._pool
        # No public handle on a pool's processes before Python 3.14.
        return tuple((getattr(pool, "_processes", None) or {}).keys()) if pool is not None else ()

    def close(self) -> None:
        """At the server's end, once its requests are answered: idle
        processes end on their own; one still running after CLOSE_GRACE_S
        holds a search abandoned past its deadline and is stopped (the
        interpreter's exit would wait for it)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = True
        if pool is None:
            return
        running = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + CLOSE_GRACE_S
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("a filter process still ran a search at the gateway's end: stopped")
                process.terminate()
                process.join(CLOSE_GRACE_S)
                if process.is_alive():
                    process.kill()
