"""Judging on real Celery worker processes over the real Redis, against a
scripted OpenAI-compatible server: retries, caching, budgets, crashes.

The workers use a Redis database of their own (REDIS_DB; REDIS_DB + 1 is
the empty one of the no-worker test, REDIS_DB - 1 the workers on default
settings) so their queues and cached scores never meet the development ones;
each is flushed before and after use. Each test asks a query no other test asks, so cached
scores and stray requests from an earlier test cannot leak into it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_core.settings import Settings
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import FilterOptions, run_filter
from chunkrag_filter.processors.relevance import ScoringOptions
from local_services.celery_workers import CeleryWorkers
from local_services.scripted_openai import ScriptedOpenAI, completion, error, is_listwise, listwise_choice
from workers.app import make_app, visibility_timeout_s
from workers.dispatch import WorkerHealth, WorkersUnavailable, celery_judge_many, check_workers
from workers.score_cache import hashed_key

pytestmark = pytest.mark.integration

REDIS_DB = 11
MODEL = "scripted-model"
MARK = "RELEVANT"  # a chunk holding this word is judged relevant by the scripted model
CHAT_TIMEOUT_S = 2.0
MAX_RETRIES = 2


def prompt_of(request: dict) -> str:
    return request["messages"][-1]["content"]


def judge_by_mark(request: dict):
    if is_listwise(request):
        return listwise_choice(MARK, probability=0.9)(request)
    chunk = prompt_of(request).split("Chunk:", 1)[1]
    return completion("Yes", yes_probability=0.9 if MARK in chunk else 0.1)(request)


class Router:
    """The scripted model: a test routes the prompts holding its own query
    to its own behaviour; everything else is judged by the mark."""

    def __init__(self):
        self.routes: dict[str, object] = {}

    def __call__(self, request: dict):
        prompt = prompt_of(request)
        for token, reply in list(self.routes.items()):
            if token in prompt:
                return reply(request)
        return judge_by_mark(request)


def in_order(*replies):
    """Replies in turn, then the last one for ever."""
    queue = list(replies)
    lock = threading.Lock()

    def reply(request):
        with lock:
            step = queue.pop(0) if len(queue) > 1 else queue[0]
        return step(request)

    return reply


def sleeping(seconds: float, then=judge_by_mark):
    def reply(request):
        time.sleep(seconds)
        return then(request)

    return reply


def with_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def chunks_of(*texts: str) -> list[Chunk]:
    return [Chunk(doc_id="doc", position=i, text=text, start=0, end=len(text)) for i, text in enumerate(texts)]


def unique(question: str) -> str:
    return f"{question} [{uuid.uuid4().hex[:10]}]"


@pytest.fixture(scope="module")
def router():
    return Router()


@pytest.fixture(scope="module")
def model_server(router):
    with ScriptedOpenAI(default=router) as server:
        yield server


@pytest.fixture(scope="module")
def worker_env(settings, model_server) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_CHAT_"))}
    return {
        **inherited,
        "REDIS_URL": with_db(settings.redis_url, REDIS_DB),
        "CHUNKRAG_CHAT_BASE_URL": model_server.base_url,
        "CHUNKRAG_CHAT_MODEL": MODEL,
        "CHUNKRAG_CHAT_TIMEOUT_S": str(CHAT_TIMEOUT_S),
        "CHUNKRAG_WORKER_MAX_RETRIES": str(MAX_RETRIES),
        "CHUNKRAG_WORKER_RETRY_BACKOFF_S": "0.2",
        "CHUNKRAG_WORKER_RETRY_BACKOFF_MAX_S": "0.5",
        # Small, so a message held by a worker that died is redelivered
        # within a test (visibility timeout = budget + 5 + 0.5 + 5 s; the
        # ingest batch budget is below the judging task's limit, so it does
        # not lengthen it).
        "CHUNKRAG_WORKER_QUERY_BUDGET_S": "6",
        "CHUNKRAG_WORKER_INGEST_BATCH_BUDGET_S": "6",
        "CHUNKRAG_WORKER_BATCH_SIZE": "2",
    }


@pytest.fixture(scope="module")
def worker_settings(worker_env) -> Settings:
    return Settings.from_env(worker_env)


@pytest.fixture(scope="module")
def redis_db(worker_settings):
    client = redis.Redis.from_url(worker_settings.redis_url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(
            f"Redis at {worker_settings.redis_url} is not reachable ({exc}); start it with `chunkrag services up`",
            pytrace=False,
        )
    # Messages a crashed earlier run left unacknowledged would be redelivered to these workers.
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def workers(worker_env, redis_db, tmp_path_factory):
    with CeleryWorkers(worker_env, tmp_path_factory.mktemp("celery")) as pool:
        pool.start(2)
        yield pool


@pytest.fixture(scope="module")
def app(worker_settings):
    return make_app(worker_settings)


@pytest.fixture
def judge_many(app, worker_settings, workers):
    return celery_judge_many(app, settings=worker_settings, budget_s=30)


def requests_for(server: ScriptedOpenAI, query: str) -> list[dict]:
    return [r for r in list(server.requests) if query in prompt_of(r)]


def test_judging_on_workers_equals_judging_in_threads(model_server, judge_many, worker_settings):
    query = unique("Which fruit is red?")
    chunks = chunks_of(
        f"Apples are {MARK} and red.",
        "Bananas are yellow.",
        f"Cherries are {MARK}.",
        "Limes are green.",
        "Plums are purple.",
    )
    chat = OpenAICompatibleChat(model=MODEL, base_url=model_server.base_url)

    in_threads = judge_in_threads(chat, threads=2, model_name=MODEL)(query, chunks, ScoringOptions())
    on_workers = judge_many(query, chunks, ScoringOptions())

    assert on_workers == in_threads
    assert [j.base for j in on_workers] == pytest.approx([0.9, 0.1, 0.9, 0.1, 0.1])
    # the same filter decisions either way
    # Per-chunk multi-stage scores, cut by Algorithm 1 as they come (the paper's filter).
    options = FilterOptions(
        answer=False, scoring=ScoringOptions(), threshold="dynamic", calibration=None, judge_top=None
    )
    query_2 = unique("Which fruit is red?")
    by_threads = run_filter(query_2, chunks, model=chat, options=options)
    by_workers = run_filter(query_2, chunks, model=chat, options=options, judge_many=judge_many)
    assert [(d.chunk.chunk_id, d.kept, d.reason) for d in by_workers.decisions] == [
        (d.chunk.chunk_id, d.kept, d.reason) for d in by_threads.decisions
    ]
    assert {c.chunk_id for c in by_workers.kept} == {"doc:0", "doc:2"}
    # Listwise: one batch of five chunks is one task and one call, on workers as in threads.
    listwise = ScoringOptions(method="listwise")
    query_3 = unique("Which fruit is red?")
    listwise_threads = judge_in_threads(chat, threads=2, model_name=MODEL)(query_3, chunks, listwise)
    listwise_workers = judge_many(unique("Which fruit is red?"), chunks, listwise)
    assert [j.base for j in listwise_workers] == [j.base for j in listwise_threads]
    assert (
        sum(j.calls for j in listwise_workers) == 1
        and max(listwise_workers, key=lambda j: j.base) is listwise_workers[0]
    )


def test_a_repeated_query_costs_no_model_call_and_its_scores_live_in_redis(model_server, judge_many, redis_db):
    query = unique("Which fruit is red?")
    chunks = chunks_of(f"Apples are {MARK}.", "Bananas are yellow.", "Limes are green.")

    first = judge_many(query, chunks, ScoringOptions())
    calls_after_first = len(requests_for(model_server, query))
    second = judge_many(query, chunks, ScoringOptions())

    assert calls_after_first == 3 and len(requests_for(model_server, query)) == 3
    assert [j.combined for j in second] == [j.combined for j in first]
    assert [(j.calls, j.cached_calls) for j in second] == [(0, 1)] * 3
    for chunk in chunks:
        key = hashed_key(f"{MODEL}|multistage|{query}|{chunk.text}|base")
        assert redis_db.exists(key) and redis_db.ttl(key) > 0


def test_concurrent_queries_from_threads_each_get_their_own_judgements(judge_many):
    # The gateway dispatches from a thread pool: pings, sends and result
    # waits of several queries overlap.
    queries = [unique("Which fruit is red?") for _ in range(4)]
    chunks = chunks_of(f"Apples are {MARK}.", "Bananas are yellow.", f"Cherries are {MARK}.")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda q: judge_many(q, chunks, ScoringOptions()), queries))
    for judgements in results:
        assert [j.base for j in judgements] == pytest.approx([0.9, 0.1, 0.9])


def test_rate_limited_call_is_retried_after_a_backoff(model_server, router, judge_many):
    query = unique("Which fruit is red?")
    router.routes[query] = in_order(error(429), judge_by_mark)

    [judgement] = judge_many(query, chunks_of(f"Apples are {MARK}."), ScoringOptions())

    assert judgement.base == pytest.approx(0.9) and judgement.notes == ()
    assert len(requests_for(model_server, query)) == 2


def test_a_bad_request_fails_at_once_and_its_chunks_are_unscored_with_the_reason(model_server, router, judge_many):
    query = unique("Which fruit is red?")
    router.routes[query] = error(400, "model does not exist")

    judgements = judge_many(query, chunks_of(f"Apples are {MARK}.", "Bananas are yellow."), ScoringOptions())

    assert [j.combined for j in judgements] == [None, None]
    assert (
        "ChatError" in judgements[0].notes[0]
        and "400" in judgements[0].notes[0]
        and "model does not exist" in judgements[0].notes[0]
    )
    assert len(requests_for(model_server, query)) == 1  # one batch of two chunks, not retried
    # and the filter reports them unscored rather than failing the query
    query = unique("Which fruit is red?")
    router.routes[query] = error(400, "model does not exist")
    chat = OpenAICompatibleChat(model=MODEL, base_url=model_server.base_url)
    result = run_filter(
        query,
        chunks_of(f"Apples are {MARK}.", "Bananas are yellow."),
        model=chat,
        options=FilterOptions(answer=False, fallback="not_found", scoring=ScoringOptions(), judge_top=9),
        judge_many=judge_many,
    )
    assert [d.reason for d in result.decisions] == ["unscored", "unscored"] and result.nothing_relevant


def test_server_errors_are_retried_then_reported_unscored(model_server, router, judge_many):
    query = unique("Which fruit is red?")
    router.routes[query] = error(500, "overloaded")

    [judgement] = judge_many(query, chunks_of(f"Apples are {MARK}."), ScoringOptions())

    assert judgement.combined is None and "500" in judgement.notes[0]
    assert len(requests_for(model_server, query)) == MAX_RETRIES + 1


def test_garbage_output_is_unscored_with_a_note_not_an_error(model_server, router, judge_many):
    query = unique("Which fruit is red?")
    router.routes[query] = completion("banana")

    [judgement] = judge_many(query, chunks_of(f"Apples are {MARK}."), ScoringOptions())

    assert judgement.base is None and judgement.combined is None and judgement.calls == 2
    assert any("banana" in note for note in judgement.notes)


def test_a_provider_that_times_out_is_retried_then_reported_unscored(model_server, router, judge_many):
    query = unique("Which fruit is red?")
    router.routes[query] = sleeping(CHAT_TIMEOUT_S + 1.0)

    [judgement] = judge_many(query, chunks_of(f"Apples are {MARK}."), ScoringOptions())

    assert judgement.combined is None and "did not answer" in judgement.notes[0]
    assert len(requests_for(model_server, query)) == MAX_RETRIES + 1


def test_a_worker_on_another_model_refuses_with_the_reason(app, worker_settings, workers):
    other = replace(worker_settings, chat=replace(worker_settings.chat, model="another-model"))
    judge_many = celery_judge_many(app, settings=other, budget_s=30)

    [judgement] = judge_many(unique("Which fruit is red?"), chunks_of(f"Apples are {MARK}."), ScoringOptions())

    assert judgement.combined is None
    assert "ModelMismatch" in judgement.notes[0] and "same CHUNKRAG_CHAT_MODEL" in judgement.notes[0]


def test_a_query_over_budget_returns_with_the_late_chunks_unscored(router, app, worker_settings, workers):
    query = unique("Which fruit is red?")
    router.routes[query] = sleeping(1.5)
    judge_many = celery_judge_many(app, settings=worker_settings, batch_size=1, budget_s=0.5)

    began = time.monotonic()
    judgements = judge_many(query, chunks_of("a", "b", "c", "d"), ScoringOptions())
    elapsed = time.monotonic() - began

    assert [j.combined for j in judgements] == [None] * 4
    assert all("budget" in j.notes[0] for j in judgements)
    assert elapsed < 10, "liveness only: the call must not wait for the slow model"


def test_a_worker_process_killed_mid_judgement_loses_no_chunk(model_server, router, app, worker_settings, workers):
    query = unique("Which fruit is red?")
    first_attempt = threading.Event()
    slow_chunk = f"Apples are {MARK} and slow."

    def slow_once(request):
        if slow_chunk in prompt_of(request) and not first_attempt.is_set():
            first_attempt.set()
            time.sleep(5)
        return judge_by_mark(request)

    router.routes[query] = slow_once
    judge_many = celery_judge_many(app, settings=worker_settings, batch_size=1, budget_s=40)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(judge_many, query, chunks_of(slow_chunk, "Bananas are yellow."), ScoringOptions())
        assert first_attempt.wait(20), "the slow chunk never reached the model"
        pid = _pid_running(app, slow_chunk)
        os.kill(pid, 9)  # the pool process holding the task, mid model call
        judgements = running.result(timeout=45)

    assert [j.base for j in judgements] == pytest.approx([0.9, 0.1])
    assert len([r for r in requests_for(model_server, query) if slow_chunk in prompt_of(r)]) == 2
    # its worker lives and requeued the task itself: nothing was re-sent
    assert [j.notes for j in judgements] == [(), ()] and judge_many.resent == 0


def _pid_running(app, text: str, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for tasks in (app.control.inspect(timeout=1.0).active() or {}).values():
            for task in tasks:
                if text in str(task.get("args")):
                    return task["worker_pid"]
        time.sleep(0.2)
    raise AssertionError(f"no worker reports a task judging {text!r}")


def test_unreachable_redis_is_reported_as_workers_unavailable(worker_settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    settings = replace(worker_settings, redis_url=f"redis://127.0.0.1:{port}/0")
    app = make_app(settings)

    with pytest.raises(WorkersUnavailable, match=f"cannot reach the Celery broker.*127.0.0.1:{port}"):
        check_workers(app, timeout=1.0)
    with pytest.raises(WorkersUnavailable, match="cannot reach"):
        celery_judge_many(app, settings=settings)("q", chunks_of("a"), ScoringOptions())


def test_no_running_worker_is_reported_as_workers_unavailable(worker_settings, redis_db):
    # Another database of the same Redis: reachable, but no worker listens there.
    settings = replace(worker_settings, redis_url=with_db(worker_settings.redis_url, REDIS_DB + 1))
    try:
        app = make_app(settings)
        with pytest.raises(WorkersUnavailable, match="no Celery worker answered a ping"):
            check_workers(app, timeout=1.0)
        # The dispatcher pings no one before a query: it sends, and finds out
        # when no worker takes the tasks; the next query is sent elsewhere at
        # once while that finding is held.
        health = WorkerHealth()
        judge_many = celery_judge_many(app, settings=settings, budget_s=30, start_wait_s=0.5, health=health)
        with pytest.raises(
            WorkersUnavailable, match="no worker took the query's tasks within 0.5 s: no Celery worker answered a ping"
        ):
            judge_many(unique("Which fruit is red?"), chunks_of("a", "b", "c"), ScoringOptions())
        with pytest.raises(WorkersUnavailable, match="not tried again yet"):
            celery_judge_many(app, settings=settings, budget_s=30, health=health)("q", chunks_of("a"), ScoringOptions())
    finally:
        redis.Redis.from_url(settings.redis_url).flushdb()  # the ping's reply queue and bindings


def test_a_whole_worker_killed_mid_judgement_is_redelivered_after_the_visibility_timeout(
    model_server, router, app, worker_settings, workers
):
    # The machine dies, not just a pool process: nobody rejects the message,
    # so Redis hands it to the surviving worker once the visibility timeout
    # (about 17 s with these settings) has passed. The dispatcher's own
    # rescue is off here: this is the broker's guarantee underneath it.
    query = unique("Which fruit is red?")
    first_attempt = threading.Event()

    def slow_once(request):
        if not first_attempt.is_set():
            first_attempt.set()
            time.sleep(5)
        return judge_by_mark(request)

    router.routes[query] = slow_once
    judge_many = celery_judge_many(app, settings=worker_settings, batch_size=1, budget_s=45, liveness_check_s=None)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(judge_many, query, chunks_of(f"Apples are {MARK}."), ScoringOptions())
        assert first_attempt.wait(20), "the chunk never reached the model"
        holder = _worker_running(app, workers, query)
        workers.kill(holder)
        [judgement] = running.result(timeout=50)

    assert judgement.base == pytest.approx(0.9)
    assert len(requests_for(model_server, query)) == 2


def _worker_running(app, workers, text: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, tasks in (app.control.inspect(timeout=1.0).active() or {}).items():
            if any(text in str(task.get("args")) for task in tasks):
                return next(w for w in workers.running if w.name.split("@")[0] == name.split("@")[0])
        time.sleep(0.2)
    raise AssertionError(f"no worker reports a task judging {text!r}")


@pytest.fixture
def workers_on_defaults(settings, model_server, redis_db, tmp_path):
    """Two workers with the default worker settings (visibility timeout
    included), on a database of their own: the module's workers, with their
    short visibility timeout, would otherwise restore these workers'
    unacknowledged messages too."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_CHAT_"))}
    env = {
        **inherited,
        "REDIS_URL": with_db(settings.redis_url, REDIS_DB - 1),
        "CHUNKRAG_CHAT_BASE_URL": model_server.base_url,
        "CHUNKRAG_CHAT_MODEL": MODEL,
    }
    client = redis.Redis.from_url(env["REDIS_URL"])
    client.flushdb()
    try:
        with CeleryWorkers(env, tmp_path) as pool:
            pool.start(2)
            yield pool
    finally:
        client.flushdb()  # the dead worker's message, still unacknowledged
        client.close()


