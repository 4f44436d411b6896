"""Dependencies failing in the middle of a filtered query through the
gateway, and the documented outcome of each:

- Redis (the score cache, judging in threads) restarted mid-query: the query
  answers 200 with every chunk judged; the cache is an optimisation, a
  failed read or write is skipped (and the cache left alone for 30 s).
- The model server killed mid-call: 503 naming the model provider (a
  retryable failure: the client may try again), never a 500 or a hang.
- A Celery worker killed mid-judgement (judging on the workers): the
  dispatcher re-sends the dead worker's batch to a live one; the query
  answers 200 with every chunk judged. (Library-level variants, a pool
  process killed and the visibility-timeout redelivery, are in
  tests/integration/test_workers.py.)
- Redis restarted while it is the Celery broker of a query in flight: the
  batch and its result are lost with the restarted (non-persistent) Redis;
  the query answers 200 within its budget with those chunks "unscored" and
  the fallback's top hits marked "fallback", ``nothing_relevant`` true; a
  retry judges normally.

Redis here is a server of this test's own on another port (default 6391),
never the shared one.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_core.settings import state_home
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services import redis_server
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, MODEL_STALLS, QUESTION, by_content

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAULT_REDIS_PORT = int(os.environ.get("CHUNKRAG_FAULT_REDIS_PORT") or 6391)


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-faults-{uuid.uuid4().hex[:8]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def own_redis():
    redis = redis_server.RedisSettings(home=state_home(os.environ), port=FAULT_REDIS_PORT)
    redis_server.process(redis).up()
    yield redis
    redis_server.process(redis).down()


def test_redis_restarted_during_a_filtered_query(settings, embedder, index, own_redis):
    with ScriptedOpenAI(default=by_content) as server:
        server._server.handle_error = lambda request, client_address: None
        model = OpenAICompatibleChat(model="scripted", base_url=server.base_url, timeout_s=10)
        gateway_settings = dataclasses.replace(settings, redis_url=own_redis.url)
        with serving(create_app(gateway_settings, model=model, embedder=embedder)) as url:
            # Warm the cache client's connection, so the restart breaks a live one.
            assert (
                httpx.post(
                    f"{url}/v1/ask",
                    json={"index": index, "question": QUESTION, "options": {"candidates": 2, "judge_top": 9}},
                    timeout=30,
                ).status_code
                == 200
            )
            reply: dict = {}
            stalled = f"{QUESTION} {MODEL_STALLS}"  # the model takes 1.5 s on it
            worker = threading.Thread(
                target=lambda: reply.update(
                    r=httpx.post(
                        f"{url}/v1/ask",
                        json={"index": index, "question": stalled, "options": {"candidates": 4, "judge_top": 9}},
                        timeout=60,
                    )
                )
            )
            worker.start()
            deadline = time.monotonic() + 10
            while not any(MODEL_STALLS in str(r) for r in server.requests) and time.monotonic() < deadline:
                time.sleep(0.05)
            redis_server.process(own_redis).down()
            redis_server.process(own_redis).up()
            worker.join(60)
            after = httpx.get(f"{url}/v1/health", timeout=30).json()
    response = reply["r"]
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["chunks"][0]["id"] == "tokyo:0" and body["chunks"][0]["kept"]
    assert all(c["reason"] != "unscored" for c in body["chunks"])
    assert after["redis"]["ok"]


MODEL_SERVER = """
import sys, time
from local_services.scripted_openai import ScriptedOpenAI, completion
def reply(request):
    time.sleep(float(sys.argv[1]))
    return completion("1")(request)
with ScriptedOpenAI(default=reply) as server:
    print(server.base_url, flush=True)
    time.sleep(600)
