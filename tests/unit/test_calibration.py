"""The calibrated judge's pure core: features, the logistic fit, AUC/F1,
and the offline replay of filter variants, with literal numbers."""

import math

import pytest

from chunkrag_eval import ablation
from chunkrag_filter.pipeline import FilterOptions, calibrated
from chunkrag_filter.processors.calibration import (
    LogisticModel,
    best_f1,
    chunk_features,
    f1_at,
    fit_logistic,
    roc_auc,
)
from chunkrag_filter.processors.relevance import Judgement, ScoringOptions, mean_of_orders


def test_features_of_three_candidates():
    rows = chunk_features(
        [{"cosine": 0.5, "bm25": 1.0}, {"cosine": 0.7, "bm25": 0.0}, {"cosine": 0.2}],
        [0.6, 0.3, None],
        [100, 250, 50],
        batches=[[0, 1]],
    )
    assert rows[0] == {
        "judge": 0.6,
        "judged": 1.0,
        "judge_top": 1.0,
        "cosine": 0.5,
        "cosine_gap": pytest.approx(-0.2),
        "bm25": 1.0,
        "inv_rank": 1.0,
        "log_chars": 0.0,
        # No relevance model ran: its features are 0.
        "relevance_logit": 0.0,
        "relevance_gap": 0.0,
    }
    assert rows[1]["judge_top"] == 0.0 and rows[1]["cosine_gap"] == 0.0 and rows[1]["inv_rank"] == 0.5
    assert rows[1]["log_chars"] == pytest.approx(math.log(2.5))
    assert rows[2]["judge"] == 0.0 and rows[2]["judged"] == 0.0 and rows[2]["bm25"] == 0.0


def test_logistic_model_probability():
    model = LogisticModel(("judge", "cosine"), (2.0, -1.0), 0.5)
    assert model.probability({"judge": 1.0, "cosine": 1.0}) == pytest.approx(1 / (1 + math.exp(-1.5)))
    assert model.probability({"judge": 0.0, "cosine": 100.0}) == pytest.approx(math.exp(-99.5) / (1 + math.exp(-99.5)))
    assert model.uses_judge
    assert not LogisticModel(("cosine",), (1.0,), 0.0).uses_judge
    with pytest.raises(ValueError, match="unknown feature"):
        LogisticModel(("colour",), (1.0,), 0.0)
    with pytest.raises(ValueError, match="one weight per feature"):
        LogisticModel(("judge",), (1.0, 2.0), 0.0)


def test_fit_recovers_a_separating_direction():
    rows = [{"judge": x, "cosine": 0.3} for x in (0.0, 0.1, 0.2, 0.3, 0.7, 0.8, 0.9, 1.0)]
    labels = [False, False, False, True, False, True, True, True]
    model = fit_logistic(rows, labels, ("judge", "cosine"), l2=0.1)
    assert model.weights[0] > 0
    assert model.weights[1] == 0.0  # a constant feature gets no weight
    assert (
        model.probability({"judge": 0.95, "cosine": 0.3})
        > 0.8
        > 0.2
        > model.probability({"judge": 0.05, "cosine": 0.3})
    )


def test_fit_with_a_stronger_penalty_shrinks_the_weight():
    rows = [{"judge": x} for x in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)]
    labels = [False, False, True, False, True, True]
    loose = fit_logistic(rows, labels, ("judge",), l2=0.01)
    tight = fit_logistic(rows, labels, ("judge",), l2=100.0)
    assert 0 < tight.weights[0] < loose.weights[0]


