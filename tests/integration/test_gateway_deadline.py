"""A gateway no caller can starve, against the real Elasticsearch and the
real relevance model: a search past its budget, or whose client goes
away, stops using the CPU (the gateway is `chunkrag serve` in a process of
its own, its CPU time read from /proc); a quiet key is served while other
keys hold the places, in one gateway and across two sharing their counts
through Redis (a scripted model server holding the flooding searches until
the test lets them go); and a request over the cost bound is a 400."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from contextlib import ExitStack

import httpx
import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from chunkrag_gateway.shared_state import SharedRedis, SharedSearches
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI, completion, is_listwise, listwise_choice

pytestmark = pytest.mark.integration

# The longest any wait here may last (seconds): a gateway's start on a busy
# machine, a search's end after it was stopped.
STARTUP_S = 240.0
BOUND_S = 60.0
DOCUMENTS = CANDIDATES = 200  # a sentence each: a chunk each
QUERY = (
    "Which regional survey measured the largest change in the monitored quantity during the winter, and what "
    "did the field teams report about the instruments, the sampling sites and the seasonal corrections applied? "
    "Name the region, the year and the site where the instruments were recalibrated, and say whether the units "
    "measured in that season were higher or lower than in the surveys of the neighbouring regions."
)
# A judge call whose prompt holds this waits until the test lets it go.
HOLD = "held-by-the-model"


def _sentence(doc: int) -> str:
    seasons = ("winter", "spring", "summer", "autumn", "monsoon")
    return (
        f"Survey {doc} in region {doc * 7 % 31} measured {doc * 13} units of the monitored quantity during the "
        f"{seasons[doc % 5]} of {1990 + doc % 30}, with instruments recalibrated at site {doc % 11}."
    )


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-deadline-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(f"s{d}", _sentence(d), f"s{d}", title=f"survey {d}") for d in range(DOCUMENTS)]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    es.refresh(name)
    assert es.count(name) >= CANDIDATES
    yield name
    es.delete_index(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _running(metrics_url: str) -> float | None:
    for line in httpx.get(metrics_url, timeout=10).text.splitlines():
        if line.startswith("chunkrag_gateway_filtered_running "):
            return float(line.split()[1])
    return None


@pytest.fixture(scope="module")
def served(settings, index):
    """`chunkrag serve` in a process of its own with a short deadline for a
    filtered search: ES_REQUEST_TIMEOUT_S 1 + budget_s + CHUNKRAG_CHAT_TIMEOUT_S 1."""
    port, metrics_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "ES_URL": settings.es_url,
        "ES_REQUEST_TIMEOUT_S": "1",
        "CHUNKRAG_CHAT_TIMEOUT_S": "1",
        "CHUNKRAG_GATEWAY_MAX_CANDIDATES": str(CANDIDATES),
        "CHUNKRAG_GATEWAY_METRICS_PORT": str(metrics_port),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "chunkrag_cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:  # healthy: the models are read
            assert process.poll() is None, "the gateway exited"
            assert time.monotonic() < deadline, "the gateway did not become healthy"
            try:
                if httpx.get(f"{url}/v1/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield process.pid, url, f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        process.terminate()
        process.wait(60)


def _relevance_search(budget_s: float) -> dict:
    options = {"candidates": CANDIDATES, "relevance": "crossencoder", "rerank": "local", "budget_s": budget_s}
    return {"query": {"match": {"text": QUERY}}, "size": 5, "ext": {"chunkrag": options}}


def _settled(pid: int, metrics_url: str) -> float:
    """Waits (at most BOUND_S) until no search holds a place and the
    gateway's CPU use over a second is an idle process's; returns the CPU
    seconds it used meanwhile."""
    began, deadline = _cpu_s(pid), time.monotonic() + BOUND_S
    while True:
        assert time.monotonic() < deadline, "the gateway went on working"
        window = _cpu_s(pid)
        time.sleep(1.0)
        if _running(metrics_url) == 0 and _cpu_s(pid) - window < 0.1:
            return _cpu_s(pid) - began


def test_past_its_budget_or_its_client_a_search_stops_using_the_cpu(served, index):
    pid, url, metrics_url = served
    _settled(pid, metrics_url)
    # The whole work: every candidate read by the relevance model (its
    # deadline, 1 + 120 + 1 s, is far away).
    before = _cpu_s(pid)
    whole = httpx.post(f"{url}/{index}/_search", json=_relevance_search(120), timeout=300)
    assert whole.status_code == 200, whole.text[:300]
    assert whole.json()["chunkrag"]["relevance_by"] == "gateway"
    whole_cpu = _cpu_s(pid) - before
    _settled(pid, metrics_url)

    # Past its budget (0.1 s): the relevance model stops within a batch and the
    # search answers with what it had scored, before its deadline (1 + 0.1 + 1 s).
    before = _cpu_s(pid)
    late = httpx.post(f"{url}/{index}/_search", json=_relevance_search(0.1), timeout=300)
    assert late.status_code == 200 and late.json()["chunkrag"]["budget_ran_out"] == "relevance", late.text[:300]
    at_answer = _cpu_s(pid) - before
    after_answer = _settled(pid, metrics_url)

    # A client that gives up (its deadline far away): the work stops as well.
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{url}/{index}/_search", json=_relevance_search(120), timeout=2.5)
    after_gone = _settled(pid, metrics_url)
    print(
        f"gateway CPU s: whole search {whole_cpu:.2f}; until the budget's answer {at_answer:.2f}, after it "
        f"{after_answer:.2f}; "
        f"after the client went away {after_gone:.2f}; load {os.getloadavg()[0]:.2f}"
    )
    # What ran after the answer, or after the client left, is at most a batch of
    # sixteen candidates and the process's idle ticks: never the rest of the search.
    assert after_answer < whole_cpu / 3 and after_gone < whole_cpu / 3


def _held_until(release: threading.Event):
    """The scripted model: a judge call for a search holding HOLD waits for
    ``release``; the rest as a judge and an answer would reply."""

    def reply(request):
        prompt = request["messages"][-1]["content"]
        if HOLD in prompt:
            release.wait(BOUND_S)
        if is_listwise(request):
            return listwise_choice("Survey")(request)
        return completion("An answer [1].")(request)

    return reply


def _gateway_settings(settings, **gateway):
    return dataclasses.replace(
        settings,
        redis_url=settings.redis_url.rsplit("/", 1)[0] + "/11",
        gateway=dataclasses.replace(settings.gateway, **gateway),
    )


def _held_search(caller: str) -> tuple[dict, dict]:
    body = {"query": {"match": {"text": f"survey region {HOLD}"}}, "ext": {"chunkrag": {"judge_top": 3}}}
    return body, {"authorization": f"Basic {caller}"}


def _quiet_search() -> tuple[dict, dict]:
    return {"query": {"match": {"text": "survey region winter"}}, "ext": {"chunkrag": {}}}, {
        "authorization": "Basic cXVpZXQ6cA=="
    }


def _eventually(condition) -> bool:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_quiet_key_is_served_while_a_flooding_key_holds_the_places(settings, embedder, index):
    import redis

    redis.Redis.from_url(_gateway_settings(settings).redis_url).flushdb()
    release = threading.Event()
    with ScriptedOpenAI(default=_held_until(release)) as model_server, ExitStack() as stack:
        model_server._server.handle_error = lambda request, client_address: None
        model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=BOUND_S)
        limits = _gateway_settings(settings, max_filtered=2, reserved_filtered=1, retry_after_s=BOUND_S)
        app = create_app(limits, model=model, embedder=embedder)
        url = stack.enter_context(serving(app))
        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(3))
        queue = app.state.filtered_queue
        body, flood = _held_search("Zmxvb2Q6cA==")
        held = [pool.submit(httpx.post, f"{url}/{index}/_search", json=body, headers=flood, timeout=120)]
        assert _eventually(lambda: queue.in_use == 1)
        held.append(pool.submit(httpx.post, f"{url}/{index}/_search", json=body, headers=flood, timeout=120))
        # The flooding key has a search running: the last place is not for it.
        assert _eventually(lambda: queue.waiting == 1)
        quiet_body, quiet = _quiet_search()
        answer = httpx.post(f"{url}/{index}/_search", json=quiet_body, headers=quiet, timeout=120)
        assert answer.status_code == 200 and answer.json()["hits"]["hits"]
        assert not any(search.done() for search in held)  # served while both of the key's searches wait
        release.set()
        assert [search.result().status_code for search in held] == [200, 200]


def test_across_two_instances_a_key_busy_on_one_leaves_the_others_last_place(settings, embedder, index):
    import redis

    redis.Redis.from_url(_gateway_settings(settings).redis_url).flushdb()
    release = threading.Event()
    with ScriptedOpenAI(default=_held_until(release)) as model_server, ExitStack() as stack:
        model_server._server.handle_error = lambda request, client_address: None
        model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=BOUND_S)
        limits = _gateway_settings(
            settings, max_filtered=2, reserved_filtered=1, retry_after_s=BOUND_S, shared_state="redis"
        )
        first, second = (create_app(limits, model=model, embedder=embedder) for _ in range(2))
        one, two = stack.enter_context(serving(first)), stack.enter_context(serving(second))
        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(4))
        held = []
        flood, other = "Zmxvb2Q6cA==", "b3RoZXI6cA=="
        # Both keys hold a search on the first instance; on the second, the
        # first to come takes a place, the other, busy elsewhere, waits.
        steps = (
            (one, flood, lambda: first.state.filtered_queue.in_use == 1),
            (one, other, lambda: first.state.filtered_queue.in_use == 2),
            (two, flood, lambda: second.state.filtered_queue.in_use == 1),
            (two, other, lambda: second.state.filtered_queue.waiting == 1),
        )
        for instance, caller, reached in steps:
            body, headers = _held_search(caller)
            held.append(pool.submit(httpx.post, f"{instance}/{index}/_search", json=body, headers=headers, timeout=120))
            assert _eventually(reached)
        quiet_body, quiet = _quiet_search()
        answer = httpx.post(f"{two}/{index}/_search", json=quiet_body, headers=quiet, timeout=120)
        assert answer.status_code == 200
        assert not any(search.done() for search in held)
        release.set()
        assert [search.result().status_code for search in held] == [200] * 4


def test_the_shared_count_sees_other_instances_and_forgets_a_lease_that_ended(settings):
    import asyncio

    import redis

    url = settings.redis_url.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()

    async def scenario():
        one, two = SharedSearches(SharedRedis(url), lease_s=1), SharedSearches(SharedRedis(url), lease_s=60)
        member, elsewhere = await one.enter("key:a")
        assert member is not None and elsewhere == 0
        assert (await two.enter("key:a"))[1] == 1 and (await two.enter("key:b"))[1] == 0
        assert (await one.enter("key:a"))[1] == 1  # its own are not counted, the other instance's are
        deadline = time.monotonic() + BOUND_S
        while (await two.enter("key:a"))[1] > 0:
            assert time.monotonic() < deadline, "a lease that ended was kept"
            await asyncio.sleep(0.5)  # one's leases end after 1 s
        one.leave("key:a", member)
        await asyncio.sleep(0.1)

    asyncio.run(scenario())


def test_a_request_over_the_cost_bound_is_a_400_naming_it(settings, embedder, index):
    limits = _gateway_settings(settings, max_budget_s=30, max_work=1000)

    def search(text: str, **options) -> httpx.Response:
        body = {"query": {"match": {"text": text}}, "ext": {"chunkrag": options}}
        return httpx.post(f"{url}/{index}/_search", json=body, timeout=120)

    with serving(create_app(limits, embedder=embedder)) as url:
        budget, work, within = search("survey", budget_s=3600), search(QUERY, candidates=50), search("survey")
    assert budget.status_code == 400 and "CHUNKRAG_GATEWAY_MAX_BUDGET_S" in budget.json()["error"]["reason"]
    assert work.status_code == 400 and "CHUNKRAG_GATEWAY_MAX_WORK" in work.json()["error"]["reason"]
    assert within.status_code == 200
