"""Where the relevance model scores: degrading from the workers to the
gateway, the filter's report of it, the workers' task and dispatcher (with
test doubles for the model and for Celery; a real worker scores in
tests/integration/test_relevance_workers.py)."""

import dataclasses

import pytest
from celery import states
from celery.exceptions import TimeoutError as CeleryTimeout
from fastapi.testclient import TestClient

from chunkrag_core.chunk import Chunk
from chunkrag_core.settings import Settings, WorkerSettings
from chunkrag_filter.judging import BY_GATEWAY, BY_WORKERS
from chunkrag_filter.pipeline import FilterOptions, run_filter, where_relevance_ran
from chunkrag_filter.processors.calibration import LogisticModel
from chunkrag_filter.relevance_places import DegradingRelevance, Scored, score_relevance
from chunkrag_gateway import create_app
from chunkrag_gateway.edges import ModelsLoading
from workers.app import RELEVANCE_TASK, make_app, task_time_limit_s
from workers.codec import CodecError, decode_scores, decode_texts
from workers.dispatch import WorkerHealth
from workers.errors import WorkersFailed, WorkersUnavailable
from workers.relevance_dispatch import RELEVANCE_BUDGET_S, CeleryRelevance, celery_relevance


class Scripted:
    """A relevance model scoring by text; counts its calls."""

    def __init__(self, by_text):
        self.by_text, self.calls = by_text, 0

    def score(self, query, texts):
        self.calls += 1
        return [self.by_text[t] for t in texts]


class Unavailable:
    def __init__(self, error):
        self.error, self.calls = error, 0

    def score(self, query, texts):
        self.calls += 1
        raise self.error


SCORES = {"alpha": 0.2, "beta": 0.9, "gamma": 0.01}
CHUNKS = [
    Chunk(doc_id="d", position=i, text=t, start=0, end=1, vector=[1.0, 0.0], score=1.0 - i / 10)
    for i, t in enumerate(SCORES)
]
ONLY_RELEVANCE = LogisticModel(("relevance_logit",), (1.0,), 0.0)
NO_WORKER = WorkersUnavailable("no Celery worker answered at redis://10.0.0.1:6379", reason="no Celery worker answered")


# --- degrading ----------------------------------------------------------------------


def test_scores_come_from_the_first_place_that_can_and_the_step_down_is_named():
    down, here = Unavailable(NO_WORKER), Scripted(SCORES)
    scored = DegradingRelevance([(BY_WORKERS, down), (BY_GATEWAY, here)]).scored("q", ["beta", "alpha"])
    assert scored == Scored((0.9, 0.2), BY_GATEWAY, "workers: no Celery worker answered")
    assert "10.0.0.1" not in scored.reason  # the address stays in the log
    up = DegradingRelevance([(BY_WORKERS, Scripted(SCORES)), (BY_GATEWAY, here)]).scored("q", ["gamma"])
    assert up == Scored((0.01,), BY_WORKERS, None) and here.calls == 1


def test_the_last_place_fails_the_query_and_other_errors_are_not_hidden():
    with pytest.raises(WorkersUnavailable):
        DegradingRelevance([(BY_GATEWAY, Unavailable(NO_WORKER))]).scored("q", ["alpha"])
    broken, here = Unavailable(ZeroDivisionError("a bug")), Scripted(SCORES)
    with pytest.raises(ZeroDivisionError):
        DegradingRelevance([(BY_WORKERS, broken), (BY_GATEWAY, here)]).scored("q", ["alpha"])
    assert here.calls == 0
    with pytest.raises(ValueError, match="needs at least one place"):
        DegradingRelevance([])


def test_a_model_returning_the_wrong_number_of_scores_is_an_error():
    class Short:
        def score(self, query, texts):
            return [0.5]

    with pytest.raises(ValueError, match="1 scores for 2 texts"):
        score_relevance(Short(), "q", ["a", "b"])
    assert score_relevance(Scripted(SCORES), "q", ["beta"]) == Scored((0.9,))


