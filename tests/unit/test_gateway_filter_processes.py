"""Filtered searches in processes of their own (filter_processes.py): when
the gateway uses them, their priority, what travels between the processes,
a process that dies, and their end."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import platform
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chunkrag_core import cancellation, tracing
from chunkrag_core.cancellation import Cancellation, Cancelled
from chunkrag_core.chunk import Chunk
from chunkrag_core.settings import GatewaySettings, Settings
from chunkrag_gateway import create_app, errors, filter_processes
from chunkrag_gateway.dialect import parse_search
from chunkrag_gateway.filter_processes import PARENT_CHECK_S, FilterProcesses
from chunkrag_gateway.identity import Caller

ROOT = Path(__file__).resolve().parents[2]


def _settings(**gateway) -> Settings:
    return dataclasses.replace(Settings(), gateway=dataclasses.replace(GatewaySettings(), **gateway))


def _chunk_with_vector() -> Chunk:
    return Chunk(
        doc_id="d1",
        position=0,
        text="Vitamin D.",
        start=0,
        end=10,
        metadata={"source": "x"},
        vector=np.ones(384, dtype=np.float32),
        stage_scores={"judge": 0.5},
    )


def _refused() -> None:
    raise errors.too_many("too many filtered searches", 3)


def _mark_then_sleep(marker: str, seconds: float) -> None:
    Path(marker).touch()
    time.sleep(seconds)


def _mark_then_exit(marker: str, seconds: float) -> None:
    Path(marker).touch()
    time.sleep(seconds)
    os._exit(3)


def _checking_batches(progress: str, batches: int) -> str:
    """A search's loop in a filter process: one line per batch, checking its
    request's cancellation before each."""
    for _ in range(batches):
        cancellation.check()
        with open(progress, "a") as out:
            out.write("batch\n")
        time.sleep(0.1)
    return "all batches"


def _ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie has ended; its new parent has not reaped it yet


@pytest.fixture(scope="module")
def processes():
    pool = FilterProcesses(Settings(), 2, 5)
    yield pool
    pool.close()


def test_filtered_searches_stay_in_the_gateways_threads_by_default():
    assert create_app(_settings()).state.filter_processes is None


def test_the_setting_runs_them_in_max_filtered_processes_started_with_the_first_search():
    processes = create_app(_settings(filter_processes=True, max_filtered=3)).state.filter_processes
    assert isinstance(processes, FilterProcesses)
    assert (processes.processes, processes.nice) == (3, 10)
    assert processes.pids() == ()  # nothing started when the app is made


def test_parts_handed_in_keep_filtered_searches_in_the_gateways_threads():
    assert create_app(_settings(filter_processes=True), embedder=object()).state.filter_processes is None
    assert create_app(_settings(filter_processes=True), es=object()).state.filter_processes is None


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_bad_niceness_fails_when_the_app_is_made(nice):
    with pytest.raises(ValueError, match="CHUNKRAG_GATEWAY_FILTER_NICE must be 0 to 19"):
        create_app(_settings(filter_nice=nice))


