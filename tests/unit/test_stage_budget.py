"""budget_s bounds every model stage: the relevance model's stage, the
cross-encoder gate, the judge and reranking stop between batches once the
request's budget is spent, and the filter answers with what was decided,
naming the stage; a stage that decided nothing the request needs is a 504.
The relevance model and the clock are test doubles: a batch of the slow
model moves the clock on, so nothing here waits or reads real time, except
the one remote reranker held on an event."""

import dataclasses
import threading

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.local_relevance import BATCH_SIZE
from chunkrag_filter import budget as budgets
from chunkrag_filter.budget import Budget, BudgetSpent, RanOut, call_within, merged_ran_out, scored_within
from chunkrag_filter.judging import unscored, within_request_budget
from chunkrag_filter.pipeline import FilterOptions, run_filter, undecided
from chunkrag_filter.processors.calibration import LogisticModel
from chunkrag_gateway import errors

# P(relevant) is the relevance model's own (sigmoid of its log-odds), or the cosine.
ONLY_RELEVANCE = LogisticModel(("relevance_logit",), (1.0,), 0.0)
BY_COSINE = LogisticModel(("cosine",), (1.0,), 0.0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class SlowRelevance:
    """A relevance model whose every run takes ``per_run_s`` of ``clock``'s
    time; records the texts of each run."""

    def __init__(self, clock, per_run_s):
        self.clock, self.per_run_s, self.runs = clock, per_run_s, []

    def score(self, query, texts):
        self.runs.append(list(texts))
        self.clock.now += self.per_run_s
        return [0.9 - int(t.split()[1]) / 1000 for t in texts]


class NoJudge:
    def complete(self, request):
        raise AssertionError("no model call is expected")


def candidates(count):
    return [
        Chunk(
            doc_id="d",
            position=i,
            text=f"chunk {i}",
            start=0,
            end=1,
            score=1.0 - i / (2 * count),
            stage_scores={"cosine": 0.9 - i / (2 * count), "bm25": 1.0 - i / count},
        )
        for i in range(count)
    ]


def filtered(chunks, options, model, budget):
    with budgets.bound(budget):
        return run_filter("q", chunks, model=NoJudge(), options=options, relevance_model=model)


def test_the_relevance_stage_stops_within_one_batch_of_the_budget_and_says_so():
    clock = Clock()
    model = SlowRelevance(clock, per_run_s=0.6)  # two batches fit in 1 s only as 1.2 s: the second crosses it
    options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, gate="off", answer=False)
    result = filtered(candidates(50), options, model, Budget(1.0, clock=clock))

    # Two batches of the model's size, in retrieval order; the third never started.
    assert [len(run) for run in model.runs] == [BATCH_SIZE, BATCH_SIZE]
    assert [t for run in model.runs for t in run] == [f"chunk {i}" for i in range(2 * BATCH_SIZE)]
    assert clock.now <= 1.0 + model.per_run_s
    reasons = {d.chunk.position: d.reason for d in result.decisions}
    assert all(reasons[i] != "unscored" for i in range(2 * BATCH_SIZE))
    assert all(reasons[i] == "unscored" for i in range(2 * BATCH_SIZE, 50))
    assert result.kept and all(c.position < 2 * BATCH_SIZE for c in result.kept)
    assert result.ran_out == (RanOut("relevance", 32, 50, "the rest are unscored"),)
    fields = result.budget_fields()
    assert fields["budget_ran_out"] == "relevance"
    assert fields["budget_ran_out_reason"] == (
        "the budget_s of 1 s ran out in the relevance stage with 32 of 50 read: the rest are unscored"
    )
    assert undecided(result) is None  # something was decided: an answer, not an error


def test_without_a_budget_the_model_reads_every_candidate_in_one_run():
    model = SlowRelevance(Clock(), per_run_s=100.0)
    options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, gate="off", answer=False)
    result = filtered(candidates(50), options, model, None)
    assert [len(run) for run in model.runs] == [50] and result.ran_out == () and result.budget_fields() == {}