def test_the_filter_says_where_the_relevance_model_scored_and_why():
    relevance = DegradingRelevance([(BY_WORKERS, Unavailable(NO_WORKER)), (BY_GATEWAY, Scripted(SCORES))])
    options = FilterOptions(gate="off", relevance="crossencoder", calibration=ONLY_RELEVANCE, fixed_threshold=0.15)
    result = run_filter("q", CHUNKS, model=None, options=options, relevance_model=relevance)
    assert [c.text for c in result.kept] == ["alpha", "beta"]
    assert [c.stage_scores["relevance"] for c in result.kept] == [0.2, 0.9]
    assert (result.relevance_by, result.relevance_by_reason) == (BY_GATEWAY, "workers: no Celery worker answered")
    assert result.relevance_fields() == {
        "relevance_by": BY_GATEWAY,
        "relevance_by_reason": "workers: no Celery worker answered",
    }


def test_rerank_local_through_a_place_orders_the_kept_chunks_and_reports_it():
    relevance = DegradingRelevance([(BY_WORKERS, Scripted(SCORES))])
    options = FilterOptions(gate="off", calibration=None, fixed_threshold=0.0, rerank="local")
    result = run_filter("q", CHUNKS, model=None, options=options, relevance_model=relevance)
    assert [c.text for c in result.kept] == ["beta", "alpha", "gamma"]
    assert [c.stage_scores["rerank"] for c in result.kept] == [0.9, 0.2, 0.01]
    assert (result.relevance_by, result.relevance_by_reason) == (BY_WORKERS, None)


def test_without_the_relevance_model_nothing_is_reported():
    result = run_filter(
        "q", CHUNKS, model=None, options=FilterOptions(gate="off", calibration=None, fixed_threshold=0.0)
    )
    assert result.relevance_by is None and result.relevance_fields() == {}


def test_two_runs_report_the_place_of_the_one_that_fell_back():
    assert where_relevance_ran([]) == {"relevance_by": None, "relevance_by_reason": None}
    fine, fell = Scored((), BY_WORKERS), Scored((), BY_GATEWAY, "workers: busy")
    assert where_relevance_ran([fine, fine]) == {"relevance_by": BY_WORKERS, "relevance_by_reason": None}
    assert where_relevance_ran([fell, fine]) == {"relevance_by": BY_GATEWAY, "relevance_by_reason": "workers: busy"}
    assert where_relevance_ran([fell, fell])["relevance_by_reason"] == "workers: busy"


# --- the workers' task and codec ----------------------------------------------------


def test_the_task_scores_with_the_shared_model_and_refuses_other_input(monkeypatch):
    import workers.tasks

    monkeypatch.setattr(workers.tasks, "shared_relevance_model", lambda: Scripted(SCORES))
    settings = Settings(redis_url="redis://127.0.0.1:9/0", workers=WorkerSettings(query_budget_s=20))
    task = make_app(settings).tasks[RELEVANCE_TASK]
    assert task.time_limit == task_time_limit_s(settings.workers)
    assert task("q", ["gamma", "beta"]) == [0.01, 0.9]  # run here, as a worker would
    with pytest.raises(CodecError):
        task("q", "beta")


def test_scores_and_texts_are_checked_when_decoded():
    assert decode_texts("q", ["a"]) == ("q", ["a"])
    for query, texts in (("q", ["a", 1]), (None, ["a"]), ("q", ("a",))):
        with pytest.raises(CodecError):
            decode_texts(query, texts)
    assert decode_scores([0, 0.5, 1], 3) == [0.0, 0.5, 1.0]
    for value in ([0.5], [0.5, 1.5], [0.5, True], {"a": 0.5}, None):
        with pytest.raises(CodecError):
            decode_scores(value, 2)


# --- the dispatcher, against a scripted Celery -----------------------------------


class Result:
    """An AsyncResult double: finishes with ``state`` and ``value``, or never (``state`` None)."""

    def __init__(self, state, value):
        self.id, self._state, self._value, self.forgotten = "task-1", state, value, False

    def get(self, timeout, propagate):
        if self._state is None:
            raise CeleryTimeout("not yet")
        return self._value

    @property
    def state(self):
        return self._state or states.PENDING

    @property
    def result(self):
        return self._value

    def forget(self):
        self.forgotten = True


class App:
    """A Celery app double: records the sent task; ``refuse``: the broker is down."""

    def __init__(self, result=None, refuse=False):
        self.result, self.refuse, self.sent, self.revoked = result, refuse, [], []
        self.conf = type("Conf", (), {"broker_url": "redis://user:pw@10.0.0.1:6379/0"})()
        self.control = type("Control", (), {"revoke": lambda _, ids: self.revoked.extend(ids)})()

    def signature(self, name, args, expires, headers):
        self.sent.append((name, args, expires))
        return self

    def apply_async(self, retry_policy):
        if self.refuse:
            from kombu.exceptions import OperationalError

            raise OperationalError("Error 111 connecting to 10.0.0.1:6379. Connection refused.")
        return self.result


