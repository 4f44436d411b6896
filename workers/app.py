"""The Celery application: Redis as broker and result backend, and the
delivery guarantees the scoring tasks rely on.

    celery -A workers.app worker --loglevel=INFO --concurrency=2 --pool=prefork

``make_app`` builds an app from settings and opens no connection. The
module attribute ``app``, which Celery's command line looks up, is made on
first access (reading the environment then), not at import.
"""

from __future__ import annotations

import functools

from celery import Celery
from kombu import Queue

from chunkrag_core.settings import Settings, WorkerSettings

QUEUE = "chunkrag"
# Ingest batches wait in a queue of their own: a worker takes from both in
# turn, so a judging task waits behind at most the batch each process holds,
# not behind a whole corpus queued ahead of it. `-Q chunkrag` or
# `-Q chunkrag-ingest` dedicates a worker to one kind of work.
INGEST_QUEUE = "chunkrag-ingest"
JUDGE_TASK = "chunkrag.judge_chunks"
INGEST_TASK = "chunkrag.ingest_batch"
# The project's relevance model over one query's texts (relevance:
# crossencoder, rerank: local), in the judging queue: a query waits on it.
RELEVANCE_TASK = "chunkrag.score_relevance"
# A whole pass of `chunkrag sync`, for a schedule (`celery beat`) to send.
SYNC_TASK = "chunkrag.sync_index"

# Seconds a task may outlive the query budget before its process is killed:
# room to finish the model call in flight and store the result.
TIME_LIMIT_GRACE_S = 5.0


def task_time_limit_s(workers: WorkerSettings) -> float:
    """Hard limit on one scoring task: past the query budget nobody waits
    for its result, so the process is better spent on the next query."""
    return workers.query_budget_s + TIME_LIMIT_GRACE_S


def ingest_time_limit_s(workers: WorkerSettings) -> float:
    """Hard limit on one run of an ingest batch: past its budget the client
    has stopped waiting for it and reported it not ingested."""
    return workers.ingest_batch_budget_s


def visibility_timeout_s(workers: WorkerSettings) -> float:
    """Seconds after which Redis hands an unacknowledged message to another
    worker: how a task held by a worker that died is not lost.

    A message stays unacknowledged while its task runs (acks_late), at most
    the hard time limit, or while it waits out a retry countdown, at most
    retry_backoff_max_s. A shorter timeout would run healthy tasks twice (a
    message restored while its task still runs); a much longer one would
    redeliver after the caller has given up. Even this one outlasts the
    query budget, so a waiting query does not rely on it: the dispatchers
    re-send a task whose worker stops answering pings.
    """
    longest = max(task_time_limit_s(workers), ingest_time_limit_s(workers))
    return longest + workers.retry_backoff_max_s + 5.0


def restore_interval_s(workers: WorkerSettings) -> int:
    # kombu sweeps for expired unacked messages every interval * throttle
    # seconds (100 s by default); a tenth of the visibility timeout keeps
    # redelivery close to it at one cheap ZRANGE per sweep.
    return int(min(10.0, max(1.0, visibility_timeout_s(workers) / 10)))


def celery_config(settings: Settings) -> dict:
    workers = settings.workers
    transport = {
        "visibility_timeout": visibility_timeout_s(workers),
        "unacked_restore_interval": restore_interval_s(workers),
        "unacked_restore_throttle": 1,
        "socket_connect_timeout": 5,
    }
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        "broker_transport_options": transport,
        "result_backend_transport_options": {
            "retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
        },
        "redis_socket_connect_timeout": 5,
        "broker_connection_retry_on_startup": True,
        # A task is acknowledged only after it ran, and a worker process that
        # dies mid-task puts its message back: a crash loses no judgement.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # A started task's result records the worker running it, so a waiting
        # dispatcher can tell a task stranded on a dead worker (whose message
        # only comes back after the visibility timeout) and send it again.
        "task_track_started": True,
        # With acks_late, a lost broker connection means the message will be
        # redelivered; stop the running copy rather than judge twice.
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # Each process holds one message at a time, so a slow model call
        # does not strand prefetched work behind it.
        "worker_prefetch_multiplier": 1,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        # Results are read within the query budget; keep them briefly.
        "result_expires": max(600, int(2 * workers.query_budget_s)),
        # Our own queue and control exchange: another Celery app on the same
        # Redis neither takes our tasks nor answers our pings.
        "task_default_queue": QUEUE,
        "task_queues": (Queue(QUEUE, routing_key=QUEUE), Queue(INGEST_QUEUE, routing_key=INGEST_QUEUE)),
        "task_routes": {INGEST_TASK: {"queue": INGEST_QUEUE}, SYNC_TASK: {"queue": INGEST_QUEUE}},
        "control_exchange": QUEUE,
    }


def make_app(settings: Settings | None = None) -> Celery:
    """A Celery app for ``settings`` (default: the environment) with the
    scoring task registered. Cheap: no connection is opened here."""
    from workers.tasks import register_tasks

    settings = settings or Settings.from_env()
    app = Celery("chunkrag", set_as_current=False)
    app.conf.update(celery_config(settings))
    register_tasks(app, settings)
    return app


@functools.lru_cache(maxsize=1)
def default_app() -> Celery:
    """The app from the environment, once per process."""
    return make_app()


def __getattr__(name: str):
    # `celery -A workers.app` reads `workers.app.app`; made on that access.
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
