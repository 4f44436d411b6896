"""Ingest spread over the Celery workers, the client's side: read the sources
here, send batches of documents to the workers (one ``ingest_batch`` task
each, a bounded number in flight), and add their outcomes up into the same
:class:`~ingest_pipeline.pipeline.IngestReport` an in-process run gives.

The index is created here, before any batch is sent (with the shards and
replicas of the settings), and its periodic refresh paused while the workers
write, as in-process. The chunking settings travel with every batch, so the
command line's ``--headers``, ``--scales``... reach the workers; each worker
embeds with its own embedder settings and writes to its own cluster URL.

Delivery is Celery's: tasks are acknowledged late, so a batch on a worker
that dies is delivered to another once the broker's visibility timeout
passes; a batch the cluster refuses for now is retried with backoff by the
task itself. A batch that fails for good is reported as an error naming its
documents, and running the same command again finishes the job: documents
already complete are left alone, the rest are written again under the same
chunk ids.
"""

from __future__ import annotations

import collections
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult

from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.settings import Settings
from ingest_pipeline.pipeline import (
    BatchOutcome,
    IngestReport,
    document_batches,
    pause_refresh,
    progress_bar,
    report_of_batches,
    restore_refresh,
)
from ingest_pipeline.sources import Document, Skipped, read_sources
from ingest_pipeline.writer import ensure_index_for
from workers.app import INGEST_TASK, make_app
from workers.codec import CodecError, decode_outcome, encode_chunking, encode_document
from workers.dispatch import check_workers
from workers.errors import queue_errors

# Longest wait for the oldest batch before looking at the others.
WAIT_S = 1.0


@dataclass(frozen=True)
class _Sent:
    result: AsyncResult
    documents: int
    first: str
    last: str

    def describe(self) -> str:
        span = self.first if self.first == self.last else f"{self.first} … {self.last}"
        return f"{self.documents} documents ({span})"


def ingest_on_workers(
    paths: Iterable[str | Path],
    *,
    client: SearchBackend,
    settings: Settings,
    index: str | None = None,
    progress: bool | None = None,
    app: Celery | None = None,
) -> IngestReport:
    """Ingest every document under ``paths`` on the Celery workers; see
    :func:`ingest_documents_on_workers`."""
    return ingest_documents_on_workers(
        read_sources(paths), client=client, settings=settings, index=index, progress=progress, app=app
    )


def ingest_documents_on_workers(
    items: Iterable[Document | Skipped],
    *,
    client: SearchBackend,
    settings: Settings,
    index: str | None = None,
    progress: bool | None = None,
    app: Celery | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> IngestReport:
    """Raises :class:`~workers.errors.WorkersUnavailable` when the broker
    cannot be reached or no worker answers, before anything is sent, and
    :class:`~workers.errors.QueueUnavailable` when Redis or the broker stops
    answering while batches are out (the documents not yet written are
    written by running the same command again).
    ``on_batch(n)`` is called as each batch finishes (n: batches done)."""
    index = index or settings.index
    app = app or make_app(settings)
    began = time.perf_counter()
    # One answer is enough to start: without a limit the ping listens for
    # the whole timeout, a fixed two seconds on every ingest.
    check_workers(app, timeout=2.0, limit=1)
    ensure_index_for(client, index, settings)
    workers = settings.workers
    chunking = encode_chunking(settings.chunking)
    task = app.signature(INGEST_TASK)
    skipped: list[Skipped] = []
    outcomes: list[BatchOutcome] = []
    errors: list[str] = []
    in_flight: collections.deque[_Sent] = collections.deque()
    bar = progress_bar(progress)
    previous_refresh = pause_refresh(client, index)

    def collect() -> None:
        """Wait for the oldest batch (or WAIT_S), then take in every finished one."""
        try:
            # The result backend's pub/sub wakes this at once; the answers of
            # the other batches that arrive meanwhile are kept on their results.
            in_flight[0].result.get(timeout=WAIT_S, propagate=False)
        except CeleryTimeout:
            pass
        for sent in [sent for sent in in_flight if sent.result.ready()]:
            in_flight.remove(sent)
            outcome = _outcome(sent, errors)
            if outcome is not None:
                outcomes.append(outcome)
            bar.update(sent.documents)
            if on_batch is not None:
                on_batch(len(outcomes) + len(errors))

    try:
        # Broker and result-backend failures leave as the workers' project errors.
        with queue_errors():
            for batch in document_batches(items, skipped, workers.ingest_batch_docs):
                while len(in_flight) >= workers.ingest_in_flight:
                    collect()
                result = task.clone(args=(index, [encode_document(d) for d in batch], chunking)).apply_async()
                in_flight.append(_Sent(result, len(batch), batch[0].doc_id, batch[-1].doc_id))
            while in_flight:
                collect()
    finally:
        bar.close()
        _forget(in_flight)  # interrupted: the workers finish what was sent
        restore_refresh(client, index, previous_refresh)
    client.refresh(index)
    return report_of_batches(index, outcomes, skipped, errors, time.perf_counter() - began)


def _forget(in_flight: Iterable[_Sent]) -> None:
    # Cleanup only: with Redis gone the stored results expire on their own,
    # and the failure that stopped the run is the one to report.
    with contextlib.suppress(Exception):
        for sent in in_flight:
            sent.result.forget()


def _outcome(sent: _Sent, errors: list[str]) -> BatchOutcome | None:
    """The batch's outcome; a batch that failed for good goes to ``errors``."""
    try:
        if sent.result.successful():
            return decode_outcome(sent.result.result)
        failure = sent.result.result
        errors.append(
            f"{sent.describe()} not ingested: {type(failure).__name__}: {failure}; run the command again to finish"
        )
        return None
    except CodecError as exc:
        errors.append(f"{sent.describe()}: the worker's answer was not understood: {exc}")
        return None
    finally:
        sent.result.forget()
