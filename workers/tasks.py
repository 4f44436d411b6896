"""The scoring task, as thin as a web view: decode the message, call
:func:`chunkrag_filter.judging.judge_batch`, encode the judgements.

Provider failures decide the task's fate: a retryable :class:`ChatError`
(429, 5xx, timeout) is retried with exponential backoff up to
``max_retries``; any other fails the task at once, and the dispatcher
reports its chunks unscored with the reason. Unreadable model output is
not a failure: ``judge`` returns None scores with notes.
"""

from __future__ import annotations

import functools
import logging
import random
from typing import Callable

from celery import Celery

from chunkrag_core.providers import make_chat
from chunkrag_core.providers.chat import ChatError
from chunkrag_core.settings import Settings
from chunkrag_filter.judging import judge_batch
from workers.app import JUDGE_TASK, task_time_limit_s
from workers.codec import decode_options, encode_judgement
from workers.score_cache import RedisScoreCache

log = logging.getLogger(__name__)


class ModelMismatch(RuntimeError):
    """The query asked for a different model than this worker judges with."""


def retry_countdown(retries: int, base_s: float, cap_s: float, rng: Callable[[], float] = random.random) -> float:
    """Seconds before retry number ``retries + 1``: exponential from
    ``base_s``, capped at ``cap_s``, with "equal jitter" (half fixed, half
    random) so workers throttled together do not retry in lockstep, yet
    every retry still waits at least half its backoff."""
    ceiling = min(cap_s, base_s * 2 ** max(0, retries))
    return ceiling / 2 + rng() * ceiling / 2


@functools.lru_cache(maxsize=None)
def _score_cache(redis_url: str, ttl_s: int) -> RedisScoreCache:
    # One per worker process; the Redis client inside is made on first use,
    # after the prefork pool has forked.
    return RedisScoreCache.from_url(redis_url, ttl_s)


def register_tasks(app: Celery, settings: Settings) -> None:
    workers = settings.workers

    @app.task(
        name=JUDGE_TASK,
        # Not shared: Celery would otherwise give every later app this
        # closure, with this app's settings.
        shared=False,
        bind=True,
        max_retries=workers.max_retries,
        rate_limit=workers.rate_limit or None,
        time_limit=task_time_limit_s(workers),
    )
    def judge_chunks(self, query: str, texts: list[str], options: dict, model_name: str = "") -> list[dict]:
        if model_name and model_name != settings.chat.model:
            # Scores (and cached scores) from another model than the caller
            # reports would be silently wrong; a mismatch is a setup error.
            raise ModelMismatch(
                f"this worker judges with {settings.chat.model!r} but the query asked for {model_name!r}; "
                "give the gateway and the workers the same CHUNKRAG_CHAT_MODEL"
            )
        try:
            judgements = judge_batch(
                query,
                texts,
                make_chat(settings.chat),
                decode_options(options),
                cache=_score_cache(settings.redis_url, workers.cache_ttl_s),
                model_name=settings.chat.model,
            )
        except ChatError as exc:
            if not exc.retryable:
                raise
            if self.request.retries >= workers.max_retries:
                log.warning("judging failed (%s); giving up after %d retries", exc, workers.max_retries)
                raise
            countdown = retry_countdown(self.request.retries, workers.retry_backoff_s, workers.retry_backoff_max_s)
            log.warning(
                "judging failed (%s); retry %d of %d in %.1f s",
                exc,
                self.request.retries + 1,
                workers.max_retries,
                countdown,
            )
            raise self.retry(exc=exc, countdown=countdown) from exc
        return [encode_judgement(j) for j in judgements]
