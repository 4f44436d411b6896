"""The worker layer's pure parts: the message codec, batching, cache keys,
retry backoff and the Celery configuration derived from settings. Real
workers are exercised in tests/integration/test_workers.py."""

import json

import pytest

from chunkrag_core.settings import Settings, WorkerSettings
from chunkrag_filter.judging import Batch, plan_batches, slices, unscored
from chunkrag_filter.processors.relevance import Judgement, ScoringOptions
from workers.app import (
    INGEST_QUEUE,
    INGEST_TASK,
    JUDGE_TASK,
    QUEUE,
    celery_config,
    ingest_time_limit_s,
    make_app,
    restore_interval_s,
    task_time_limit_s,
    visibility_timeout_s,
)
from workers.codec import CodecError, decode_judgement, decode_options, encode_judgement, encode_options
from workers.dispatch import (
    MAX_RESENDS,
    TaskView,
    _chosen,
    _judgements,
    _noted,
    _Sent,
    resend_note,
    started_on,
    to_resend,
)
from workers.score_cache import RedisScoreCache, hashed_key
from workers.tasks import retry_countdown


def through_json(data):
    return json.loads(json.dumps(data))


@pytest.mark.parametrize(
    "options",
    [
        ScoringOptions(),
        ScoringOptions(
            method="yes_no",
            use_logprobs=False,
            reflect_band=(0.2, 0.9),
            critic="llm",
            weights=(1.0, 0.0, 0.5),
            likert_threshold=7,
            max_chunk_chars=900,
        ),
    ],
)
def test_scoring_options_round_trip_through_json_with_their_tuples(options):
    decoded = decode_options(through_json(encode_options(options)))
    assert decoded == options
    assert isinstance(decoded.reflect_band, tuple) and isinstance(decoded.weights, tuple)


@pytest.mark.parametrize(
    "judgement",
    [
        Judgement(0.9, None, 1.0, 0.93, calls=1, cached_calls=0, prompt_tokens=50, completion_tokens=1),
        Judgement(None, None, None, None, calls=2, notes=("yes/no answer unreadable: 'banana'", "second note")),
        Judgement(0.5, 0.7, None, 0.58, calls=0, cached_calls=2),
    ],
)
def test_judgements_round_trip_through_json(judgement):
    decoded = decode_judgement(through_json(encode_judgement(judgement)))
    assert decoded == judgement and isinstance(decoded.notes, tuple)


def test_decoding_rejects_unknown_fields_and_bad_values_with_the_reason():
    with pytest.raises(CodecError, match="unknown ScoringOptions field.*temperature"):
        decode_options({"temperature": 0.2})
    with pytest.raises(CodecError, match="unknown scoring method"):
        decode_options({"method": "vibes"})
    with pytest.raises(CodecError, match="JSON object"):
        decode_judgement(["not", "a", "dict"])


def test_batches_cover_every_item_once_in_order():
    assert slices(5, 2) == [Batch(0, 2), Batch(2, 4), Batch(4, 5)]
    assert slices(4, 4) == [Batch(0, 4)]
    assert slices(3, 10) == [Batch(0, 3)]
    assert slices(0, 2) == []
    covered = [i for b in slices(23, 4) for i in range(b.start, b.stop)]
    assert covered == list(range(23))
    with pytest.raises(ValueError, match="at least 1"):
        slices(3, 0)


def test_listwise_tasks_hold_the_same_passages_as_in_process_listwise_batches():
    listwise = ScoringOptions(method="listwise", listwise_batch=9)
    assert plan_batches(10, listwise, batch_size=2) == [Batch(0, 5), Batch(5, 10)]
    assert plan_batches(9, listwise, batch_size=2) == [Batch(0, 9)]
    assert plan_batches(5, ScoringOptions(), batch_size=2) == [Batch(0, 2), Batch(2, 4), Batch(4, 5)]


def test_an_unscored_judgement_carries_only_its_reason():
    judgement = unscored("timed out")
    assert judgement.combined is None and judgement.stage_scores() == {} and judgement.notes == ("timed out",)


def test_each_task_outcome_becomes_one_judgement_per_chunk_of_its_batch():
    good = [encode_judgement(Judgement(0.9, None, None, 0.9, calls=1))] * 2
    assert _judgements("SUCCESS", good, 2, 30) == [Judgement(0.9, None, None, 0.9, calls=1)] * 2
    short = _judgements("SUCCESS", good[:1], 2, 30)
    assert [j.notes for j in short] == [("worker returned 1 judgements for 2 chunks",)] * 2
    garbled = _judgements("SUCCESS", [{"nonsense": 1}], 1, 30)
    assert garbled[0].combined is None and "unreadable result" in garbled[0].notes[0]
    failed = _judgements("FAILURE", RuntimeError("answered 400: no such model"), 3, 30)
    assert len(failed) == 3 and failed[0].notes == ("judging failed: RuntimeError: answered 400: no such model",)
    late = _judgements("RETRY", None, 2, 2.5)
    assert late[1].combined is None and late[1].notes == ("not judged within the 2.5 s budget (task retry)",)


