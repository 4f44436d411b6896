"""The judging module (batch plan, judging that degrades, who judged), the
threshold table, and the dispatcher's failure bookkeeping, with doubles."""

import dataclasses

import pytest
from celery import states

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatError, ChatResponse
from chunkrag_filter.judging import (
    BY_GATEWAY,
    BY_RETRIEVAL,
    BY_WORKERS,
    Batch,
    Degrading,
    Judged,
    JudgingUnavailable,
    Place,
    judge_candidates,
    plan_batches,
    unscored,
)  # fmt: skip
from chunkrag_filter.pipeline import THRESHOLDS, FilterOptions, candidate_features, resolve_calibration, run_filter
from chunkrag_filter.processors.relevance import Judgement, ScoringOptions
from chunkrag_filter.processors.thresholds import (
    THRESHOLD_METHODS,
    CutInputs,
    cut,
    dynamic_threshold,
    fixed_threshold,
    relative_threshold,
)
from workers.dispatch import TaskView, WorkerHealth, WorkersUnavailable, taken

CHUNKS = [
    Chunk(
        doc_id="d",
        position=i,
        text=f"chunk {i}",
        start=0,
        end=1,
        score=3.0 - i,
        stage_scores={"cosine": 0.8 - i / 10, "bm25": 1.0 - i / 4},
    )
    for i in range(4)
]


def judged_as(score):
    def judge_many(query, chunks, options):
        return [Judgement(score, None, None, score, calls=1) for _ in chunks]

    return judge_many


def failing(exc):
    def judge_many(query, chunks, options):
        raise exc

    return judge_many


def test_the_plan_cuts_listwise_as_in_threads_and_per_chunk_methods_by_size():
    assert plan_batches(10, ScoringOptions(method="listwise")) == [Batch(0, 5), Batch(5, 10)]
    assert plan_batches(3, ScoringOptions()) == [Batch(0, 1), Batch(1, 2), Batch(2, 3)]
    assert plan_batches(3, ScoringOptions(), 2) == [Batch(0, 2), Batch(2, 3)]


def test_the_first_place_that_can_judge_does_and_the_result_says_which():
    judged = Degrading(
        [Place(BY_WORKERS, judged_as(0.7)), Place(BY_GATEWAY, failing(AssertionError("not reached")))]
    ).judged("q", CHUNKS, ScoringOptions())
    assert judged.by == BY_WORKERS and judged.reason is None and [j.base for j in judged.judgements] == [0.7] * 4

    places = [
        Place(BY_WORKERS, failing(JudgingUnavailable("cannot reach the Celery broker"))),
        Place(BY_GATEWAY, judged_as(0.2)),
    ]
    judged = Degrading(places).judged("q", CHUNKS, ScoringOptions())
    assert (judged.by, judged.reason) == (BY_GATEWAY, "workers: cannot reach the Celery broker")
    assert Degrading(places)("q", CHUNKS, ScoringOptions()) == list(judged.judgements)  # a JudgeMany too


def test_with_no_place_and_no_model_the_candidates_come_back_unjudged_by_retrieval():
    down = ChatError("connection refused", retryable=True)
    judged = Degrading(
        [Place(BY_WORKERS, failing(WorkersUnavailable("no worker"))), Place(BY_GATEWAY, failing(down))]
    ).judged("q", CHUNKS, ScoringOptions())
    assert (
        judged.by == BY_RETRIEVAL and judged.reason == "workers: no worker; gateway: the model provider is unavailable"
    )
    assert all(j.combined is None and j.notes == (f"not judged: {judged.reason}",) for j in judged.judgements)


def test_the_reason_a_caller_sees_names_no_address_but_the_log_does(caplog):
    broker_down = WorkersUnavailable(
        "cannot reach redis://10.0.0.7:6379/0", reason="cannot reach the Celery broker (Redis)"
    )
    model_down = ChatError("connection refused by http://10.0.0.8:8088/v1", retryable=True)
    judged = Degrading([Place(BY_WORKERS, failing(broker_down)), Place(BY_GATEWAY, failing(model_down))]).judged(
        "q", CHUNKS, ScoringOptions()
    )
    assert "10.0.0" not in judged.reason and "10.0.0" not in str(judged.judgements[0].notes)
    assert "redis://10.0.0.7:6379/0" in caplog.text and "http://10.0.0.8:8088/v1" in caplog.text


def test_errors_other_than_unavailability_are_not_hidden():
    refused = ChatError("model answered 400", retryable=False, status=400)
    with pytest.raises(ChatError, match="400"):
        Degrading([Place(BY_WORKERS, failing(WorkersUnavailable("down"))), Place(BY_GATEWAY, failing(refused))]).judged(
            "q", CHUNKS, ScoringOptions()
        )
    with pytest.raises(KeyError):
        Degrading([Place(BY_WORKERS, failing(KeyError("bug")))]).judged("q", CHUNKS, ScoringOptions())