def test_a_budget_that_lasts_changes_nothing_but_the_batches():
    clock = Clock()
    options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, gate="off", answer=False)
    bounded = filtered(candidates(40), options, SlowRelevance(clock, 0.1), Budget(60.0, clock=clock))
    unbounded = filtered(candidates(40), options, SlowRelevance(Clock(), 0.1), None)
    assert bounded.ran_out == () and bounded.decisions == unbounded.decisions


def test_a_relevance_stage_that_scored_nothing_is_a_504_naming_the_stage():
    clock = Clock()
    budget = Budget(1.0, clock=clock)
    budget.remaining()  # started by an earlier stage of the request, then spent
    clock.now = 5.0
    model = SlowRelevance(clock, per_run_s=0.1)
    options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, gate="off", answer=False)
    result = filtered(candidates(20), options, model, budget)
    assert model.runs == [] and all("relevance" not in d.chunk.stage_scores for d in result.decisions)
    stage = undecided(result)
    assert stage == RanOut("relevance", 0, 20, "the rest are unscored")
    error = errors.from_exception(BudgetSpent(budget.seconds, stage))
    assert error.status == 504 and error.type == "timeout_exception"
    assert error.reason == "budget_s of 1 s ran out in the relevance stage before it scored any of 20 candidates"


def test_the_cross_encoder_gate_gives_way_to_the_retrieval_gate_when_the_budget_runs_out():
    clock = Clock()
    model = SlowRelevance(clock, per_run_s=1.5)  # the first batch spends the whole budget
    options = FilterOptions(gate="crossencoder", gate_top=40, calibration=BY_COSINE, answer=False)
    result = filtered(candidates(50), options, model, Budget(1.0, clock=clock))
    assert [len(run) for run in model.runs] == [BATCH_SIZE]
    assert result.gate is not None and result.gate.gate == "retrieval"
    assert "relevance_logit" not in result.gate.features
    assert result.ran_out[0] == RanOut("gate", BATCH_SIZE, 40, "the retrieval gate decided")


def test_reranking_by_the_relevance_model_stops_and_keeps_the_retrieval_order():
    clock = Clock()
    model = SlowRelevance(clock, per_run_s=1.5)
    options = FilterOptions(
        gate="off", calibration=BY_COSINE, fixed_threshold=0.0, min_score=0.0, rerank="local", answer=False
    )
    result = filtered(candidates(40), options, model, Budget(1.0, clock=clock))
    assert [len(run) for run in model.runs] == [BATCH_SIZE]  # then the budget was spent
    assert [c.position for c in result.kept] == list(range(40))  # as retrieved
    assert all("rerank" not in c.stage_scores for c in result.kept)
    assert result.ran_out == (RanOut("rerank", 0, 40, "the kept chunks stay in retrieval order"),)


def test_the_judge_is_not_asked_once_the_budget_is_spent():
    clock = Clock()

    def judge_many(query, chunks, options):
        raise AssertionError("the judge is not asked after the budget is spent")

    options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, gate="off", judge_top=9, answer=False)
    with budgets.bound(Budget(1.0, clock=clock)):
        result = run_filter(
            "q",
            candidates(10),
            model=NoJudge(),
            options=options,
            judge_many=judge_many,
            relevance_model=SlowRelevance(clock, per_run_s=2.0),
        )
    assert [r.stage for r in result.ran_out] == ["judge"]
    assert result.budget_fields()["budget_ran_out"] == "judge"


def test_chunks_the_judge_left_for_want_of_time_say_the_budget_ran_out_in_judging():
    def late_judge(query, chunks, options):
        return [unscored("not judged within the budget of 2 s")] * len(chunks)

    options = FilterOptions(gate="off", calibration=None, judge_top=None, answer=False)
    result = run_filter("q", candidates(4), model=NoJudge(), options=options, judge_many=late_judge)
    assert result.ran_out == (RanOut("judge", 0, 4, "the rest are unscored"),)
    assert result.budget_fields()["budget_ran_out_reason"] == (
        "the budget ran out in the judge stage with 0 of 4 read: the rest are unscored"
    )


def test_judging_waits_no_longer_than_the_request_budget_has_left():
    clock = Clock()
    budget = Budget(2.0, clock=clock)
    budget.remaining()
    clock.now = 1.5
    assert within_request_budget(300.0) == 300.0  # no request budget: its own
    with budgets.bound(budget):
        assert within_request_budget(300.0) == pytest.approx(0.5)
        assert within_request_budget(0.2) == pytest.approx(0.2)


