"""Judging fanned out over Celery workers, as a drop-in ``JudgeMany`` for
:func:`run_filter`: the Celery side only. The batches are the ones
``chunkrag_filter.judging`` plans; this module sends them, one
``judge_chunks`` task each, as a group, collects the results, and gives up on
them at the query budget. A batch whose task failed for good, or did not
finish in time, comes back as judgements with no scores and a note saying
why, so ``run_filter`` reports those chunks "unscored" and a query never
hangs on a worker.

No worker is pinged before a query: a ping under load can miss its one
second and fail a query that the workers would have judged. Failure is read
from the dispatch itself. A send the broker refuses, or tasks that nobody
starts within ``start_wait_s`` while no worker answers a ping, raise
:class:`WorkersUnavailable` (a :class:`JudgingUnavailable`: the caller judges
elsewhere); any other failure of Redis or the broker leaves as
:class:`~workers.errors.QueueUnavailable` (one too), never as a client's
exception. ``WorkerHealth``, shared by the queries of a process, remembers
such a failure for a few seconds, so the queries right after it go elsewhere
at once instead of each finding out again; the first query after that tries
the workers again.

A worker that dies whole (a machine lost, not just a pool process) keeps
its task's message unacknowledged until the broker's visibility timeout,
which outlasts the query budget. So while it waits, the dispatcher looks
every few seconds for tasks started on a worker that no longer answers a
ping, sends their batch again, and takes whichever copy finishes first; the
judgements of such a batch carry a note naming the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Collection, Sequence

from celery import Celery, group, states
from celery.exceptions import TimeoutError as CeleryTimeout

from chunkrag_core import cancellation, tracing
from chunkrag_core.chunk import Chunk
from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import Settings
from chunkrag_filter.judging import (
    Batch,
    Judgement,
    ScoringOptions,
    passages,
    plan_batches,
    unscored,
    within_request_budget,
)
from workers.app import JUDGE_TASK, make_app
from workers.codec import CodecError, decode_judgement, encode_options
from workers.errors import WorkersUnavailable, queue_errors

log = logging.getLogger(__name__)

START_HINT = "start one with `chunkrag workers` or `celery -A workers.app worker --pool=prefork`"

# kombu's reply queue for control commands is shared by the threads of a
# process; concurrent pings would take each other's replies.
_PING_LOCK = threading.Lock()

# How often a waiting query looks for tasks stranded on a dead worker. A
# dead worker's batch waits this long (plus a ping timeout) before it is sent
# again, against a budget of minutes; each look costs one GET per unfinished
# task, and a ping round trip only when some of them have started.
LIVENESS_CHECK_S = 5.0

# Sends of one batch beyond the first, at most: a batch that takes down
# every worker it reaches must not go on to take down the rest.
MAX_RESENDS = 2

# A query whose tasks none has started after this long asks whether any
# worker is alive (unless one was seen at work lately): with none, it is
# judged elsewhere. Busy workers only delay it.
START_WAIT_S = 3.0

# How long a failed dispatch (broker refused, no worker) sends the queries
# after it elsewhere without trying; the first query after it tries again,
# so judging is back on the workers within this of the broker's return.
UNAVAILABLE_HOLD_S = 2.0

# Finding no worker costs a query START_WAIT_S and a ping: that finding is
# held longer, so one query in this many seconds pays it while none runs.
NO_WORKER_HOLD_S = 5.0

# How often a query waiting for its tasks looks whether its request is gone
# (seconds): its thread is then free within this, and its tasks revoked.
CANCEL_LOOK_S = 0.5

# A task started or finished this recently is proof enough of a live worker:
# no ping is needed to tell busy workers from none.
SEEN_FRESH_S = 30.0

# The broker publish is retried at most this often (kombu's default, three
# times, adds a second to each query while the broker is down).
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


class WorkerHealth:
    """What the dispatches of one process learned of the broker and the
    workers: the last failure (held for ``hold_s``) and when a worker was
    last seen at work. Thread-safe; one per gateway."""

    def __init__(self, hold_s: float = UNAVAILABLE_HOLD_S, clock: Callable[[], float] = time.monotonic):
        self.hold_s = hold_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failed_at: float | None = None
        self._reason = ""
        self._seen_at: float | None = None
        self._hold_s = hold_s

    def unavailable(self) -> str | None:
        """The reason of the last failure while it is held, else None."""
        with self._lock:
            if self._failed_at is not None and self._clock() - self._failed_at < self._hold_s:
                return self._reason
            return None

    def failed(self, reason: str, hold_s: float | None = None) -> None:
        """A dispatch failed: hold it for ``hold_s`` (default: the health's own)."""
        with self._lock:
            self._failed_at, self._reason, self._seen_at = self._clock(), reason, None
            self._hold_s = self.hold_s if hold_s is None else hold_s

    def seen(self) -> None:
        """A worker started or finished one of our tasks."""
        with self._lock:
            self._failed_at, self._seen_at = None, self._clock()

    def seen_lately(self, within_s: float = SEEN_FRESH_S) -> bool:
        with self._lock:
            return self._seen_at is not None and self._clock() - self._seen_at < within_s


@dataclass(frozen=True, slots=True)
class TaskView:
    """What the result backend says of a batch's newest task."""

    state: str
    hostname: str | None = None  # the worker running it, once STARTED
    resends: int = 0  # times this batch was already sent again


def started_on(views: Sequence[TaskView]) -> set[str]:
    """The workers holding a started task: the ones worth a ping."""
    return {v.hostname for v in views if v.state == states.STARTED and v.hostname}


def to_resend(views: Sequence[TaskView], live: Collection[str], max_resends: int = MAX_RESENDS) -> list[int]:
    """Indexes of the tasks to send again: started on a worker not in
    ``live``. A queued (PENDING) task waits for any worker; a killed pool
    process has its task requeued by its own (live) worker; a RETRY task
    waits out its countdown on a worker we cannot name; finished ones are
    done. None of those is stranded."""
    return [
        i
        for i, v in enumerate(views)
        if v.state == states.STARTED and v.hostname and v.hostname not in live and v.resends < max_resends
    ]


def unclaimed(
    views: Sequence[TaskView], held: Collection[int], queued: int, max_resends: int = MAX_RESENDS
) -> list[int]:
    """Indexes of the tasks no worker will run: waiting (PENDING, or RETRY:
    a countdown) while ``queued`` (the messages in their queue) is 0 and no
    live worker holds them (``held``: indexes a live worker reports running,
    reserved or counting down). Such a message was taken off the queue by a
    worker that died before recording it, or is held unacknowledged by a dead
    one until the broker's visibility timeout. While the queue holds
    messages, a waiting task may be among them: none is sent again."""
    if queued:
        return []
    return [
        i
        for i, v in enumerate(views)
        if v.state in (states.PENDING, states.RETRY) and i not in held and v.resends < max_resends
    ]


def taken(views: Sequence[TaskView]) -> bool | None:
    """Whether a worker has taken any of a query's tasks (started, retried or
    finished one); None when the result backend could not say for some and
    the others are still queued."""
    if any(v.state not in (states.PENDING, "UNKNOWN") for v in views):
        return True
    return None if any(v.state == "UNKNOWN" for v in views) else False


def resend_note(hostname: str) -> str:
    return f"re-sent after worker {hostname} stopped answering"


def check_workers(app: Celery, timeout: float = 1.0, *, limit: int | None = None) -> int:
    """How many workers answered a ping within ``timeout`` seconds (stop
    listening after ``limit`` answers). Raises :class:`WorkersUnavailable`
    with the reason when the broker is unreachable or none answered."""
    broker = redact_url(app.conf.broker_url or "")
    try:
        with app.connection_for_write() as connection:
            # max_retries=0: fail on the first refusal instead of kombu's
            # default of retrying forever.
            connection.ensure_connection(max_retries=0, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - whatever the transport raised, the broker is down
        raise WorkersUnavailable(
            f"cannot reach the Celery broker (Redis) at {broker}: {exc}",
            reason="cannot reach the Celery broker (Redis)",
        ) from exc
    try:
        with _PING_LOCK:
            replies = app.control.ping(timeout=timeout, limit=limit)
    except Exception as exc:  # noqa: BLE001
        raise WorkersUnavailable(
            f"pinging Celery workers through {broker} failed: {exc}", reason="pinging the Celery workers failed"
        ) from exc
    if not replies:
        silent = f"no Celery worker answered a ping within {timeout:g} s"
        raise WorkersUnavailable(f"{silent} on {broker}; {START_HINT}", reason=f"{silent}; {START_HINT}")
    return len(replies)


def worker_took(
    app: Celery,
    views: Sequence[TaskView],
    health: WorkerHealth,
    *,
    trust_recent: bool,
    ping_timeout_s: float,
    waited: str,
) -> bool:
    """Whether a worker has taken one of the tasks in ``views``. Raises
    :class:`WorkersUnavailable` when none has and no worker answers a ping
    (``waited`` says what went untaken). Busy workers (answering, or at first
    seen at work lately, which spares the ping) only make the caller wait:
    False, look again later. Judging and relevance scoring share it."""
    seen = taken(views)
    if seen:
        health.seen()
        return True
    if seen is None or (trust_recent and health.seen_lately()):
        return False
    try:
        check_workers(app, ping_timeout_s, limit=1)
    except WorkersUnavailable as exc:
        reason = f"no worker took {waited}: {exc.reason}"
        health.failed(reason, NO_WORKER_HOLD_S)
        raise WorkersUnavailable(f"{reason} ({exc})", reason=reason) from exc
    return False


def celery_judge_many(
    app: Celery | None = None,
    *,
    settings: Settings | None = None,
    batch_size: int | None = None,
    budget_s: float | None = None,
    ping_timeout_s: float = 1.0,
    liveness_check_s: float | None = LIVENESS_CHECK_S,
    health: WorkerHealth | None = None,
    start_wait_s: float = START_WAIT_S,
) -> CeleryJudgeMany:
    """A ``JudgeMany`` that sends batches of ``batch_size`` chunks to the
    workers and waits at most ``budget_s`` seconds (defaults from
    ``settings.workers``). Looks every ``liveness_check_s`` seconds of
    waiting (None: never) for tasks stranded on a worker that died. Raises
    :class:`WorkersUnavailable` when the broker refuses the tasks, or none
    is started within ``start_wait_s`` and no worker answers a ping; pass
    the process's ``health`` to share what one query learned with the next."""
    settings = settings or Settings.from_env()
    budget = settings.workers.query_budget_s if budget_s is None else budget_s
    if budget <= 0:
        raise ValueError(f"the judging budget must be positive, got {budget} s")
    if liveness_check_s is not None and liveness_check_s <= 0:
        raise ValueError(f"the liveness check interval must be positive (or None: never), got {liveness_check_s} s")
    return CeleryJudgeMany(
        app or make_app(settings),
        batch_size=batch_size or settings.workers.batch_size,
        budget_s=budget,
        model_name=settings.chat.model,
        ping_timeout_s=ping_timeout_s,
        liveness_check_s=liveness_check_s,
        health=health or WorkerHealth(),
        start_wait_s=start_wait_s,
    )


@dataclass(eq=False)
class _Sent:
    """One batch of a query and the tasks sent for it, oldest first."""

    part: Batch
    args: tuple
    attempts: list = field(default_factory=list)  # AsyncResult
    notes: list[str] = field(default_factory=list)

    @property
    def latest(self):
        return self.attempts[-1]

    def settled(self) -> bool:
        return any(_ready(attempt) for attempt in self.attempts)


class CeleryJudgeMany:
    """The ``JudgeMany`` of :func:`celery_judge_many`; ``resent`` counts the
    batches it sent again because their worker died."""

    def __init__(
        self,
        app: Celery,
        *,
        batch_size: int,
        budget_s: float,
        model_name: str,
        ping_timeout_s: float,
        liveness_check_s: float | None,
        health: WorkerHealth,
        start_wait_s: float = START_WAIT_S,
    ):
        self.app = app
        self.batch_size = batch_size
        self.budget_s = budget_s
        self.model_name = model_name
        self.ping_timeout_s = ping_timeout_s
        self.liveness_check_s = liveness_check_s
        self.health = health
        self.start_wait_s = start_wait_s
        self._resent = 0
        self._lock = threading.Lock()  # the gateway calls one judge from several threads

    @property
    def resent(self) -> int:
        with self._lock:
            return self._resent

    def __call__(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> list[Judgement]:
        # A queue client's exception that got past the dispatch's own handling
        # leaves as the workers' project error (workers.errors), never raw.
        with queue_errors():
            return self._judge(query, chunks, options)

    def _judge(self, query: str, chunks: Sequence[Chunk], options: ScoringOptions) -> list[Judgement]:
        if not chunks:
            return []
        if (reason := self.health.unavailable()) is not None:
            raise WorkersUnavailable(f"{reason} (a moment ago; not tried again yet)")
        encoded = encode_options(options)
        sent = [
            _Sent(part, (query, passages(chunks, part), encoded, self.model_name))
            for part in plan_batches(len(chunks), options, self.batch_size)
        ]
        # Its own budget, and no more than the request's model-stage budget has left.
        deadline = time.monotonic() + within_request_budget(self.budget_s)
        with tracing.span("judge dispatch", "producer", {"chunkrag.batches": len(sent)}):
            self._send(sent)
        try:
            self._wait(sent, deadline)
        except (WorkersUnavailable, cancellation.Cancelled):
            # Unfinished tasks are revoked: nobody waits for their judgements.
            _release(self.app, [attempt for batch in sent for attempt in batch.attempts], {})
            raise
        judgements: list[Judgement] = []
        outcomes = {}
        for batch in sent:
            outcomes.update((attempt.id, _outcome(attempt)) for attempt in batch.attempts)
            state, value = outcomes[_chosen(batch, outcomes).id]
            judgements.extend(
                _noted(_judgements(state, value, batch.part.stop - batch.part.start, self.budget_s), batch.notes)
            )
        if any(state not in (states.PENDING, "UNKNOWN") for state, _ in outcomes.values()):
            self.health.seen()
        _release(self.app, [attempt for batch in sent for attempt in batch.attempts], outcomes)
        return judgements

    def _signature(self, args: tuple, expires: float):
        # expires: a task still queued when the budget is spent is dropped by
        # the worker instead of judged for nobody. headers: the trace's
        # traceparent when tracing is on (the worker continues it).
        return self.app.signature(JUDGE_TASK, args=args, expires=expires, headers=tracing.headers())

    def _send(self, sent: list[_Sent]) -> None:
        try:
            results = (
                group(self._signature(batch.args, self.budget_s) for batch in sent)
                .apply_async(retry_policy=PUBLISH_RETRY_POLICY)
                .results
            )
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised, the broker is down for us
            message = f"cannot reach the Celery broker (Redis) at {redact_url(self.app.conf.broker_url or '')}: {exc}"
            # The health holds the address-free reason: it reaches callers' responses.
            self.health.failed("cannot reach the Celery broker (Redis)")
            raise WorkersUnavailable(message, reason="cannot reach the Celery broker (Redis)") from exc
        for batch, result in zip(sent, results):
            batch.attempts.append(result)

    def _wait(self, sent: list[_Sent], deadline: float) -> None:
        """Until every batch has a finished task or the deadline passes,
        looking for stranded tasks every ``liveness_check_s``, and until a
        worker takes one of them, whether any worker is there at all."""
        waiting = list(sent)
        first_look = True
        start_check: float | None = time.monotonic() + self.start_wait_s
        next_check = time.monotonic() + (self.liveness_check_s or float("inf"))
        while waiting:
            cancellation.check()
            now = time.monotonic()
            if now >= deadline:
                return
            if start_check is not None and now >= start_check:
                taken_yet = self._check_taken(sent, trust_recent=first_look)
                first_look = False
                start_check = None if taken_yet else time.monotonic() + self.start_wait_s
                continue
            if now >= next_check:
                self._rescue(waiting, deadline)
                waiting = [batch for batch in waiting if not batch.settled()]
                next_check = time.monotonic() + self.liveness_check_s
                continue
            try:
                until = min(deadline, next_check, start_check or deadline, now + cancel_look_s())
                waiting[0].latest.get(timeout=until - now, propagate=False)
            except CeleryTimeout:
                continue
            except Exception as exc:  # noqa: BLE001 - the result backend failed; what arrived is kept
                log.warning("waiting for judging results failed: %s: %s", type(exc).__name__, exc)
                return
            waiting.pop(0)

    def _check_taken(self, sent: list[_Sent], *, trust_recent: bool) -> bool:
        """Whether a worker has taken one of the query's tasks. Raises
        :class:`WorkersUnavailable` when none has and no worker answers a
        ping. Busy workers (answering, or at first seen at work lately, which
        spares the ping) only make the query wait: False, look again later."""
        return worker_took(
            self.app,
            [_view(batch) for batch in sent],
            self.health,
            trust_recent=trust_recent,
            ping_timeout_s=self.ping_timeout_s,
            waited=f"the query's tasks within {self.start_wait_s:g} s",
        )

    def _rescue(self, waiting: list[_Sent], deadline: float) -> None:
        """Send again the batches whose newest task started on a worker that
        no longer answers a ping."""
        views = [_view(batch) for batch in waiting]
        for index in stranded(self.app, views, self.ping_timeout_s):
            self._resend(waiting[index], views[index].hostname, deadline)

    def _resend(self, batch: _Sent, hostname: str, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        # The old task may still come back from the broker after the
        # visibility timeout; whichever finishes first is used and the other
        # is revoked with the query's leftovers.
        result = send_again(self._signature(batch.args, remaining), resend_note(hostname))
        if result is None:
            return
        batch.attempts.append(result)
        batch.notes.append(resend_note(hostname))
        with self._lock:
            self._resent += 1


def cancel_look_s() -> float:
    """How long one wait for a task's result may last before the query
    looks again whether its request is gone: CANCEL_LOOK_S inside a request,
    any length outside one."""
    return CANCEL_LOOK_S if cancellation.current() is not None else float("inf")


def _ready(result) -> bool:
    try:
        return result.ready()
    except Exception:  # noqa: BLE001 - the result backend failed; read again later
        return False


def _view(batch: _Sent) -> TaskView:
    return task_view(batch.latest, resends=len(batch.attempts) - 1)


def task_view(result, resends: int = 0) -> TaskView:
    """The state of a task (an ``AsyncResult``), from one read of its result."""
    try:
        meta = result.backend.get_task_meta(result.id)
    except Exception:  # noqa: BLE001 - unknown is not stranded
        return TaskView("UNKNOWN", resends=resends)
    state = meta.get("status", states.PENDING)
    info = meta.get("result")
    # A STARTED result holds {"pid": ..., "hostname": ...} (task_track_started).
    hostname = info.get("hostname") if state == states.STARTED and isinstance(info, dict) else None
    return TaskView(state, hostname, resends=resends)


def stranded(
    app: Celery, views: Sequence[TaskView], ping_timeout_s: float, max_resends: int = MAX_RESENDS
) -> list[int]:
    """Indexes of the tasks started on a worker that no longer answers a
    ping within ``ping_timeout_s`` (see :func:`to_resend`); none when no
    task has started or the ping itself failed."""
    holders = started_on(views)
    if not holders:
        return []
    live = _answering(app, holders, ping_timeout_s)
    if live is None:
        return []
    return to_resend(views, live, max_resends)


def send_again(signature, why: str):
    """Send ``signature`` as a new task (a new id, so the old one, should the
    broker hand it back, is told apart) and log ``why``; None, logged, when
    the broker refused it: the batch keeps waiting on the task it has."""
    try:
        result = signature.apply_async()
    except Exception as exc:  # noqa: BLE001 - whatever the transport raised
        log.warning("could not send a batch again (%s): %s: %s", why, type(exc).__name__, exc)
        return None
    log.warning("batch sent again as task %s: %s", result.id, why)
    return result


def holding(app: Celery, task_ids: Sequence[str], timeout: float) -> set[str] | None:
    """Which of ``task_ids`` a live worker holds (running, reserved, or
    waiting out a retry's countdown), from every worker that answers within
    ``timeout``; None when the inspection itself failed."""
    try:
        with _PING_LOCK:
            replies = app.control.inspect(timeout=timeout).query_task(*task_ids)
    except Exception as exc:  # noqa: BLE001
        log.warning("asking the workers for their tasks failed: %s: %s", type(exc).__name__, exc)
        return None
    return {task_id for reply in (replies or {}).values() for task_id in reply or {}}


def queued(app: Celery, queue: str) -> int | None:
    """Messages waiting in ``queue`` on the broker; None when it could not say."""
    try:
        with app.connection_for_read() as connection, connection.channel() as channel:
            return channel.queue_declare(queue=queue, passive=False).message_count
    except Exception as exc:  # noqa: BLE001
        log.warning("could not count the messages in %s: %s: %s", queue, type(exc).__name__, exc)
        return None


def _answering(app: Celery, hostnames: Collection[str], timeout: float) -> set[str] | None:
    """Which of ``hostnames`` answer a ping within ``timeout`` (live ones
    answer at once; only a dead one costs the wait); None when the ping
    itself failed, which says nothing about the workers."""
    try:
        with _PING_LOCK:
            replies = app.control.ping(destination=sorted(hostnames), timeout=timeout, limit=len(hostnames))
    except Exception as exc:  # noqa: BLE001
        log.warning("pinging workers %s failed: %s: %s", ", ".join(sorted(hostnames)), type(exc).__name__, exc)
        return None
    return {name for reply in replies or () for name in reply}


def _outcome(result) -> tuple[str, object]:
    """(state, result or exception) of a task, read once."""
    try:
        return result.state, result.result
    except Exception as exc:  # noqa: BLE001 - the result backend failed
        return "UNKNOWN", exc


FINAL_STATES = frozenset({"SUCCESS", "FAILURE", "REVOKED"})


def _chosen(batch: _Sent, outcomes: dict):
    """The task whose outcome a batch reports: a success, else one that
    failed for good, else the newest (still unfinished)."""
    for wanted in ({"SUCCESS"}, FINAL_STATES):
        for attempt in batch.attempts:
            if outcomes[attempt.id][0] in wanted:
                return attempt
    return batch.latest


def _noted(judgements: list[Judgement], notes: list[str]) -> list[Judgement]:
    if not notes:
        return judgements
    return [replace(j, notes=(*j.notes, *notes)) for j in judgements]


def _judgements(state: str, value, count: int, budget: float) -> list[Judgement]:
    if state == "SUCCESS":
        try:
            judgements = [decode_judgement(item) for item in value]
        except (CodecError, TypeError) as exc:
            return [unscored(f"worker returned an unreadable result: {exc}")] * count
        if len(judgements) != count:
            return [unscored(f"worker returned {len(judgements)} judgements for {count} chunks")] * count
        return judgements
    if state in ("FAILURE", "REVOKED"):
        return [unscored(f"judging failed: {type(value).__name__}: {value}")] * count
    if state == "UNKNOWN":
        return [unscored(f"judging result unavailable: {type(value).__name__}: {value}")] * count
    return [unscored(f"not judged within the {budget:g} s budget (task {state.lower()})")] * count


def _release(app: Celery, results, outcomes: dict) -> None:
    # Revoke the tasks still queued, running on a worker that died, or
    # waiting to retry (their answers would come too late or twice), stop
    # listening for them and drop the stored results.
    pending = [r.id for r in results if outcomes.get(r.id, ("PENDING",))[0] not in FINAL_STATES]
    try:
        if pending:
            app.control.revoke(pending)
        for result in results:
            result.forget()
    except Exception as exc:  # noqa: BLE001 - cleanup only; the judgements are already made
        log.warning("could not release judging tasks: %s: %s", type(exc).__name__, exc)
    finally:
        detach(results)


def detach(results) -> None:
    """Stop the result backend listening for each of ``results`` (AsyncResults)
    now, where a failure is caught, and cut each from its backend. Left to
    its finalizer, an AsyncResult unsubscribes from Redis inside ``__del__``;
    with Redis gone, Celery's reconnection gives up there with a RuntimeError
    (E_RETRY_LIMIT_EXCEEDED) that nothing can catch, printed as "Exception
    ignored in AsyncResult.__del__" whenever the garbage collector runs."""
    for result in results:
        backend, result.backend = result.backend, None
        if backend is None:
            continue
        try:
            backend.remove_pending_result(result)
        except Exception as exc:  # noqa: BLE001 - Redis gone: nothing left to unsubscribe from
            log.debug("could not stop listening for task %s: %s: %s", result.id, type(exc).__name__, exc)