def dispatcher(app, budget_s=5.0, health=None):
    return CeleryRelevance(
        app,
        budget_s=budget_s,
        health=health or WorkerHealth(),
        ping_timeout_s=0.1,
        start_wait_s=60,
        liveness_check_s=60,
    )


def test_the_dispatcher_returns_the_workers_scores():
    app = App(Result(states.SUCCESS, [0.25, 0.75]))
    health = WorkerHealth()
    assert dispatcher(app, health=health).score("q", ["a", "b"]) == [0.25, 0.75]
    assert app.sent == [(RELEVANCE_TASK, ("q", ["a", "b"]), 5.0)]
    assert app.result.forgotten and app.revoked == [] and health.seen_lately()
    assert dispatcher(App()).score("q", []) == []  # nothing sent for nothing


def test_a_refused_send_is_held_and_names_no_address():
    health = WorkerHealth(clock=lambda: 100.0)  # no time passes between the two queries, however busy the CPU
    with pytest.raises(WorkersUnavailable) as refused:
        dispatcher(App(refuse=True), health=health).score("q", ["a"])
    assert refused.value.reason == "cannot reach the Celery broker (Redis)" and "pw" not in str(refused.value)
    app = App(Result(states.SUCCESS, [0.5]))
    with pytest.raises(WorkersUnavailable):  # held: the next query does not try again at once
        dispatcher(app, health=health).score("q", ["a"])
    assert app.sent == []


def test_a_failed_task_or_an_unusable_result_is_a_project_error():
    with pytest.raises(WorkersFailed, match="RelevanceError: cannot load"):
        dispatcher(App(Result(states.FAILURE, RuntimeErrorNamed("cannot load")))).score("q", ["a"])
    with pytest.raises(WorkersFailed, match="expected 2 relevance scores, got 1"):
        dispatcher(App(Result(states.SUCCESS, [0.5]))).score("q", ["a", "b"])


class RuntimeErrorNamed(RuntimeError):
    pass


RuntimeErrorNamed.__name__ = "RelevanceError"


def test_a_task_unfinished_within_the_budget_is_revoked_and_reported():
    app = App(Result(None, None))
    with pytest.raises(WorkersFailed, match="within 0.05 s") as late:
        dispatcher(app, budget_s=0.05).score("q", ["a"])
    assert late.value.reason.startswith("the workers did not score") and app.revoked == ["task-1"]


def test_the_budget_never_exceeds_the_relevance_budget():
    settings = Settings(redis_url="redis://127.0.0.1:9/0", workers=WorkerSettings(query_budget_s=300))
    app = make_app(settings)
    assert celery_relevance(app, settings=settings).budget_s == RELEVANCE_BUDGET_S
    assert celery_relevance(app, settings=settings, budget_s=4).budget_s == 4
    with pytest.raises(ValueError):
        celery_relevance(app, settings=settings, budget_s=0)


# --- the gateway -------------------------------------------------------------------


def test_models_loading_is_reported_until_read():
    models = ModelsLoading()
    assert models.state() == {"ok": True}  # never asked to load: read on first use
    models.begin()
    assert models.state() == {"ok": False, "reason": "loading the models"}
    models.finish("the relevance model could not be loaded")
    assert models.state() == {"ok": False, "reason": "the relevance model could not be loaded"}
    models.finish(None)
    assert models.state() == {"ok": True}


def test_the_gateway_injects_the_workers_with_celery_and_its_own_model_otherwise(monkeypatch):
    import workers.relevance_dispatch

    here = Scripted(SCORES)
    threads = create_app(Settings(), relevance_model=here).state.edges.relevance_model(30)
    assert threads.places == ((BY_GATEWAY, here),)
    sent = []
    monkeypatch.setattr(workers.relevance_dispatch, "celery_relevance", lambda app, **kw: sent.append(kw) or "w")
    settings = dataclasses.replace(Settings(), workers=WorkerSettings(judge="celery"))
    edges = create_app(settings, relevance_model=here).state.edges
    edges._celery = "celery-app"
    assert edges.relevance_model(12).places == ((BY_WORKERS, "w"), (BY_GATEWAY, here))
    assert sent[0]["budget_s"] == 12 and sent[0]["health"] is edges.worker_health