def test_cache_keys_are_prefixed_sha256_of_the_long_key():
    long_key = "model|multistage|Who wrote Hamlet?|" + "x" * 2000 + "|base"
    key = hashed_key(long_key)
    assert key.startswith("chunkrag:score:") and len(key) == len("chunkrag:score:") + 64
    assert key == hashed_key(long_key) and key != hashed_key(long_key + " ")
    assert hashed_key("k", prefix="p:") == "p:" + "8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a"


class BrokenRedis:
    def get(self, key):
        raise ConnectionError("Redis is down")

    def set(self, key, value, ex=None):
        raise ConnectionError("Redis is down")


class DictRedis(dict):
    def set(self, key, value, ex=None):
        self[key] = (value, ex)

    def get(self, key):
        stored = super().get(key)
        return None if stored is None else stored[0]


def test_cache_failures_are_misses_not_errors(caplog):
    cache = RedisScoreCache(BrokenRedis(), ttl_s=60)
    assert cache.get("k") is None
    cache.set("k", 0.5)  # no exception
    assert "judging without the cache" in caplog.text


def test_cache_stores_hashed_keys_with_the_ttl():
    client = DictRedis()
    cache = RedisScoreCache(client, ttl_s=60)
    cache.set("model|q|chunk|base", 0.25)
    assert client == {hashed_key("model|q|chunk|base"): ("0.25", 60)}
    assert cache.get("model|q|chunk|base") == 0.25 and cache.get("other") is None


def test_cache_from_url_connects_lazily():
    # Nothing listens on port 9; building the cache must not try to connect.
    cache = RedisScoreCache.from_url("redis://127.0.0.1:9/0", ttl_s=60)
    assert cache._client is None


def test_retry_countdown_grows_exponentially_with_jitter_and_a_cap():
    assert retry_countdown(0, 2.0, 60.0, rng=lambda: 0.0) == 1.0
    assert retry_countdown(0, 2.0, 60.0, rng=lambda: 1.0) == 2.0
    assert retry_countdown(3, 2.0, 60.0, rng=lambda: 1.0) == 16.0
    assert retry_countdown(10, 2.0, 60.0, rng=lambda: 1.0) == 60.0
    assert retry_countdown(10, 2.0, 60.0, rng=lambda: 0.0) == 30.0


def test_redelivery_waits_longer_than_any_healthy_task_holds_its_message():
    workers = WorkerSettings(query_budget_s=300, retry_backoff_max_s=60)
    assert task_time_limit_s(workers) > workers.query_budget_s
    assert visibility_timeout_s(workers) > task_time_limit_s(workers) + workers.retry_backoff_max_s
    # An ingest batch's run is stopped at its budget, before Redis would
    # hand its message to a second worker.
    assert ingest_time_limit_s(workers) == workers.ingest_batch_budget_s == 600
    assert visibility_timeout_s(workers) == 600 + 60 + 5
    assert (
        visibility_timeout_s(WorkerSettings(query_budget_s=20, retry_backoff_max_s=8, ingest_batch_budget_s=10)) == 38
    )
    assert 1 <= restore_interval_s(workers) <= 10
    short = WorkerSettings(query_budget_s=5, retry_backoff_max_s=0.5, ingest_batch_budget_s=5)
    assert restore_interval_s(short) == 1


def test_celery_config_is_derived_from_settings():
    settings = Settings(
        redis_url="redis://example:6380/3", workers=WorkerSettings(query_budget_s=20, rate_limit="30/m", max_retries=2)
    )
    config = celery_config(settings)
    assert config["broker_url"] == config["result_backend"] == "redis://example:6380/3"
    assert (
        config["task_acks_late"] and config["task_reject_on_worker_lost"] and config["worker_prefetch_multiplier"] == 1
    )
    assert config["accept_content"] == ["json"]
    assert config["task_track_started"]  # a started task names its worker: how the dispatcher spots a dead one
    assert config["broker_transport_options"]["visibility_timeout"] == visibility_timeout_s(settings.workers)


def test_make_app_registers_the_task_with_its_limits_and_opens_nothing():
    # An unreachable broker: building the app must not notice.
    settings = Settings(
        redis_url="redis://127.0.0.1:9/0", workers=WorkerSettings(rate_limit="30/m", max_retries=3, query_budget_s=20)
    )
    app = make_app(settings)
    task = app.tasks[JUDGE_TASK]
    assert (
        task.rate_limit == "30/m" and task.max_retries == 3 and task.time_limit == task_time_limit_s(settings.workers)
    )
    ingest = app.tasks[INGEST_TASK]
    assert ingest.time_limit == 600 and ingest.acks_late and ingest.reject_on_worker_lost
    assert make_app(Settings(redis_url="redis://127.0.0.1:9/0")).tasks[JUDGE_TASK].rate_limit is None


