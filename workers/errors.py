"""The workers' few project errors, and the one place that reads the queue
clients' exceptions (redis-py's, kombu's, Celery's) to raise them.

The dispatchers (``dispatch``, ``ingest_dispatch``) run their broker and
result-backend calls inside :func:`queue_errors`, so whoever calls them (the
gateway, the CLI) sees only these types and never imports a queue client to
read a failure. Importing this module loads no client library: the gateway
maps these errors without pulling in Redis or Celery.

Each message may name the broker's address (for the log); ``reason`` says the
same without it, for a caller's response.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from chunkrag_filter.judging import JudgingUnavailable


class WorkersUnavailable(JudgingUnavailable):
    """Judging cannot be dispatched: Redis is unreachable or no worker runs.
    The message names the broker; ``reason`` says the same without its
    address, for the gateway's callers."""


class QueueUnavailable(JudgingUnavailable):
    """Redis (the result backend) or the Celery broker stopped answering
    during a dispatch. ``reason`` names which, without an address."""


class WorkersFailed(JudgingUnavailable):
    """A worker took a task but gave back no usable result: the task
    failed, its worker stopped answering, or it did not finish within the
    time it was waited for. ``reason`` says which, without an address."""


class WorkersTimedOut(TimeoutError):
    """The workers did not finish a task within the time it was waited for."""

    reason = "the workers did not finish in time"


def queue_error(exc: BaseException) -> BaseException:
    """The project error for a queue client's exception; any other exception
    comes back as it is. The clients are imported here, on a failure, by code
    that already runs them."""
    import redis
    from celery.exceptions import TimeoutError as CeleryTimeout
    from kombu.exceptions import OperationalError

    if isinstance(exc, redis.exceptions.ConnectionError):
        return QueueUnavailable(f"Redis: {exc}", reason="Redis is not reachable")
    if isinstance(exc, OperationalError):
        return QueueUnavailable(f"the Celery broker: {exc}", reason="the Celery broker (Redis) is not reachable")
    if isinstance(exc, CeleryTimeout):
        return WorkersTimedOut(f"{WorkersTimedOut.reason}: {exc}" if str(exc) else WorkersTimedOut.reason)
    return exc


@contextmanager
def queue_errors() -> Iterator[None]:
    """Raise a queue client's exception from the block as its project error
    (chained to the original, for the log); others pass unchanged."""
    try:
        yield
    except Exception as exc:
        translated = queue_error(exc)
        if translated is exc:
            raise
        raise translated from exc
