"""Requests sent without pause by many threads of another process (so the
flood's own client work does not share the interpreter, and its lock, with a
gateway served in the test's process), until told to stop."""

from __future__ import annotations

import multiprocessing
import threading
from contextlib import contextmanager
from typing import Iterator

import httpx


def flood(url: str, headers: dict, body: dict, threads: int, stop, results, go=None) -> None:
    """The flooding caller, run as a process of its own: ``threads`` threads
    POST ``body`` without pause (only while ``go`` is set, when one is
    given) until ``stop``; every (status, Retry-After) goes to ``results``."""
    outcomes: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def send() -> None:
        with httpx.Client(headers=headers, timeout=120) as client:
            while not stop.is_set():
                if go is not None and not go.wait(0.1):
                    continue
                answer = client.post(url, json=body)
                with lock:
                    outcomes.append((answer.status_code, answer.headers.get("retry-after")))

    workers = [threading.Thread(target=send, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put(outcomes)


@contextmanager
def flooding(url: str, headers: dict, body: dict, threads: int) -> Iterator[list[tuple[int, str | None]]]:
    """POST ``body`` to ``url`` from ``threads`` threads of a child process
    while the block runs; the list yielded holds (status, Retry-After) of
    every answer once the block has ended."""
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    process = context.Process(target=flood, args=(url, headers, body, threads, stop, results), daemon=True)
    process.start()
    outcomes: list[tuple[int, str | None]] = []
    try:
        yield outcomes
    finally:
        stop.set()
        outcomes.extend(results.get(timeout=180))
        process.join(30)