def test_a_whole_worker_killed_mid_judgement_is_re_sent_within_the_default_budget(
    model_server, router, workers_on_defaults
):
    pool = workers_on_defaults
    settings = Settings.from_env(pool.env)
    # Redis would hand the dead worker's message back only after the budget.
    assert visibility_timeout_s(settings.workers) > settings.workers.query_budget_s
    query = unique("Which fruit is red?")
    held, release = threading.Event(), threading.Event()

    def hold_first(request):
        # The first call never answers its (soon dead) worker; the re-sent
        # batch is judged at once.
        if not held.is_set():
            held.set()
            release.wait(60)
        return judge_by_mark(request)

    router.routes[query] = hold_first
    judge_many = celery_judge_many(pool.app, settings=settings)
    try:
        running = in_background(judge_many, query, chunks_of(f"Apples are {MARK}."), ScoringOptions())
        assert held.wait(20), "the chunk never reached the model"
        holder = _worker_running(pool.app, pool, query)
        pool.kill(holder)
        # liveness only: the budget is 300 s, a re-send takes seconds
        [judgement] = running.result(timeout=60)
    finally:
        release.set()

    assert judgement.base == pytest.approx(0.9)
    [note] = judgement.notes
    assert note.startswith(f"re-sent after worker {holder.name.split('@')[0]}@") and note.endswith("stopped answering")
    assert judge_many.resent == 1
    assert len(requests_for(model_server, query)) == 2


def in_background(call, *args) -> Future:
    """``call(*args)`` on a daemon thread: a failing test does not wait out
    a 300 s budget on exit."""
    future: Future = Future()

    def run():
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future