def test_a_remote_reranker_late_for_the_budget_leaves_the_retrieval_order():
    release = threading.Event()

    class HeldReranker:
        def rerank(self, query, texts):
            release.wait(30)
            return [(i, 1.0) for i in reversed(range(len(texts)))]

    options = FilterOptions(
        gate="off", calibration=BY_COSINE, fixed_threshold=0.0, min_score=0.0, rerank="cohere", answer=False
    )
    try:
        with budgets.bound(Budget(0.05)):
            result = run_filter("q", candidates(5), model=NoJudge(), options=options, reranker=HeldReranker())
    finally:
        release.set()
    assert [c.position for c in result.kept] == [0, 1, 2, 3, 4]
    assert result.ran_out == (RanOut("rerank", 0, 5, "the kept chunks stay in retrieval order"),)
    with budgets.bound(Budget(30.0)):
        result = run_filter("q", candidates(5), model=NoJudge(), options=options, reranker=HeldReranker())
    assert [c.position for c in result.kept] == [4, 3, 2, 1, 0] and result.ran_out == ()


def test_a_one_call_stage_errors_propagate_and_nothing_runs_on_a_spent_budget():
    clock = Clock()
    spent = Budget(1.0, clock=clock)
    spent.remaining()
    clock.now = 2.0
    assert call_within(spent, lambda: pytest.fail("not called")) == (False, None)
    with pytest.raises(ZeroDivisionError):
        call_within(Budget(30.0), lambda: 1 / 0)
    assert call_within(None, lambda: 7) == (True, 7)


def test_batches_stop_once_spent_and_hits_reports_merge_per_stage():
    clock = Clock()
    seen = []

    def score(start, stop):
        seen.append((start, stop))
        clock.now += 0.4

    assert scored_within(Budget(1.0, clock=clock), 100, 16, score) == 48
    assert seen == [(0, 16), (16, 32), (32, 48)]
    assert scored_within(None, 5, 2, lambda a, b: None) == 5
    hits = [
        (RanOut("relevance", 16, 32, "the rest are unscored"),),
        (),
        (RanOut("relevance", 0, 32, "the rest are unscored"), RanOut("rerank", 0, 2, "as retrieved")),
    ]
    assert merged_ran_out(hits) == (
        RanOut("relevance", 16, 64, "the rest are unscored"),
        RanOut("rerank", 0, 2, "as retrieved"),
    )
    with pytest.raises(ValueError, match="positive"):
        Budget(0)


def test_over_the_hits_of_a_post_search_the_relevance_stage_is_counted_over_every_hit():
    from chunkrag_filter.pipeline import Decision, recounted

    read, unread = candidates(3)[0].with_score(relevance=0.9), candidates(3)[1]
    decisions = [Decision(read, True, "above_threshold"), Decision(unread, False, "unscored")]
    decisions.append(Decision(candidates(3)[2], False, "redundant"))
    ran_out = (RanOut("relevance", 0, 1, "the rest are unscored"), RanOut("gate", 0, 3, "the retrieval gate decided"))
    assert recounted(ran_out, decisions) == (
        RanOut("relevance", 1, 2, "the rest are unscored"),
        RanOut("gate", 0, 3, "the retrieval gate decided"),
    )


def test_a_spent_budget_in_the_gateway_response_names_the_stage():
    from chunkrag_gateway.dialect import chunkrag_section
    from search_extension.ask import AskResult
    from search_extension.retriever import RetrievalResult

    clock = Clock()
    options = FilterOptions(relevance="crossencoder", calibration=ONLY_RELEVANCE, gate="off", answer=False)
    chunks = candidates(40)
    result = filtered(chunks, options, SlowRelevance(clock, 0.7), Budget(1.0, clock=clock))
    section = chunkrag_section(AskResult("q", RetrievalResult(tuple(chunks), "minmax", "client", 1.0, 1.0), result))
    assert section["budget_ran_out"] == "relevance"
    assert "32 of 40 read" in section["budget_ran_out_reason"]
    assert dataclasses.replace(result, ran_out=()).budget_fields() == {}
