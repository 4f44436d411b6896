"""Celery judging that degrades instead of failing, through the gateway over
real HTTP: a Redis server of this test's own (on its own port, default 6393,
never the shared one) as the broker, real Celery worker processes, real
Elasticsearch, the scripted model server.

- Redis stopped mid-way: filtered queries still answer 200, judged in the
  gateway's own threads, and say so (``judged_by: gateway`` with the reason);
  Redis back: they go to the workers again (the seconds it took are printed).
- The workers stopped (Redis up): the same fallback, after the dispatch finds
  that nobody takes its tasks.
- Neither the broker nor the model reachable: 200, scored by the retrieval
  signals alone (``judged_by: retrieval``).
- Under concurrent load with Redis and the workers up: no 503, every query
  judged on the workers (no ping per request to miss its second).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from chunkrag_core.settings import state_home
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services import redis_server
from local_services.celery_workers import CeleryWorkers
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, QUESTION, by_content

pytestmark = pytest.mark.integration

REDIS_PORT = int(os.environ.get("CHUNKRAG_DEGRADE_REDIS_PORT") or 6393)
BUDGET_S = 30.0
RECOVERY_LIMIT_S = 90.0
DOWN_S = 10.0


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-degraded-{uuid.uuid4().hex[:8]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def own_redis():
    server = redis_server.RedisSettings(home=state_home(os.environ), port=REDIS_PORT)
    redis_server.process(server).up()
    yield server
    redis_server.process(server).down()


@pytest.fixture(scope="module")
def model_server():
    with ScriptedOpenAI(default=by_content) as server:
        server._server.handle_error = lambda request, client_address: None
        yield server


@pytest.fixture(scope="module")
def worker_env(model_server, own_redis) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_CHAT_"))}
    return {
        **inherited,
        "REDIS_URL": own_redis.url,
        "CHUNKRAG_CHAT_BASE_URL": model_server.base_url,
        "CHUNKRAG_CHAT_MODEL": "scripted",
        "CHUNKRAG_WORKER_JUDGE": "celery",
        "CHUNKRAG_CHAT_TIMEOUT_S": "10",
        "CHUNKRAG_WORKER_QUERY_BUDGET_S": str(BUDGET_S),
    }


@pytest.fixture
def workers(worker_env, own_redis, tmp_path):
    redis.Redis.from_url(own_redis.url).flushdb()
    with CeleryWorkers(worker_env, tmp_path) as pool:
        pool.start(2)
        yield pool


@pytest.fixture
def gateway(settings, embedder, own_redis, model_server, workers):
    chat = dataclasses.replace(settings.chat, base_url=model_server.base_url, model="scripted", timeout_s=10)
    gateway_settings = dataclasses.replace(
        settings,
        redis_url=own_redis.url,
        chat=chat,
        workers=dataclasses.replace(settings.workers, judge="celery", query_budget_s=BUDGET_S),
    )
    with serving(create_app(gateway_settings, embedder=embedder)) as url:
        yield url


def ask(url: str, index: str, question: str = QUESTION) -> httpx.Response:
    body = {
        "query": {"match": {"text": question}},
        # The judging behind the gate (whose relevance task would find the workers gone first).
        "ext": {"chunkrag": {"candidates": 3, "answer": False, "judge_top": 9, "gate": "off"}},
    }
    return httpx.post(f"{url}/{index}/_search", json=body, timeout=BUDGET_S + 30)


def judged(response: httpx.Response) -> tuple[str, str | None]:
    assert response.status_code == 200, response.text
    section = response.json()["chunkrag"]
    # judged either way: the passage the scripted model names comes first
    assert response.json()["hits"]["hits"][0]["_id"] == "tokyo:0", response.text
    return section["judged_by"], section["judged_by_reason"]


def until_workers_judge(url: str, index: str) -> float:
    """Seconds until a filtered query is judged on the workers again; every
    query on the way answers 200."""
    began = time.monotonic()
    while time.monotonic() - began < RECOVERY_LIMIT_S:
        by, _ = judged(ask(url, index, f"{QUESTION} {uuid.uuid4().hex[:6]}"))
        if by == "workers":
            return time.monotonic() - began
        time.sleep(0.25)
    raise AssertionError(
        f"filtered queries were still not judged on the workers {RECOVERY_LIMIT_S:g} s after Redis came back"
    )


def test_redis_stopped_then_back_filtered_queries_answer_throughout(index, own_redis, gateway, capsys):
    assert judged(ask(gateway, index)) == ("workers", None)

    redis_server.process(own_redis).down()
    went_down = time.monotonic()
    try:
        # Long enough for the workers' own reconnection to back off (2, 4, ... s).
        outcomes = []
        while time.monotonic() - went_down < DOWN_S:
            began = time.monotonic()
            outcomes.append((judged(ask(gateway, index, f"{QUESTION} down {len(outcomes)}")), time.monotonic() - began))
            time.sleep(0.5)
    finally:
        redis_server.process(own_redis).up()
    came_back = time.monotonic()
    for (by, reason), _ in outcomes:
        assert by == "gateway" and reason.startswith("workers: cannot reach the Celery broker (Redis)"), reason
    recovery_s = until_workers_judge(gateway, index)
    with capsys.disabled():
        print(
            f"\nRedis down {DOWN_S:g} s: {', '.join(f'{s:.2f}' for _, s in outcomes)} s per query (judged by the "
            "gateway); "
            f"back on the workers {recovery_s:.1f} s after Redis returned ({time.monotonic() - came_back:.1f} s with "
            "the last query)"
        )


def test_workers_stopped_filtered_queries_are_judged_by_the_gateway(index, workers, gateway, capsys):
    assert judged(ask(gateway, index))[0] == "workers"
    workers.stop()
    began = time.monotonic()
    by, reason = judged(ask(gateway, index, f"{QUESTION} no workers"))
    first_s = time.monotonic() - began
    assert (
        by == "gateway"
        and "no worker took the query's tasks" in reason
        and "no Celery worker answered a ping" in reason
    )
    began = time.monotonic()
    # the finding is held: the next query goes to the gateway's threads at once
    by, reason = judged(ask(gateway, index, f"{QUESTION} still no workers"))
    assert by == "gateway" and "not tried again yet" in reason
    held_s = time.monotonic() - began
    workers.start(1)
    recovery_s = until_workers_judge(gateway, index)
    with capsys.disabled():
        print(
            f"\nno workers: first query {first_s:.1f} s, the next {held_s:.2f} s (judged by the gateway); back on the "
            f"workers {recovery_s:.1f} s after one started"
        )


def test_without_broker_or_model_the_retrieval_signals_decide(settings, embedder, index):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    chat = dataclasses.replace(settings.chat, base_url=f"http://127.0.0.1:{port}/v1", model="scripted", timeout_s=5)
    nothing = dataclasses.replace(
        settings,
        redis_url=f"redis://127.0.0.1:{port}/0",
        chat=chat,
        workers=dataclasses.replace(settings.workers, judge="celery"),
    )
    with serving(create_app(nothing, embedder=embedder)) as url:
        response = ask(url, index)
    assert response.status_code == 200, response.text
    body = response.json()
    section = body["chunkrag"]
    assert section["judged_by"] == "retrieval"
    assert (
        "workers: cannot reach the Celery broker" in section["judged_by_reason"]
        and "gateway: the model provider is unavailable" in section["judged_by_reason"]
    )
    assert body["hits"]["hits"][0]["_id"] == "tokyo:0" and section["usage"]["model_calls"] == 0
    assert all(
        "calibrated" in hit["_chunkrag"]["scores"] and "base" not in hit["_chunkrag"]["scores"]
        for hit in body["hits"]["hits"]
    )


def test_no_503_under_load_with_redis_and_workers_up(index, gateway, capsys):
    # Bounded, loopback: 6 clients x 20 filtered queries, each a fresh question
    # (the gateway judges 4 at once and queues 16: none is turned away).
    def client(n: int) -> list[tuple[int, str | None]]:
        out = []
        with httpx.Client(timeout=BUDGET_S + 30) as http:
            for i in range(20):
                body = {
                    "query": {"match": {"text": f"{QUESTION} load {n}-{i}"}},
                    "ext": {"chunkrag": {"candidates": 3, "answer": False, "judge_top": 9}},
                }
                response = http.post(f"{gateway}/{index}/_search", json=body)
                out.append(
                    (
                        response.status_code,
                        response.json().get("chunkrag", {}).get("judged_by")
                        if response.status_code == 200
                        else response.text,
                    )
                )
        return out

    began = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        results = [r for batch in pool.map(client, range(6)) for r in batch]
    elapsed = time.monotonic() - began
    statuses = [status for status, _ in results]
    assert statuses.count(200) == len(results), [r for r in results if r[0] != 200][:3]
    assert {by for _, by in results} == {"workers"}
    with capsys.disabled():
        print(
            f"\nload: {len(results)} filtered queries from 6 clients in {elapsed:.1f} s, all 200, all judged on the "
            "workers"
        )