def test_only_tasks_started_on_a_worker_that_stopped_answering_are_sent_again():
    views = [
        TaskView("STARTED", "w1@host"),  # its worker answers
        TaskView("STARTED", "w2@host"),  # its worker is gone
        TaskView("PENDING"),  # queued: any worker may still take it
        TaskView("RETRY"),  # waiting out a countdown on a worker we cannot name
        TaskView("SUCCESS"),
        TaskView("FAILURE"),
        TaskView("STARTED", None),  # no hostname recorded: nothing to ping
        TaskView("STARTED", "w3@host"),  # gone too
    ]
    assert started_on(views) == {"w1@host", "w2@host", "w3@host"}
    assert to_resend(views, live={"w1@host"}) == [1, 7]
    assert to_resend(views, live={"w1@host", "w2@host", "w3@host"}) == []
    assert to_resend(views, live=set()) == [0, 1, 7]
    assert to_resend([TaskView("PENDING"), TaskView("RETRY")], live=set()) == []


def test_a_batch_is_sent_again_a_bounded_number_of_times():
    # A batch that kills every worker it reaches must not reach them all.
    views = [TaskView("STARTED", "w2@host", resends=n) for n in range(MAX_RESENDS + 2)]
    assert to_resend(views, live=set()) == list(range(MAX_RESENDS))
    assert to_resend(views, live=set(), max_resends=0) == []


class Attempt:
    def __init__(self, task_id):
        self.id = task_id


def test_a_re_sent_batch_reports_whichever_task_finished_and_says_it_was_re_sent():
    original, again = Attempt("a"), Attempt("b")
    batch = _Sent(Batch(0, 1), ("q", ["t"], {}, "m"), attempts=[original, again], notes=[resend_note("w2@host")])
    assert _chosen(batch, {"a": ("STARTED", {}), "b": ("SUCCESS", [])}) is again
    assert _chosen(batch, {"a": ("SUCCESS", []), "b": ("STARTED", {})}) is original  # redelivered and finished first
    assert _chosen(batch, {"a": ("FAILURE", None), "b": ("SUCCESS", [])}) is again
    assert _chosen(batch, {"a": ("STARTED", {}), "b": ("PENDING", None)}) is again  # neither: report the newest
    judged = _noted([Judgement(0.9, None, None, 0.9, notes=("earlier",))], batch.notes)
    assert judged[0].combined == 0.9 and judged[0].notes == (
        "earlier",
        "re-sent after worker w2@host stopped answering",
    )
    assert _noted([unscored("late")], []) == [unscored("late")]


def test_after_a_failure_the_cache_is_skipped_for_a_while():
    class CountingBroken(BrokenRedis):
        calls = 0

        def get(self, key):
            CountingBroken.calls += 1
            return super().get(key)

    cache = RedisScoreCache(CountingBroken(), ttl_s=60)
    assert cache.get("a") is None and cache.get("b") is None
    cache.set("c", 0.5)
    assert CountingBroken.calls == 1  # the later lookups did not wait on a dead Redis


def test_ingest_batches_are_routed_to_their_own_queue_and_a_plain_worker_takes_both():
    app = make_app(Settings(redis_url="redis://127.0.0.1:9/0"))
    router = app.amqp.router
    assert router.route({}, INGEST_TASK)["queue"].name == INGEST_QUEUE
    assert router.route({}, JUDGE_TASK)["queue"].name == QUEUE
    # A worker started without -Q consumes every queue in task_queues; each is
    # bound by its own routing key, so no message reaches both.
    assert {(q.name, q.routing_key) for q in app.conf.task_queues} == {(QUEUE, QUEUE), (INGEST_QUEUE, INGEST_QUEUE)}


# --- the ingest dispatch translates a broker lost mid-run ---------------------------


class _BrokerGone:
    """A Celery app whose broker refuses the first batch (a test double: the
    real broker loss is in tests/integration/test_gateway_faults.py)."""

    def signature(self, _name):
        return self

    def clone(self, args):
        return self

    def apply_async(self):
        from kombu.exceptions import OperationalError

        raise OperationalError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")


class _Cluster:
    def capabilities(self):
        return None


def test_ingest_on_workers_raises_queue_unavailable_when_the_broker_goes(monkeypatch):
    from ingest_pipeline.sources import plain_document
    from workers import ingest_dispatch
    from workers.errors import QueueUnavailable

    restored = []
    monkeypatch.setattr(ingest_dispatch, "check_workers", lambda app, timeout, limit=None: 1)
    monkeypatch.setattr(ingest_dispatch, "ensure_index_for", lambda *args, **kwargs: None)
    monkeypatch.setattr(ingest_dispatch, "pause_refresh", lambda client, index: "1s")
    monkeypatch.setattr(ingest_dispatch, "restore_refresh", lambda client, index, previous: restored.append(previous))
    documents = [plain_document("d1", "Some text.", "test")]
    with pytest.raises(QueueUnavailable) as raised:
        ingest_dispatch.ingest_documents_on_workers(
            documents, client=_Cluster(), settings=Settings.from_env({}), index="i", progress=False, app=_BrokerGone()
        )
    assert raised.value.reason == "the Celery broker (Redis) is not reachable"
    assert "127.0.0.1:6399" in str(raised.value)  # the detail, for the log
    assert restored == ["1s"]  # the index's refresh is given back all the same