def test_the_gateway_reads_its_models_at_start_and_health_says_when(monkeypatch):
    class Loading:
        loaded, made_with = 0, []

        def __init__(self, threads=2, batch_size=16, return_memory=False, turns=None):
            Loading.made_with.append((threads, batch_size, return_memory, turns))

        def load(self):
            Loading.loaded += 1
            return self

    from chunkrag_core.providers import local_relevance

    class Embedder:
        def embed(self, texts):
            raise AssertionError("an embedder handed in is the caller's: not warmed here")

    monkeypatch.setattr(local_relevance, "LocalRelevanceModel", Loading)
    from ingest_pipeline.sentences import punkt_tokenizer

    punkt_tokenizer.cache_clear()
    app = create_app(Settings(), embedder=Embedder())
    edges = app.state.edges
    with TestClient(app):  # the lifespan: loading starts
        assert edges.wait_for_models(30)
    assert Loading.loaded == 1 and edges.models.state() == {"ok": True}
    assert punkt_tokenizer.cache_info().currsize == 1  # post-search's first sentences cost nothing to load
    # The gateway's own model: each batch on the searching thread (its priority is the
    # search's), in batches of four, its memory arena shrunk after each run (a burst's memory
    # goes back), each batch in its turn between the callers (model_turns.py).
    assert (
        Loading.made_with == [(1, 4, True, edges.model_turns.turn)] and edges.local_relevance is edges.local_relevance
    )


def test_a_relevance_model_failure_is_named_as_such_and_the_playground_offers_the_options():
    from chunkrag_core.providers.local_relevance import RelevanceError
    from chunkrag_gateway.errors import from_exception
    from chunkrag_gateway.playground import page_defaults

    failed = from_exception(RelevanceError("cannot load /opt/x/relevance-minilm.int8.onnx: bad file"))
    assert (failed.status, failed.reason) == (502, "the relevance model failed") and "/opt" not in failed.reason
    offered = page_defaults(6)
    assert offered["relevance"] == ["retrieval", "crossencoder"] and offered["relevance_default"] == "retrieval"
    assert "local" in offered["reranks"] and offered["rerank_default"] == "off"


def test_a_task_no_worker_takes_is_held_and_named(monkeypatch):
    import workers.relevance_dispatch as dispatch
    from workers.dispatch import TaskView

    def nobody(app, timeout, limit=None):
        raise WorkersUnavailable(
            "no Celery worker answered a ping within 0.1 s on redis://10.0.0.1",
            reason="no Celery worker answered a ping within 0.1 s",
        )

    monkeypatch.setattr(dispatch, "task_view", lambda result, resends=0: TaskView(states.PENDING))
    import workers.dispatch  # the liveness ping judging and relevance scoring share

    monkeypatch.setattr(workers.dispatch, "check_workers", nobody)
    app, health = App(Result(None, None)), WorkerHealth()
    relevance = CeleryRelevance(
        app, budget_s=30, health=health, ping_timeout_s=0.1, start_wait_s=0.01, liveness_check_s=60
    )
    with pytest.raises(WorkersUnavailable) as none_took:
        relevance.score("q", ["a"])
    assert (
        none_took.value.reason
        == "no worker took the relevance task within 0.01 s: no Celery worker answered a ping within 0.1 s"
    )
    assert app.revoked == ["task-1"] and health.unavailable() == none_took.value.reason


def test_a_task_whose_worker_stops_answering_is_a_project_error(monkeypatch):
    import workers.relevance_dispatch as dispatch
    from workers.dispatch import TaskView

    monkeypatch.setattr(dispatch, "task_view", lambda result, resends=0: TaskView(states.STARTED, "w1@host"))
    monkeypatch.setattr(dispatch, "stranded", lambda app, views, timeout, max_resends: [0])
    app = App(Result(None, None))
    relevance = CeleryRelevance(
        app, budget_s=30, health=WorkerHealth(), ping_timeout_s=0.1, start_wait_s=60, liveness_check_s=0.01
    )
    with pytest.raises(WorkersFailed) as lost:
        relevance.score("q", ["a"])
    assert lost.value.reason == "the worker scoring the texts stopped answering" and app.revoked == ["task-1"]
