"""Ingest spread over the Celery workers, the client's side: read the sources
here, send batches of documents to the workers (one ``ingest_batch`` task
each, a bounded number in flight), and add their outcomes up into the same
:class:`~ingest_pipeline.pipeline.IngestReport` an in-process run gives.

The index is created here, before any batch is sent (with the shards and
replicas of the settings), and its periodic refresh paused while the workers
write, as in-process. The chunking settings travel with every batch, so the
command line's ``--headers``, ``--scales``... reach the workers; each worker
embeds with its own embedder settings and writes to its own cluster URL.

Delivery is Celery's, watched: tasks are acknowledged late, and a batch
the cluster refuses for now is retried with backoff by the task itself. A
worker that dies whole keeps its batch's message unacknowledged until the
broker's visibility timeout, or loses it outright when it dies between taking
it off the queue and recording it; so while it waits, the client looks every
few seconds (``LIVENESS_CHECK_S``) for batches started on a worker that no
longer answers a ping, and for batches that no queue and no live worker
holds, and sends them again (chunk ids are deterministic: a batch written
twice holds each chunk once), at most ``MAX_RESENDS`` times each. The
superseded task is revoked, so a message the broker hands back later is
dropped, and whichever copy finishes first is counted once.

Every wait is bounded: a batch not finished within its budget
(``ingest_batch_budget_s`` for each unfinished batch sent before it, and
itself) is reported as an error naming its documents, and its tasks revoked.
A batch that fails for good is reported the same way; running the same
command again finishes the job: documents already complete are left alone,
the rest are written again under the same chunk ids.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from celery import Celery, states
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
from workers.app import INGEST_QUEUE, INGEST_TASK, make_app
from workers.codec import CodecError, decode_outcome, encode_chunking, encode_document
from workers.dispatch import (
    LIVENESS_CHECK_S,
    MAX_RESENDS,
    TaskView,
    check_workers,
    detach,
    holding,
    queued,
    send_again,
    stranded,
    task_view,
    unclaimed,
)
from workers.errors import queue_errors

log = logging.getLogger(__name__)

# Longest wait for the oldest batch before looking at the others.
WAIT_S = 1.0

# How long the workers have to answer a ping, or to say which tasks they
# hold, before the ones that did not are taken for dead. Only a dead one
# costs the whole wait; a live one answers at once, or within this on a
# loaded machine.
PING_TIMEOUT_S = 2.0

# A batch sent less than this long ago is not taken for lost when no queue
# and no worker holds it: a worker takes a message off the queue a moment
# before it records it (longer on a loaded machine).
CLAIM_GRACE_S = 10.0


def batch_deadline(sent_at: float, ahead: int, budget_s: float) -> float:
    """When the client stops waiting for a batch sent at ``sent_at`` while
    ``ahead`` batches sent before it were unfinished: each of those may hold
    the one worker left for a whole ``budget_s``, one after another, and then
    the batch itself."""
    return sent_at + (ahead + 1) * budget_s


@dataclass(eq=False)
class _Sent:
    """One batch and the tasks sent for it, oldest first."""

    args: tuple
    documents: int
    first: str
    last: str
    deadline: float  # when it is given up (time.monotonic)
    first_sent_at: float
    sent_at: float  # of the newest task
    attempts: list[AsyncResult] = field(default_factory=list)

    @property
    def latest(self) -> AsyncResult:
        return self.attempts[-1]

    def describe(self) -> str:
        span = self.first if self.first == self.last else f"{self.first} … {self.last}"
        return f"{self.documents} documents ({span})"

    def finished(self) -> AsyncResult | None:
        """The task whose outcome the batch reports: any that succeeded, else
        the newest once it failed for good (the older ones were revoked when
        it was sent); None while neither."""
        seen = [(attempt, _state(attempt)) for attempt in self.attempts]
        for attempt, state in seen:
            if state == states.SUCCESS:
                return attempt
        attempt, state = seen[-1]
        return attempt if state in states.READY_STATES else None


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
    batch_budget_s: float | None = None,
    liveness_check_s: float = LIVENESS_CHECK_S,
    ping_timeout_s: float = PING_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    index_ready: bool = False,
) -> IngestReport:
    """Raises :class:`~workers.errors.WorkersUnavailable` when the broker
    cannot be reached or no worker answers, before anything is sent, and
    :class:`~workers.errors.QueueUnavailable` when Redis or the broker stops
    answering while batches are out (the documents not yet written are
    written by running the same command again).
    ``on_batch(n)`` is called as each batch finishes (n: batches done).
    ``batch_budget_s`` (default: ``settings.workers.ingest_batch_budget_s``)
    bounds the wait for each batch; every ``liveness_check_s`` of waiting,
    batches stranded by a dead worker (one that does not answer within
    ``ping_timeout_s``) or lost by the broker are sent again.
    ``index_ready``: the caller made the index and holds its periodic
    refresh paused over a longer run (a sync pass), as for
    :func:`ingest_pipeline.pipeline.ingest_documents`."""
    index = index or settings.index
    app = app or make_app(settings)
    began = time.perf_counter()
    workers = settings.workers
    budget = workers.ingest_batch_budget_s if batch_budget_s is None else batch_budget_s
    if budget <= 0:
        raise ValueError(f"the ingest batch budget must be positive, got {budget} s")
    if liveness_check_s <= 0:
        raise ValueError(f"the liveness check interval must be positive, got {liveness_check_s} s")
    # One answer is enough to start: without a limit the ping listens for
    # the whole timeout, a fixed two seconds on every ingest.
    check_workers(app, timeout=2.0, limit=1)
    if not index_ready:
        ensure_index_for(client, index, settings)
    chunking = encode_chunking(settings.chunking)
    flight = _Flight(app, app.signature(INGEST_TASK), budget, liveness_check_s, ping_timeout_s, clock)
    skipped: list[Skipped] = []
    outcomes: list[BatchOutcome] = []
    errors: list[str] = []
    bar = progress_bar(progress)
    previous_refresh = None if index_ready else pause_refresh(client, index)

    def collect() -> None:
        for sent, attempt in flight.collect():
            if attempt is None:
                outcome = _given_up(app, sent, clock(), errors)
            else:
                outcome = _outcome(app, sent, attempt, errors)
            if outcome is not None:
                outcomes.append(outcome)
            bar.update(sent.documents)
            if on_batch is not None:
                on_batch(len(outcomes) + len(errors))

    try:
        # Broker and result-backend failures leave as the workers' project errors.
        with queue_errors():
            for batch in document_batches(items, skipped, workers.ingest_batch_docs):
                while len(flight.waiting) >= workers.ingest_in_flight:
                    collect()
                flight.send((index, [encode_document(d) for d in batch], chunking), batch)
            while flight.waiting:
                collect()
    finally:
        bar.close()
        _forget(flight.waiting)  # interrupted: the workers finish what was sent
        if not index_ready:
            restore_refresh(client, index, previous_refresh)
    client.refresh(index)
    return report_of_batches(index, outcomes, skipped, errors, time.perf_counter() - began, resent=flight.resent)


class _Flight:
    """The batches sent and not yet finished, oldest first, and the watch
    over them: which finished, which ran out of time, which to send again."""

    def __init__(
        self, app: Celery, task, budget_s: float, liveness_check_s: float, ping_timeout_s: float, clock
    ) -> None:
        self.app = app
        self.task = task
        self.budget_s = budget_s
        self.liveness_check_s = liveness_check_s
        self.ping_timeout_s = ping_timeout_s
        self.clock = clock
        self.waiting: list[_Sent] = []
        self.resent = 0
        self._next_check = clock() + liveness_check_s

    def send(self, args: tuple, batch: Sequence[Document]) -> None:
        result = self.task.clone(args=args).apply_async()
        now = self.clock()
        deadline = batch_deadline(now, len(self.waiting), self.budget_s)
        self.waiting.append(
            _Sent(args, len(batch), batch[0].doc_id, batch[-1].doc_id, deadline, now, now, attempts=[result])
        )

    def collect(self) -> list[tuple[_Sent, AsyncResult | None]]:
        """Wait for the oldest batch (WAIT_S at most), look for stranded
        batches when it is time, and take out every batch that finished or
        ran out of time: each with the task that finished it, or None."""
        try:
            # The result backend's pub/sub wakes this at once; the answers of
            # the other batches that arrive meanwhile are kept on their results.
            self.waiting[0].latest.get(timeout=WAIT_S, propagate=False)
        except CeleryTimeout:
            pass
        if self.clock() >= self._next_check:
            self._rescue()
            self._next_check = self.clock() + self.liveness_check_s
        now = self.clock()
        done = []
        for sent in list(self.waiting):
            finished = sent.finished()
            if finished is not None or now >= sent.deadline:
                self.waiting.remove(sent)
                done.append((sent, finished))
        return done

    def _rescue(self) -> None:
        """Send again the batches started on a worker that stopped answering
        a ping, and those that no queue and no live worker holds."""
        views = [task_view(sent.latest, resends=len(sent.attempts) - 1) for sent in self.waiting]
        why = {
            i: f"worker {views[i].hostname} stopped answering" for i in stranded(self.app, views, self.ping_timeout_s)
        }
        for i in self._lost(views):
            why.setdefault(i, "no queue and no live worker held it")
        for i, reason in sorted(why.items()):
            self._resend(self.waiting[i], reason)

    def _lost(self, views: Sequence[TaskView]) -> list[int]:
        now = self.clock()
        candidates = [
            i
            for i, (sent, view) in enumerate(zip(self.waiting, views))
            if view.state in (states.PENDING, states.RETRY)
            and view.resends < MAX_RESENDS
            and now - sent.sent_at >= CLAIM_GRACE_S
        ]
        if not candidates:
            return []
        count = queued(self.app, INGEST_QUEUE)
        if count is None or count:
            return []
        held_ids = holding(self.app, [self.waiting[i].latest.id for i in candidates], self.ping_timeout_s)
        if held_ids is None:
            return []
        # Read again: a task taken meanwhile has started.
        fresh = [task_view(self.waiting[i].latest, resends=views[i].resends) for i in candidates]
        held = {n for n, i in enumerate(candidates) if self.waiting[i].latest.id in held_ids}
        return [candidates[n] for n in unclaimed(fresh, held, count)]

    def _resend(self, sent: _Sent, why: str) -> None:
        result = send_again(self.task.clone(args=sent.args), f"{sent.describe()}: {why}")
        if result is None:
            return
        superseded = sent.latest
        now = self.clock()
        sent.attempts.append(result)
        sent.sent_at = now
        # Sent again, it waits behind every batch in flight.
        sent.deadline = max(sent.deadline, batch_deadline(now, len(self.waiting) - 1, self.budget_s))
        self.resent += 1
        # Should the broker hand the superseded message back (after the
        # visibility timeout), the worker drops it instead of writing the
        # batch a third time; if it is in fact still running, it runs on and
        # whichever copy finishes first is counted.
        _revoke(self.app, [superseded.id])


def _state(result: AsyncResult) -> str:
    return result.state


def _revoke(app: Celery, task_ids: Sequence[str]) -> None:
    try:
        app.control.revoke(list(task_ids))
    except Exception as exc:  # noqa: BLE001 - the batch is counted either way
        log.warning("could not revoke tasks %s: %s: %s", ", ".join(task_ids), type(exc).__name__, exc)


def _forget(in_flight: Iterable[_Sent]) -> None:
    # Cleanup only: with Redis gone the stored results expire on their own,
    # and the failure that stopped the run is the one to report. Each result
    # is then detached, so none raises from its finalizer.
    attempts = [attempt for sent in in_flight for attempt in sent.attempts]
    try:
        with contextlib.suppress(Exception):
            for attempt in attempts:
                attempt.forget()
    finally:
        detach(attempts)


def _given_up(app: Celery, sent: _Sent, now: float, errors: list[str]) -> None:
    """A batch past its deadline: reported with its documents, its tasks
    revoked (a copy still queued or handed back is dropped), never waited on."""
    state = _state(sent.latest)
    resent = len(sent.attempts) - 1
    again = f", sent {resent + 1} times" if resent else ""
    errors.append(
        f"{sent.describe()} not ingested: no worker finished it within {now - sent.first_sent_at:.0f} s "
        f"(task {state.lower()}{again}); run the command again to finish"
    )
    _revoke(app, [attempt.id for attempt in sent.attempts])
    _forget([sent])
    return None


def _outcome(app: Celery, sent: _Sent, attempt: AsyncResult, errors: list[str]) -> BatchOutcome | None:
    """The batch's outcome, from the task that finished it; a batch that
    failed for good goes to ``errors``."""
    try:
        if attempt.successful():
            return decode_outcome(attempt.result)
        failure = attempt.result
        errors.append(
            f"{sent.describe()} not ingested: {type(failure).__name__}: {failure}; run the command again to finish"
        )
        return None
    except CodecError as exc:
        errors.append(f"{sent.describe()}: the worker's answer was not understood: {exc}")
        return None
    finally:
        if later := sent.attempts[sent.attempts.index(attempt) + 1 :]:
            # An older copy finished first: the newer ones (the older were
            # revoked as they were superseded) need not run; one running
            # writes the same chunks, and its answer is not waited for.
            _revoke(app, [other.id for other in later])
        _forget([sent])