def test_a_plain_judge_many_is_judged_by_nobody_in_particular_and_a_place_by_its_name():
    assert judge_candidates(judged_as(0.5), "q", CHUNKS[:1], ScoringOptions()) == Judged(
        (Judgement(0.5, None, None, 0.5, calls=1),)
    )
    assert judge_candidates(Place(BY_GATEWAY, judged_as(0.5)), "q", CHUNKS[:1], ScoringOptions()).by == BY_GATEWAY


def nobody():
    return Degrading([Place(BY_WORKERS, failing(WorkersUnavailable("no worker")))])


def test_the_filter_scores_by_the_retrieval_signals_when_nobody_could_judge():
    result = run_filter(
        "q",
        CHUNKS,
        model=None,
        options=FilterOptions(redundancy_threshold=None, judge_top=9, answer=False),
        judge_many=nobody(),
    )
    assert (result.judged_by, result.judged_by_reason) == (BY_RETRIEVAL, "workers: no worker")
    # the shipped model for no judge, as if judge_top were 0
    rows = candidate_features("q", CHUNKS, [None] * 4, [])
    no_judge = resolve_calibration(FilterOptions(judge_top=0))[0]
    probabilities = {d.chunk.chunk_id: d.chunk.stage_scores["calibrated"] for d in result.decisions}
    assert probabilities == {c.chunk_id: round(no_judge.probability(row), 6) for c, row in zip(CHUNKS, rows)}
    assert "unscored" not in {d.reason for d in result.decisions} and result.model_calls == 0


def test_uncalibrated_the_retrieval_fallback_is_the_normalised_retrieval_score():
    options = FilterOptions(
        redundancy_threshold=None,
        judge_top=None,
        calibration=None,
        threshold="fixed",
        fixed_threshold=0.5,
        answer=False,
    )
    result = run_filter("q", CHUNKS, model=None, options=options, judge_many=nobody())
    assert [d.chunk.stage_scores["combined"] for d in result.decisions] == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    assert [c.chunk_id for c in result.kept] == ["d:0", "d:1"] and result.judged_by == BY_RETRIEVAL
    # nor is the model that could not judge asked for the threshold
    unreachable = run_filter(
        "q", CHUNKS, model=None, options=dataclasses.replace(options, threshold="llm"), judge_many=nobody()
    )
    assert unreachable.threshold.method == "dynamic" and unreachable.model_calls == 0


def test_threshold_methods_come_from_one_table():
    scores = [0.9, 0.2, 0.7, 0.1]
    inputs = CutInputs(0.4, 0.01)
    assert THRESHOLDS == tuple(THRESHOLD_METHODS) == ("dynamic", "llm", "fixed", "relative")
    assert cut("dynamic", scores, inputs).threshold == dynamic_threshold(scores, 0.01)
    assert cut("fixed", scores, inputs).threshold == fixed_threshold(scores, 0.4)
    assert cut("relative", scores, inputs).threshold == relative_threshold(scores, 0.4)
    with pytest.raises(ValueError, match="unknown threshold 'median'; choose one of dynamic, llm, fixed, relative"):
        cut("median", scores, inputs)


def test_the_llm_threshold_costs_one_call_and_nothing_without_scores():
    class Model:
        calls = 0

        def complete(self, request):
            Model.calls += 1
            return ChatResponse(text="0.6", prompt_tokens=30)

    chosen = cut("llm", [0.9, 0.2], CutInputs(0.4, query="q", model=Model()))
    assert (chosen.threshold.method, chosen.threshold.value, chosen.calls, chosen.prompt_tokens) == ("llm", 0.6, 1, 30)
    empty = cut("llm", [], CutInputs(0.4, model=Model()))
    assert (empty.threshold.method, empty.calls, Model.calls) == ("dynamic", 0, 1)


def test_worker_health_holds_a_failure_briefly_and_forgets_it_on_work_seen():
    now = [100.0]
    health = WorkerHealth(hold_s=2.0, clock=lambda: now[0])
    assert health.unavailable() is None and not health.seen_lately()
    health.failed("broker down")
    now[0] += 1.9
    assert health.unavailable() == "broker down"
    now[0] += 0.2
    assert health.unavailable() is None  # the next query tries again
    health.failed("no worker", hold_s=10.0)
    now[0] += 5
    assert health.unavailable() == "no worker"
    health.seen()
    assert health.unavailable() is None and health.seen_lately()
    now[0] += 31
    assert not health.seen_lately()


def test_a_task_counts_as_taken_once_any_worker_started_or_finished_one():
    assert taken([TaskView(states.PENDING), TaskView(states.STARTED, "w1")]) is True
    assert taken([TaskView(states.PENDING), TaskView(states.SUCCESS)]) is True
    assert taken([TaskView(states.PENDING), TaskView(states.PENDING)]) is False
    # the result backend could not say: no conclusion
    assert taken([TaskView(states.PENDING), TaskView("UNKNOWN")]) is None


def test_an_unscored_record_carries_its_reason():
    assert unscored("late") == Judgement(None, None, None, None, notes=("late",))
    assert dataclasses.replace(unscored("late"), notes=()).combined is None
