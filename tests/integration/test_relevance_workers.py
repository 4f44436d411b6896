"""The project's relevance model on real Celery worker processes over the
real Redis: the workers' scores are the gateway's own, a filter run through
them says so, and when the workers cannot score (no broker, no worker, the
worker killed) the gateway scores in-process and says why; the same through
a gateway started with CHUNKRAG_WORKER_JUDGE=celery, in post-search.

The workers use a Redis database of their own (REDIS_DB), flushed before
and after, so their queue never meets the development one or another test's.
"""

from __future__ import annotations

import dataclasses
import os

import httpx
import pytest
import redis

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.local_relevance import shared_relevance_model
from chunkrag_core.settings import Settings
from chunkrag_filter.judging import BY_GATEWAY, BY_WORKERS
from chunkrag_filter.pipeline import FilterOptions, run_filter
from chunkrag_filter.processors.calibration import LogisticModel
from chunkrag_filter.relevance_places import DegradingRelevance
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from local_services.celery_workers import CeleryWorkers
from tests.support.plain_index import plain_index
from workers.app import make_app
from workers.errors import WorkersUnavailable
from workers.relevance_dispatch import celery_relevance

pytestmark = pytest.mark.integration

REDIS_DB = 7
QUESTION = "how do I rotate an API key"
TEXTS = [
    "The cafeteria serves lunch from noon.",
    "To rotate an API key, open the console, choose Security, then Keys, and press Rotate.",
    "Invoices are sent on the first day of each month.",
]
# A calibration reading only the relevance model: the filter's score is the model's probability.
ONLY_RELEVANCE = LogisticModel(("relevance_logit",), (1.0,), 0.0)
# Bounded waits: a worker start on a busy machine, a query's budget.
START_TIMEOUT_S = 120.0
BUDGET_S = 60.0


def with_db(url: str, db: int) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


@pytest.fixture(scope="module")
def worker_env(settings) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("CHUNKRAG_WORKER_")}
    return {**inherited, "REDIS_URL": with_db(settings.redis_url, REDIS_DB)}


@pytest.fixture(scope="module")
def worker_settings(worker_env) -> Settings:
    return Settings.from_env(worker_env)


@pytest.fixture(scope="module")
def redis_db(worker_settings):
    client = redis.Redis.from_url(worker_settings.redis_url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable ({exc}); start it with `chunkrag services up`", pytrace=False)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def app(worker_settings):
    return make_app(worker_settings)


@pytest.fixture(scope="module")
def in_process():
    return shared_relevance_model().load()


def workers_pool(worker_env, tmp_path_factory) -> CeleryWorkers:
    return CeleryWorkers(worker_env, tmp_path_factory.mktemp("celery-relevance"))


def test_the_workers_score_as_the_gateway_does_and_the_filter_says_where(
    app, worker_env, worker_settings, redis_db, in_process, tmp_path_factory
):
    with workers_pool(worker_env, tmp_path_factory) as pool:
        pool.start(1, timeout=START_TIMEOUT_S)
        on_workers = celery_relevance(app, settings=worker_settings, budget_s=BUDGET_S)
        scores = on_workers.score(QUESTION, TEXTS)
        assert scores == pytest.approx(in_process.score(QUESTION, TEXTS), abs=1e-6)
        assert max(range(3), key=scores.__getitem__) == 1  # the passage that answers

        chunks = [Chunk(doc_id="d", position=i, text=t, start=0, end=len(t), score=1.0) for i, t in enumerate(TEXTS)]
        relevance = DegradingRelevance([(BY_WORKERS, on_workers), (BY_GATEWAY, in_process)])
        options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, fixed_threshold=0.5)
        result = run_filter(QUESTION, chunks, model=None, options=options, relevance_model=relevance)
        assert (result.relevance_by, result.relevance_by_reason) == (BY_WORKERS, None)
        assert [c.text for c in result.kept] == [TEXTS[1]]
        assert [d.chunk.stage_scores["relevance"] for d in result.decisions] == pytest.approx(scores, abs=1e-6)


def test_without_a_broker_the_gateway_scores_and_says_why(worker_settings, in_process):
    # Port 1: nothing listens, the connection is refused at once.
    down = dataclasses.replace(worker_settings, redis_url="redis://127.0.0.1:1/0")
    on_workers = celery_relevance(make_app(down), settings=down, budget_s=BUDGET_S)
    with pytest.raises(WorkersUnavailable) as refused:
        on_workers.score(QUESTION, TEXTS)
    assert refused.value.reason == "cannot reach the Celery broker (Redis)"
    scored = DegradingRelevance([(BY_WORKERS, on_workers), (BY_GATEWAY, in_process)]).scored(QUESTION, TEXTS)
    assert scored.by == BY_GATEWAY and scored.reason == "workers: cannot reach the Celery broker (Redis)"
    assert list(scored.scores) == pytest.approx(in_process.score(QUESTION, TEXTS), abs=1e-6)


MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}
DOCS = {
    "rotate": {"title": "Rotating API keys", "body": " ".join(TEXTS[:2]) + " The old key keeps working for a day."},
    "billing": {"title": "Invoices", "body": TEXTS[2] + " Past invoices are on the billing page."},
}


def test_a_celery_gateway_scores_on_the_workers_and_in_process_once_the_worker_is_killed(
    es, embedder, worker_env, worker_settings, redis_db, in_process, tmp_path_factory
):
    celery = dataclasses.replace(worker_settings, workers=dataclasses.replace(worker_settings.workers, judge="celery"))
    body = {
        "query": {"match": {"body": QUESTION}},
        "ext": {"chunkrag": {"answer": False, "rerank": "local", "include_dropped": True}},
    }
    with (
        plain_index(es, "test-relevance-workers", MAPPING, DOCS) as index,
        workers_pool(worker_env, tmp_path_factory) as pool,
        serving(create_app(celery, embedder=embedder)) as gateway,
    ):
        (worker,) = pool.start(1, timeout=START_TIMEOUT_S)
        first = httpx.post(f"{gateway}/{index}/_search", json=body, timeout=BUDGET_S + 30)
        assert first.status_code == 200, first.text
        section = first.json()["chunkrag"]
        assert (section["relevance_by"], section["relevance_by_reason"]) == (BY_WORKERS, None)
        kept = [p for hit in first.json()["hits"]["hits"] for p in hit["_chunkrag"]["passages"]]
        assert kept
        # The workers' rerank score is the model's probability for the passage, as the
        # gateway's own process reads it.
        expected = in_process.score(QUESTION, [p["text"] for p in kept])
        assert [p["scores"]["rerank"] for p in kept] == pytest.approx(expected, abs=1e-6)

        pool.kill(worker)  # a machine lost: no worker is left to take the task
        second = httpx.post(f"{gateway}/{index}/_search", json=body, timeout=BUDGET_S + 30)
        assert second.status_code == 200, second.text
        section = second.json()["chunkrag"]
        assert section["relevance_by"] == BY_GATEWAY
        assert section["relevance_by_reason"].startswith("workers: no worker took the relevance task")
        again = [p for hit in second.json()["hits"]["hits"] for p in hit["_chunkrag"]["passages"]]
        assert [(p["text"], p["scores"]["rerank"]) for p in again] == [
            (p["text"], pytest.approx(p["scores"]["rerank"], abs=1e-6)) for p in kept
        ]
