"""The scoring and ingest tasks, as thin as a web view: decode the message,
call :func:`chunkrag_filter.judging.judge_batch` (or the project's
relevance model, or :func:`ingest_pipeline.pipeline.ingest_batch`), encode
the result.

An ingest batch the cluster or the embedder could not take (a node lost, a
shard without its primary, a timeout) is retried by Celery's own
``autoretry_for`` with exponential backoff; chunk ids are deterministic, so a
batch written twice holds each chunk once. A document the worker cannot
decode is reported skipped, and its batch goes on.

Provider failures decide the task's fate: a retryable :class:`ChatError`
(429, 5xx, timeout) is retried with exponential backoff up to
``max_retries``; any other fails the task at once, and the dispatcher
reports its chunks unscored with the reason. Unreadable model output is
not a failure: ``judge`` returns None scores with notes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from typing import Callable

from celery import Celery

from chunkrag_core import tracing
from chunkrag_core.engines import make_backend
from chunkrag_core.engines.errors import EngineTimeout, EngineUnavailable
from chunkrag_core.providers import make_chat, make_embedder
from chunkrag_core.providers.chat import ChatError
from chunkrag_core.providers.embedding import EmbeddingError
from chunkrag_core.providers.local_relevance import shared_relevance_model
from chunkrag_core.settings import Settings
from chunkrag_filter.judging import judge_batch
from ingest_pipeline.pipeline import BatchNotWritten, ingest_batch
from ingest_pipeline.sources import Skipped
from ingest_pipeline.sync import sync_index
from workers.app import (
    INGEST_TASK,
    JUDGE_TASK,
    RELEVANCE_TASK,
    SYNC_TASK,
    ingest_time_limit_s,
    task_time_limit_s,
)
from workers.codec import (
    CodecError,
    decode_chunking,
    decode_document,
    decode_options,
    decode_texts,
    encode_judgement,
    encode_outcome,
    encode_sync_report,
)
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


@functools.lru_cache(maxsize=None)
def _ingest_edges(settings: Settings):
    # One search client and one embedder per worker process, made on the
    # first batch, after the prefork pool has forked.
    return make_backend(settings), make_embedder(settings.embedder)


# What an ingest batch is retried on: the cluster or the embedder failing
# for now. Anything else (a bug, a refused mapping) fails the batch at once,
# and the client reports its documents.
INGEST_RETRIED = (EngineUnavailable, EngineTimeout, BatchNotWritten, EmbeddingError, ConnectionError)


def _decoded(documents: list) -> tuple[list, list[Skipped]]:
    decoded, rejected = [], []
    for number, data in enumerate(documents):
        try:
            decoded.append(decode_document(data))
        except CodecError as exc:
            origin = data.get("origin") or data.get("doc_id") if isinstance(data, dict) else None
            rejected.append(Skipped(str(origin or f"document {number + 1} of its batch"), str(exc)))
    return decoded, rejected


def register_tasks(app: Celery, settings: Settings) -> None:
    register_ingest_task(app, settings)
    register_sync_task(app, settings)
    register_relevance_task(app, settings)
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
        # The dispatcher's trace, continued here when tracing is on.
        tracing.ensure_from_env("chunkrag-worker")
        parent = tracing.extract(trace_headers(self.request))
        with tracing.span("judge_chunks", "consumer", {"chunkrag.chunks": len(texts)}, parent=parent):
            return judge(self, query, texts, options, model_name)

    def judge(self, query: str, texts: list[str], options: dict, model_name: str) -> list[dict]:
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


def trace_headers(request) -> dict[str, str]:
    """The trace headers a task's message carried (Celery lays custom
    message headers out on the request, or under ``headers``)."""
    carried = {}
    for name in ("traceparent", "tracestate"):
        value = getattr(request, name, None) or (getattr(request, "headers", None) or {}).get(name)
        if isinstance(value, str):
            carried[name] = value
    return carried


def register_relevance_task(app: Celery, settings: Settings) -> None:
    @app.task(name=RELEVANCE_TASK, shared=False, time_limit=task_time_limit_s(settings.workers))
    def score_relevance(query: str, texts: list) -> list[float]:
        # The model is read once per worker process, on its first task; a
        # model that cannot load fails the task (RelevanceError), and the
        # dispatcher scores in the gateway instead.
        return shared_relevance_model().score(*decode_texts(query, texts))


def register_ingest_task(app: Celery, settings: Settings) -> None:
    workers = settings.workers

    @app.task(
        name=INGEST_TASK,
        shared=False,
        autoretry_for=INGEST_RETRIED,
        max_retries=workers.ingest_max_retries,
        retry_backoff=max(1, int(workers.retry_backoff_s)),
        retry_backoff_max=int(workers.retry_backoff_max_s),
        retry_jitter=True,
        # Acknowledged once written: a batch on a worker that dies goes to another.
        acks_late=True,
        reject_on_worker_lost=True,
        # Within the broker's visibility timeout, so a healthy batch is never
        # handed to a second worker while it runs; a run killed at the limit
        # fails (acknowledged) and the client reports its documents.
        time_limit=ingest_time_limit_s(workers),
    )
    def ingest_documents(index: str, documents: list, chunking: dict) -> dict:
        client, embedder = _ingest_edges(settings)
        decoded, rejected = _decoded(documents)
        outcome = ingest_batch(
            decoded,
            client=client,
            embedder=embedder,
            settings=dataclasses.replace(settings, chunking=decode_chunking(chunking)),
            index=index,
            rejected=rejected,
        )
        return encode_outcome(outcome)


def register_sync_task(app: Celery, settings: Settings) -> None:
    workers = settings.workers

    @app.task(
        name=SYNC_TASK,
        shared=False,
        autoretry_for=INGEST_RETRIED,
        max_retries=workers.ingest_max_retries,
        retry_backoff=max(1, int(workers.retry_backoff_s)),
        retry_backoff_max=int(workers.retry_backoff_max_s),
        retry_jitter=True,
        # Acknowledged when it starts: a pass may run longer than the broker's
        # visibility timeout, and a late acknowledgement would then hand it to
        # a second worker while it runs (two passes writing one companion).
        # A pass lost with its worker is taken up by the next scheduled one,
        # from the position it saved.
        acks_late=False,
    )
    def sync_source(
        source: str,
        companion: str | None = None,
        fields: list | None = None,
        title_field: str | None = None,
        chunking: dict | None = None,
    ) -> dict:
        client, embedder = _ingest_edges(settings)
        chosen = settings if chunking is None else dataclasses.replace(settings, chunking=decode_chunking(chunking))
        report = sync_index(
            source,
            client=client,
            embedder=embedder,
            settings=chosen,
            companion=companion,
            fields=fields or None,
            title_field=title_field,
        )
        return encode_sync_report(report)
