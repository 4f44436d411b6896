"""The project's relevance model on the Celery workers, as a
``RelevanceModel`` for :func:`chunkrag_filter.pipeline.run_filter`
(``relevance: crossencoder``, ``rerank: local``): one ``score_relevance``
task per call, with the texts of a query's candidates (or kept chunks).

A query's scores are all or nothing: a ranking with some texts unscored
would be silently wrong. So every way the workers can fail raises one of
the project's :class:`~chunkrag_filter.judging.JudgingUnavailable` errors,
and the caller (``chunkrag_filter.relevance_places.DegradingRelevance``)
scores in the gateway instead and says so:

- the broker refuses the task, or no worker takes it within
  ``start_wait_s`` while none answers a ping: :class:`WorkersUnavailable`
  (held in the process's ``WorkerHealth``, shared with judging, so the next
  queries do not each find out again);
- the task failed, its worker stopped answering a ping while it ran, it
  returned something that is not one probability per text, or it did not
  finish within the budget: :class:`WorkersFailed`;
- Redis failing mid-wait: :class:`QueueUnavailable` (``queue_errors``).

The waits are the judging dispatcher's (``workers.dispatch``): its start
wait, liveness check and ping, and its publish retry policy.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

from celery import Celery, states
from celery.exceptions import TimeoutError as CeleryTimeout

from chunkrag_core import cancellation, tracing
from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import Settings
from chunkrag_filter.relevance_places import ranked
from workers.app import RELEVANCE_TASK, make_app
from workers.codec import CodecError, decode_scores
from workers.dispatch import (
    LIVENESS_CHECK_S,
    PUBLISH_RETRY_POLICY,
    START_WAIT_S,
    WorkerHealth,
    cancel_look_s,
    stranded,
    task_view,
    worker_took,
)
from workers.errors import WorkersFailed, WorkersUnavailable, queue_errors

log = logging.getLogger(__name__)

# The longest a query waits for the workers' relevance scores before the
# gateway scores the texts itself. The model reads a query's candidates in
# about a second on two cores; a task still unfinished after this is stuck
# behind judging tasks or on a lost worker, and scoring here costs less
# than waiting on.
RELEVANCE_BUDGET_S = 20.0


def celery_relevance(
    app: Celery | None = None,
    *,
    settings: Settings | None = None,
    budget_s: float | None = None,
    health: WorkerHealth | None = None,
    ping_timeout_s: float = 1.0,
    start_wait_s: float = START_WAIT_S,
    liveness_check_s: float = LIVENESS_CHECK_S,
) -> "CeleryRelevance":
    """A ``RelevanceModel`` that scores on the workers, waiting at most
    ``budget_s`` (default: the query budget of ``settings.workers``), never
    more than :data:`RELEVANCE_BUDGET_S`. Pass the process's ``health`` to
    share what one query learned of the workers with the next."""
    settings = settings or Settings.from_env()
    budget = min(RELEVANCE_BUDGET_S, settings.workers.query_budget_s if budget_s is None else budget_s)
    if budget <= 0:
        raise ValueError(f"the relevance budget must be positive, got {budget} s")
    if liveness_check_s <= 0:
        raise ValueError(f"the liveness check interval must be positive, got {liveness_check_s} s")
    return CeleryRelevance(
        app or make_app(settings),
        budget_s=budget,
        health=health or WorkerHealth(),
        ping_timeout_s=ping_timeout_s,
        start_wait_s=start_wait_s,
        liveness_check_s=liveness_check_s,
    )


class CeleryRelevance:
    """The ``RelevanceModel`` of :func:`celery_relevance`; safe to share
    between threads (each call waits on its own task)."""

    def __init__(
        self,
        app: Celery,
        *,
        budget_s: float,
        health: WorkerHealth,
        ping_timeout_s: float,
        start_wait_s: float,
        liveness_check_s: float,
    ):
        self.app = app
        self.budget_s = budget_s
        self.health = health
        self.ping_timeout_s = ping_timeout_s
        self.start_wait_s = start_wait_s
        self.liveness_check_s = liveness_check_s

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """P(relevant) per text, in order, computed on a worker."""
        if not texts:
            return []
        # A queue client's exception that got past the handling below leaves
        # as the workers' project error, never raw.
        with queue_errors():
            return self._score(query, list(texts))

    def rerank(self, query: str, texts: Sequence[str]) -> list[tuple[int, float]]:
        return ranked(self.score(query, texts))

    def _score(self, query: str, texts: list[str]) -> list[float]:
        if (reason := self.health.unavailable()) is not None:
            raise WorkersUnavailable(f"{reason} (a moment ago; not tried again yet)", reason=reason)
        deadline = time.monotonic() + self.budget_s
        signature = self.app.signature(
            RELEVANCE_TASK, args=(query, texts), expires=self.budget_s, headers=tracing.headers()
        )
        try:
            result = signature.apply_async(retry_policy=PUBLISH_RETRY_POLICY)
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised, the broker is down for us
            reason = "cannot reach the Celery broker (Redis)"
            self.health.failed(reason)
            broker = redact_url(self.app.conf.broker_url or "")
            raise WorkersUnavailable(f"{reason} at {broker}: {exc}", reason=reason) from exc
        try:
            value = self._wait(result, deadline)
        finally:
            _release(self.app, result)
        try:
            return decode_scores(value, len(texts))
        except CodecError as exc:
            raise WorkersFailed(f"a worker returned unusable relevance scores: {exc}") from exc

    def _wait(self, result, deadline: float):
        """The task's value once it succeeded; raises as the module says."""
        first_look = True
        start_check: float | None = time.monotonic() + self.start_wait_s
        next_check = time.monotonic() + self.liveness_check_s
        while True:
            cancellation.check()  # the finally of _score revokes the task
            now = time.monotonic()
            if now >= deadline:
                raise WorkersFailed(f"the workers did not score the texts within {self.budget_s:g} s")
            try:
                until = min(deadline, next_check, start_check or deadline, now + cancel_look_s())
                result.get(timeout=until - now, propagate=False)
            except CeleryTimeout:
                pass
            else:
                state, value = result.state, result.result
                if state == states.SUCCESS:
                    self.health.seen()
                    return value
                raise WorkersFailed(f"the relevance task failed on a worker: {type(value).__name__}: {value}")
            now = time.monotonic()
            if start_check is not None and now >= start_check:
                start_check = None if self._taken(result, trust_recent=first_look) else now + self.start_wait_s
                first_look = False
            if now >= next_check:
                lost = stranded(self.app, [task_view(result)], self.ping_timeout_s, max_resends=1)
                if lost:
                    raise WorkersFailed("the worker scoring the texts stopped answering")
                next_check = time.monotonic() + self.liveness_check_s

    def _taken(self, result, *, trust_recent: bool) -> bool:
        """Whether a worker took the task; raises :class:`WorkersUnavailable`
        when none did and no worker answers a ping (busy workers only make
        the query wait)."""
        return worker_took(
            self.app,
            [task_view(result)],
            self.health,
            trust_recent=trust_recent,
            ping_timeout_s=self.ping_timeout_s,
            waited=f"the relevance task within {self.start_wait_s:g} s",
        )


def _release(app: Celery, result) -> None:
    # An unfinished task is revoked (its scores would come for nobody); the
    # stored result is dropped either way.
    try:
        if result.state not in states.READY_STATES:
            app.control.revoke([result.id])
        result.forget()
    except Exception as exc:  # noqa: BLE001 - cleanup only
        log.warning("could not release relevance task %s: %s: %s", result.id, type(exc).__name__, exc)