def test_roc_auc_and_f1():
    assert roc_auc([0.9, 0.8, 0.3, 0.1], [True, True, False, False]) == 1.0
    assert roc_auc([0.1, 0.3, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5
    assert roc_auc([0.9, 0.4, 0.6, 0.1], [True, True, False, False]) == 0.75
    assert roc_auc([0.9], [True]) is None
    assert f1_at([0.9, 0.4, 0.6, 0.1], [True, True, False, False], 0.5) == 0.5
    assert best_f1([0.9, 0.4, 0.6, 0.1], [True, True, False, False]) == (0.8, 0.4)


def test_mean_of_orders():
    assert mean_of_orders(0.2, 0.6) == pytest.approx(0.4)
    assert mean_of_orders(None, 0.6) == 0.6
    assert mean_of_orders(None, None) is None


def _question(golds, forward, reverse, cosines, chars=100, reasons=None):
    rows = []
    for i, gold in enumerate(golds):
        rows.append(
            {
                "rank": i,
                "chars": chars,
                "gold": gold,
                "forward": forward[i],
                "reverse": reverse[i],
                "base": (forward[i] + reverse[i]) / 2,
                "cosine": cosines[i],
                "bm25": 1.0 - i / 10,
                "retrieval": 1.0 - i / 10,
                "reason": (reasons or {}).get(i, "below_threshold"),
            }
        )
    return ablation.Question("q", tuple(rows))


def test_cut_rules():
    scores = [0.5, None, 0.1, 0.3]
    assert ablation.cut(scores, "fixed:0.3") == [0, 3]
    assert ablation.cut(scores, "relative:0.5") == [0, 3]
    assert ablation.cut(scores, "top:1") == [0]
    assert ablation.cut(scores, "algorithm1") == [0, 3]  # mean 0.3, variance 0.0267 >= 0.01
    assert ablation.cut([None], "algorithm1") == []
    with pytest.raises(ValueError):
        ablation.cut(scores, "median")


def test_replay_counts_calls_baselines_and_fallback():
    question = _question(
        golds=[False, True, False, False],
        forward=[0.7, 0.2, 0.05, 0.05],
        reverse=[0.1, 0.8, 0.05, 0.05],
        cosines=[0.9, 0.2, 0.5, 0.1],
    )
    forward_only = ablation.replay(question, ablation.Variant("fwd", "judge", "top:1", judge="forward"))
    both = ablation.replay(question, ablation.Variant("both", "judge", "top:1", judge="both"))
    assert (forward_only.after, forward_only.calls) == (False, 1)
    assert (both.after, both.calls) == (True, 2)  # the reversed order corrects the position bias
    assert both.chars_after == 100 and both.chars_before == 400
    assert both.cosine_after is False and both.bm25_after is False  # 100 characters: each takes its own top chunk
    cheap = ablation.replay(question, ablation.Variant("none", "cosine", "fixed:2"))
    assert cheap.chars_after == 300 and cheap.calls == 0 and cheap.after  # nothing passes: top 3 by retrieval


def test_replay_skips_redundant_candidates_but_baselines_see_them():
    question = _question([True, False], [0.9, 0.1], [0.9, 0.1], [0.1, 0.9], reasons={0: "redundant"})
    result = ablation.replay(question, ablation.Variant("fwd", "judge", "top:1", judge="forward"))
    assert not result.after and result.before
    assert result.cosine_after is False  # cosine prefers the non-gold one


def test_cascade_judges_only_the_top():
    question = _question([False] * 12, [0.1] * 12, [0.1] * 12, [0.5] * 12)
    assert ablation.calls_for(12, ablation.Variant("all", "judge", "algorithm1", judge="forward")) == 2
    assert ablation.calls_for(12, ablation.Variant("top", "judge", "algorithm1", judge="both", top=9)) == 2
    shares = ablation.judge_shares(question.judged_rows, "both", 9)
    assert shares[8] == 0.1 and shares[9] is None


def test_cross_validation_holds_each_question_out():
    questions = [_question([i % 2 == 0, False], [0.8, 0.2], [0.8, 0.2], [0.6, 0.4]) for i in range(10)]
    variant = ablation.Variant("cal", "calibrated", "fixed:0.5", judge="both", features=("judge", "cosine"))
    results, probabilities, labels = ablation.cross_validated(questions, variant, k=5)
    assert len(results) == 10 and len(probabilities) == 20 and sum(labels) == 5


def test_calibrated_stage_scores_every_candidate():
    from chunkrag_core.chunk import Chunk

    chunks = [
        Chunk("d", i, "x" * 100, i * 100, i * 100 + 100, stage_scores={"cosine": 0.5 - i / 10, "bm25": 1.0 - i / 2})
        for i in range(3)
    ]
    judgements = [
        Judgement(0.8, None, None, 0.8),
        Judgement(None, None, None, None, notes=("unreadable",)),
        Judgement(None, None, None, None),
    ]
    model = LogisticModel(("judge", "cosine"), (4.0, 1.0), -2.0)
    out = calibrated("q", chunks, judgements, model, ScoringOptions(method="listwise"), judged=2)
    assert out[0].combined == pytest.approx(1 / (1 + math.exp(-(-2.0 + 3.2 + 0.5))), abs=1e-6)
    assert out[1].combined is None  # the judge failed on a chunk it was asked about
    assert out[2].combined == pytest.approx(1 / (1 + math.exp(-(-2.0 + 0.3))), abs=1e-6)  # not asked: cheap signals
    with pytest.raises(ValueError):
        FilterOptions(judge_top=-1)