def test_the_processes_run_at_the_lower_priority(processes):
    # os.nice(0) answers the process's niceness without changing it.
    assert processes.run(os.nice, 0) == min(19, os.nice(0) + 5)
    assert 1 <= len(processes.pids()) <= 2


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_processes_set_malloc_as_the_gateway_does(processes):
    from chunkrag_gateway import filter_processes

    operator = [bool(os.environ.get(v)) for v in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")]
    assert processes.run(filter_processes.allocator_set) == tuple(not given for given in operator)


def test_a_chunk_comes_back_without_its_vector_and_with_its_read_only_mappings(processes):
    back = processes.run(_chunk_with_vector)
    assert back == _chunk_with_vector()
    assert back.vector is None
    assert dict(back.metadata) == {"source": "x"} and dict(back.stage_scores) == {"judge": 0.5}


def test_the_gateways_error_crosses_with_its_status_and_headers(processes):
    with pytest.raises(errors.GatewayError) as refused:
        processes.run(_refused)
    assert (refused.value.status, refused.value.headers) == (429, {"retry-after": "3"})


def test_a_search_the_gateway_stops_stops_in_its_process_and_frees_the_thread_at_once(processes, tmp_path):
    progress = tmp_path / "progress"
    token = Cancellation()  # the request's, bound in the filter thread that hands the search over
    outcome = []
    waiting = threading.Thread(
        target=lambda: outcome.append(
            _raised(lambda: cancellation.run_bound(token, processes.run, _checking_batches, str(progress), 600))
        )
    )
    waiting.start()
    deadline = time.monotonic() + 60  # the process may still be starting
    while not (progress.exists() and progress.read_text().count("batch") >= 2):
        assert time.monotonic() < deadline, "the search never began"
        time.sleep(0.05)
    token.cancel("the client went away")
    waiting.join(10)
    assert not waiting.is_alive() and isinstance(outcome[0], Cancelled)  # the thread is free
    done = progress.read_text().count("batch")
    time.sleep(0.5)  # five batches' time: none more comes
    assert progress.read_text().count("batch") <= done + 1 < 600
    assert processes.run(os.getpid) in processes.pids()  # the process is free for the next search


def test_a_search_carries_its_deadline_into_its_process(processes, tmp_path):
    token = Cancellation.within(30.0)
    remaining = cancellation.run_bound(token, processes.run, _time_left)
    assert remaining is not None and 0 < remaining <= 30.0
    assert processes.run(_time_left) is None  # outside a request: no deadline
    progress = tmp_path / "progress"
    with pytest.raises(Cancelled):
        cancellation.run_bound(Cancellation.within(1.0), processes.run, _checking_batches, str(progress), 600)
    done = progress.read_text().count("batch") if progress.exists() else 0
    time.sleep(0.5)
    assert (progress.read_text().count("batch") if progress.exists() else 0) <= done + 1 < 600


def _time_left() -> float | None:
    token = cancellation.current()
    return token.remaining() if token is not None else None


def _raised(call):
    try:
        return call()
    except BaseException as exc:  # noqa: BLE001 - the outcome is what the test reads
        return exc


def test_a_search_on_an_unreachable_cluster_is_the_gateways_503_and_the_pool_stays():
    settings = dataclasses.replace(Settings(), es_url="http://127.0.0.1:9", es_request_timeout_s=2)
    processes = FilterProcesses(settings, 1, 0)
    search = parse_search(
        {"query": {"match": {"text": "vitamin D"}}, "ext": {"chunkrag": {"stages": False}}},
        max_candidates=50,
        max_query_chars=2000,
    )
    try:
        with pytest.raises(errors.GatewayError) as failed:
            processes.ask("docs", search.text, search.options, candidates=search.candidates, caller=Caller())
        assert failed.value.status == 503 and "not reachable" in failed.value.reason
        assert processes.run(os.getpid) in processes.pids()
    finally:
        processes.close()


def test_a_process_that_dies_is_a_503_and_the_next_search_gets_a_fresh_pool():
    processes = FilterProcesses(Settings(), 1, 0)
    try:
        first = processes.run(os.getpid)
        with pytest.raises(errors.GatewayError) as died:
            processes.run(os._exit, 3)
        assert died.value.status == 503 and "filter process ended" in died.value.reason
        again = processes.run(os.getpid)
        assert again != first and processes.pids() == (again,)
    finally:
        processes.close()


def test_a_process_that_died_while_idle_costs_the_next_search_nothing():
    processes = FilterProcesses(Settings(), 1, 0)
    try:
        first = processes.run(os.getpid)
        pool = processes._pool
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not getattr(pool, "_broken", False) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the pool has seen it
        assert processes.run(os.getpid) not in (first, None)
    finally:
        processes.close()


def test_a_search_sent_at_once_to_a_process_just_killed_is_answered_by_a_fresh_pool():
    # The pool may not have seen the process end yet: the search is sent to
    # it, no process begins it, and it goes to a fresh pool.
    processes = FilterProcesses(Settings(), 1, 0)
    try:
        first = processes.run(os.getpid)
        os.kill(first, signal.SIGKILL)
        again = processes.run(os.getpid)
        assert again != first and processes.pids() == (again,)
    finally:
        processes.close()


def test_a_search_waiting_when_a_process_died_goes_to_a_fresh_pool_the_running_one_gets_503(tmp_path):
    processes = FilterProcesses(Settings(), 1, 0)
    marker = tmp_path / "began"
    try:
        first = processes.run(os.getpid)
        with concurrent.futures.ThreadPoolExecutor(2) as threads:
            dying = threads.submit(processes.run, _mark_then_exit, str(marker), 1.0)
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            waiting = threads.submit(processes.run, os.getpid)  # the only process is busy
            with pytest.raises(errors.GatewayError) as died:
                dying.result(timeout=60)
            assert died.value.status == 503
            served_by = waiting.result(timeout=60)
        assert served_by not in (first, None) and processes.pids() == (served_by,)
    finally:
        processes.close()


def test_searches_running_when_a_process_is_killed_get_503_rather_than_hang(tmp_path):
    processes = FilterProcesses(Settings(), 2, 0)
    markers = [tmp_path / "began-0", tmp_path / "began-1"]
    try:
        processes.run(os.getpid)
        with concurrent.futures.ThreadPoolExecutor(2) as threads:
            waiting = [threads.submit(processes.run, _mark_then_sleep, str(marker), 60) for marker in markers]
            deadline = time.monotonic() + 60
            # Both begun (a search the second process had not begun would go to a fresh pool instead).
            while not all(marker.exists() for marker in markers) and time.monotonic() < deadline:
                time.sleep(0.1)
            os.kill(processes.pids()[0], signal.SIGKILL)
            for future in waiting:
                with pytest.raises(errors.GatewayError) as failed:
                    future.result(timeout=30)
                assert failed.value.status == 503
        assert processes.run(os.getpid) in processes.pids()
    finally:
        processes.close()


def test_closing_ends_idle_processes_and_stops_one_still_searching(tmp_path):
    processes = FilterProcesses(Settings(), 2, 0)
    processes.run(os.getpid)  # one idle process
    marker = tmp_path / "searching"
    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        abandoned = [threads.submit(processes.run, _mark_then_sleep, str(marker), 60) for _ in range(2)]
        deadline = time.monotonic() + 60
        while len(processes.pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = processes.pids()
        processes.close()
        for future in abandoned:
            with pytest.raises(errors.GatewayError):
                future.result(timeout=30)
    assert len(pids) == 2 and processes.pids() == ()
    assert all(_ended(pid) for pid in pids)


def test_a_search_after_the_close_is_refused_without_starting_a_process():
    processes = FilterProcesses(Settings(), 1, 0)
    processes.run(os.getpid)
    processes.close()
    with pytest.raises(errors.GatewayError, match="stopping"):
        processes.run(os.getpid)
    assert processes.pids() == ()


def test_the_processes_end_when_their_gateway_is_killed_outright():
    script = textwrap.dedent(
        """
        import os, time
        from chunkrag_core.settings import Settings
        from chunkrag_gateway.filter_processes import FilterProcesses

        if __name__ == "__main__":
            processes = FilterProcesses(Settings(), 1, 0)
            print(processes.run(os.getpid), flush=True)
            time.sleep(120)
        """
    )
    gateway = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        child = int(gateway.stdout.readline())
        gateway.kill()
        gateway.wait(30)
        deadline = time.monotonic() + PARENT_CHECK_S * 10
        while not _ended(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ended(child)
    finally:
        gateway.kill()
        gateway.stdout.close()


class _RecordingEdges:
    def __init__(self):
        self.trace_headers = None

    def ask(self, index, text, options, *, filters, candidates, caller, trace_headers):
        self.trace_headers = trace_headers
        return "result"


def test_the_request_trace_goes_on_in_the_process_under_a_filtered_search_span(monkeypatch):
    """What a filter process runs (``_ask``), here in this process: its span
    continues the request's trace, and the cluster gets that span."""
    exporter = InMemorySpanExporter()
    tracing.configure(span_processor=SimpleSpanProcessor(exporter))
    edges = _RecordingEdges()
    monkeypatch.setattr(filter_processes, "_edges", edges)
    try:
        with tracing.span("POST /{index}/_search", kind="server") as request:
            sent = tracing.headers()
        assert filter_processes._ask("docs", "q", None, (), 5, Caller(), sent) == "result"
    finally:
        tracing.shutdown()
    searched = next(span for span in exporter.get_finished_spans() if span.name == "filtered search")
    assert searched.parent.span_id == request.get_span_context().span_id
    assert searched.context.trace_id == request.get_span_context().trace_id
    assert edges.trace_headers["traceparent"].split("-")[2] == format(searched.context.span_id, "016x")


def test_without_tracing_in_the_process_the_cluster_still_gets_the_requests_trace(monkeypatch):
    edges = _RecordingEdges()
    monkeypatch.setattr(filter_processes, "_edges", edges)
    sent = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    filter_processes._ask("docs", "q", None, (), 5, Caller(), sent)
    assert edges.trace_headers == sent