"""


def start_model_server(delay_s: float) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", MODEL_SERVER, str(delay_s)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, process.stdout.readline().strip()


def test_model_server_killed_during_a_call(settings, embedder, index):
    process, base_url = start_model_server(delay_s=5.0)
    try:
        model = OpenAICompatibleChat(model="scripted", base_url=base_url, timeout_s=10)
        with serving(create_app(settings, model=model, embedder=embedder)) as url:
            reply: dict = {}
            asking = threading.Thread(
                target=lambda: reply.update(
                    r=httpx.post(
                        f"{url}/{index}/_search",
                        json={
                            "query": {"match": {"text": QUESTION}},
                            "ext": {"chunkrag": {"candidates": 2, "judge_top": 9}},
                        },
                        timeout=60,
                    )
                )
            )
            started = time.monotonic()
            asking.start()
            time.sleep(1.0)  # the judging call is in flight, the model "thinking"
            os.killpg(process.pid, signal.SIGKILL)
            asking.join(60)
            elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    response = reply["r"]
    assert response.status_code == 503, response.text
    assert "model provider" in response.json()["error"]["reason"]
    assert elapsed < 10, "the gateway noticed the dead server at once, it did not wait out a timeout"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_dependencies_are_named_without_their_addresses(settings, embedder, index, caplog):
    """Elasticsearch, Redis and the model on closed ports: each 503 (and the
    public health report) names the dependency; no host, port, URL or account
    reaches the caller, all of it reaches the gateway's log."""
    es_port, redis_port, model_port = closed_port(), closed_port(), closed_port()
    ports = (es_port, redis_port, model_port)
    addresses = ("127.0.0.1", "localhost", *map(str, ports), "http://", "redis://", "gw-user", "s3cret")

    def shows_an_address(response) -> bool:
        return any(part in response.text for part in addresses)

    es_url, redis_url = f"http://gw-user:s3cret@127.0.0.1:{es_port}", f"redis://127.0.0.1:{redis_port}/0"
    down = dataclasses.replace(settings, es_url=es_url, redis_url=redis_url)
    retrieval_only = {"query": {"match": {"text": "x"}}, "ext": {"chunkrag": {"stages": False}}}
    with caplog.at_level("WARNING", logger="chunkrag.gateway"), serving(create_app(down, embedder=embedder)) as url:
        passed_through = httpx.get(f"{url}/_count", timeout=30)
        filtered = httpx.post(f"{url}/{index}/_search", json=retrieval_only, timeout=30)
        health = httpx.get(f"{url}/v1/health", timeout=30)
    for response in (passed_through, filtered, health):
        assert response.status_code == 503 and not shows_an_address(response), response.text
    assert filtered.json()["error"]["reason"] == "Elasticsearch is not reachable"
    assert health.json()["elasticsearch"]["reason"] == "Elasticsearch is not reachable"
    assert health.json()["redis"]["reason"] == "Redis is not reachable"
    assert f"127.0.0.1:{es_port}" in caplog.text and f"127.0.0.1:{redis_port}" in caplog.text

    model = OpenAICompatibleChat(model="scripted", base_url=f"http://127.0.0.1:{model_port}/v1", timeout_s=10)
    judged = {"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"candidates": 2, "judge_top": 9}}}
    with caplog.at_level("WARNING", logger="chunkrag.gateway"):
        with serving(create_app(settings, model=model, embedder=embedder)) as url:
            asked = httpx.post(f"{url}/{index}/_search", json=judged, timeout=60)
    assert asked.status_code == 503 and not shows_an_address(asked), asked.text
    assert "model provider" in asked.json()["error"]["reason"]
    assert f"127.0.0.1:{model_port}" in caplog.text


def test_a_worker_killed_during_a_filtered_query(settings, embedder, index, own_redis, tmp_path):
    import redis

    from local_services.celery_workers import CeleryWorkers
    from tests.integration.test_workers import _worker_running

    # Scores cached by an earlier test of the same question would spare the model call held here.
    redis.Redis.from_url(own_redis.url).flushdb()
    held, release = threading.Event(), threading.Event()

    def hold_first(request):
        # The first judging call never answers its (soon dead) worker.
        if not held.is_set():
            held.set()
            release.wait(60)
        return by_content(request)

    with ScriptedOpenAI(default=hold_first) as server:
        server._server.handle_error = lambda request, client_address: None
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_CHAT_"))}
        env = {
            **inherited,
            "REDIS_URL": own_redis.url,
            "CHUNKRAG_CHAT_BASE_URL": server.base_url,
            "CHUNKRAG_CHAT_MODEL": "scripted",
            "CHUNKRAG_WORKER_JUDGE": "celery",
            "CHUNKRAG_CHAT_TIMEOUT_S": "10",
        }
        gateway_settings = dataclasses.replace(
            settings,
            redis_url=own_redis.url,
            chat=dataclasses.replace(settings.chat, base_url=server.base_url, model="scripted", timeout_s=10),
            workers=dataclasses.replace(settings.workers, judge="celery"),
        )
        with CeleryWorkers(env, tmp_path) as workers:
            workers.start(2)
            with serving(create_app(gateway_settings, embedder=embedder)) as url:
                try:
                    reply: dict = {}
                    asking = threading.Thread(
                        target=lambda: reply.update(
                            r=httpx.post(
                                f"{url}/{index}/_search",
                                json={
                                    "query": {"match": {"text": QUESTION}},
                                    "ext": {"chunkrag": {"candidates": 4, "answer": False, "judge_top": 9}},
                                },
                                timeout=120,
                            )
                        )
                    )
                    asking.start()
                    assert held.wait(30), "no judging call reached the model"
                    holder = _worker_running(workers.app, workers, "Tokyo", timeout=20)
                    workers.kill(holder)
                    asking.join(120)
                finally:
                    release.set()
    response = reply["r"]
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["tokyo:0"] and hits[0]["_chunkrag"]["reason"] == "above_threshold"


def test_redis_restarted_while_it_is_the_broker_of_a_query(settings, embedder, index, own_redis, tmp_path):
    import redis

    from local_services.celery_workers import CeleryWorkers

    # Scores cached by an earlier test of the same question would spare the model call held here.
    redis.Redis.from_url(own_redis.url).flushdb()
    held, release = threading.Event(), threading.Event()

    def hold_first(request):
        if not held.is_set():
            held.set()
            release.wait(60)
        return by_content(request)

    with ScriptedOpenAI(default=hold_first) as server:
        server._server.handle_error = lambda request, client_address: None
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_CHAT_"))}
        env = {
            **inherited,
            "REDIS_URL": own_redis.url,
            "CHUNKRAG_CHAT_BASE_URL": server.base_url,
            "CHUNKRAG_CHAT_MODEL": "scripted",
            "CHUNKRAG_WORKER_JUDGE": "celery",
            "CHUNKRAG_CHAT_TIMEOUT_S": "10",
        }
        gateway_settings = dataclasses.replace(
            settings,
            redis_url=own_redis.url,
            chat=dataclasses.replace(settings.chat, base_url=server.base_url, model="scripted", timeout_s=10),
            workers=dataclasses.replace(settings.workers, judge="celery", query_budget_s=20),
        )
        with CeleryWorkers(env, tmp_path) as workers:
            workers.start(1)
            with serving(create_app(gateway_settings, embedder=embedder)) as url:
                try:
                    reply: dict = {}
                    started = time.monotonic()
                    asking = threading.Thread(
                        target=lambda: reply.update(
                            r=httpx.post(
                                f"{url}/{index}/_search",
                                json={
                                    "query": {"match": {"text": QUESTION}},
                                    "ext": {
                                        "chunkrag": {
                                            "candidates": 4,
                                            "answer": False,
                                            "include_dropped": True,
                                            "judge_top": 9,
                                        }
                                    },
                                },
                                timeout=120,
                            )
                        )
                    )
                    asking.start()
                    assert held.wait(30), "no judging call reached the model"
                    redis_server.process(own_redis).down()
                    redis_server.process(own_redis).up()
                    release.set()
                    asking.join(120)
                    elapsed = time.monotonic() - started
                finally:
                    release.set()
    # The query answers 200 within the budget either way. Where the worker held
    # the batch, it and its result lived in the restarted Redis: those chunks are
    # "unscored" and the fallback keeps the best retrieved ones (as for a model
    # that timed out). Where no worker took the tasks within the dispatcher's
    # wait (a loaded machine), judging degraded to the gateway's own threads
    # before the restart, the held call was the gateway's, and the response
    # says so: every chunk is judged.
    response = reply["r"]
    assert response.status_code == 200, response.text
    body = response.json()
    decisions = [h["_chunkrag"]["reason"] for h in body["hits"]["hits"]] + [
        d["_chunkrag"]["reason"] for d in body["chunkrag"]["dropped"]
    ]
    assert elapsed < gateway_settings.workers.query_budget_s + 10
    if body["chunkrag"]["judged_by"] == "gateway":
        assert "workers:" in body["chunkrag"]["judged_by_reason"], body["chunkrag"]
        assert set(decisions) <= {"above_threshold", "below_threshold"}, decisions
    else:
        assert body["chunkrag"]["judged_by"] == "workers", body["chunkrag"]
        assert set(decisions) <= {"fallback", "unscored"} and "fallback" in decisions, decisions
        assert body["chunkrag"]["nothing_relevant"]
