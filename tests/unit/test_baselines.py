"""The baselines of `chunkrag eval` and their significance test, with
literal numbers."""

from __future__ import annotations

import math

import pytest

from chunkrag_eval.baselines import baselines, baselines_summary, curves, points
from chunkrag_eval.measures import discordant, mcnemar_exact, one_cut_for_set, share_kept
from chunkrag_eval.runner import EvalReport, QuestionOutcome


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        # 2 * (C(15,0) + C(15,1) + C(15,2)) / 2**15 = 2 * 121 / 32768
        (13, 2, 242 / 32768),
        (2, 13, 242 / 32768),
        # 2 * (1 + 11 + 55) / 2048
        (9, 2, 134 / 2048),
        # 2 * (1 + 12 + 66 + 220 + 495 + 792) / 4096
        (7, 5, 3172 / 4096),
        (3, 3, 1.0),  # the doubled tail passes 1: capped
        (0, 0, 1.0),  # no discordant pair: nothing tells them apart
        (0, 5, 2 / 32),
    ],
)
def test_exact_mcnemar(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p)


def test_discordant_pairs_count_each_side():
    assert discordant([True, True, False, False, True], [True, False, True, False, False]) == (2, 1)


def test_one_cut_for_the_set_comes_closest_to_the_budget():
    scores = [[0.9, 0.5], [0.7, 0.2]]
    chars = [[100, 200], [50, 400]]
    # By score: 0.9 (100), 0.7 (+50 = 150), 0.5 (+200 = 350), 0.2 (+400 = 750).
    assert one_cut_for_set(scores, chars, 300) == (0.5, [[0, 1], [0]])
    # 150 and 350 are both 100 from 250: the cut keeping fewer wins.
    assert one_cut_for_set(scores, chars, 250) == (0.7, [[0], [0]])
    assert one_cut_for_set(scores, chars, 10_000) == (0.2, [[0, 1], [0, 1]])
    cut, kept = one_cut_for_set(scores, chars, 40)  # nothing is closer to 40 than 100
    assert math.isinf(cut) and kept == [[], []]


def test_one_cut_keeps_tied_scores_together():
    assert one_cut_for_set([[0.5, 0.5, 0.1]], [[100, 100, 100]], 120) == (0.5, [[0, 1]])


def test_fixed_share_keeps_the_best_within_the_share_of_each_pool():
    # 0.35 of 1,000 characters = 350: the best (300) fits, the next (400) does not, the 50 does.
    assert share_kept([400, 300, 50, 250], [0.8, 0.9, 0.1, 0.2], 0.35) == [1, 2]
    assert share_kept([400, 300], [0.8, 0.9], 0.0) == []


def outcome(n, *, chars, gold, cosine, bm25, scores, kept, cos_same, bm25_same, **more):
    after = sum(chars[i] for i in kept)
    return QuestionOutcome(
        item_id=str(n),
        question=f"q{n}",
        candidates=len(chars),
        kept=len(kept),
        pool_truncated=False,
        chars_before=sum(chars),
        chars_after=after,
        threshold=0.5,
        nothing_relevant=False,
        model_calls=0,
        cached_calls=0,
        prompt_tokens=0,
        seconds=0.1,
        answer_in_context_before=any(gold),
        answer_in_context_after=any(gold[i] for i in kept),
        baseline_answer_in_context_after=cos_same,
        baseline_bm25_answer_in_context_after=bm25_same,
        scores=tuple(scores),
        gold=tuple(gold),
        cosine=tuple(cosine),
        bm25=tuple(bm25),
        chars=tuple(chars),
        **more,
    )


QUESTIONS = (
    # The filter keeps the gold chunk (100 of 400 characters).
    outcome(
        1,
        chars=[100, 300],
        gold=[True, False],
        cosine=[0.6, 0.7],
        bm25=[2.0, 1.0],
        scores=[0.8, 0.1],
        kept=[0],
        cos_same=False,
        bm25_same=True,
    ),
    # The filter keeps 100 of 600 characters, without the gold one.
    outcome(
        2,
        chars=[100, 200, 300],
        gold=[False, False, True],
        cosine=[0.5, 0.2, 0.4],
        bm25=[1.0, 0.5, 3.0],
        scores=[0.6, 0.2, 0.3],
        kept=[0],
        cos_same=False,
        bm25_same=False,
    ),
)


def test_every_baseline_at_the_filters_characters():
    found = {b.name: b for b in baselines(QUESTIONS)}
    assert list(found) == [
        "all_retrieved",
        "cosine_same_chars_per_question",
        "bm25_same_chars_per_question",
        "cosine_one_cut_for_set",
        "cosine_fixed_share",
        "bm25_fixed_share",
    ]
    assert found["all_retrieved"].flags == (True, True) and found["all_retrieved"].chars == 1000
    # The filter kept 200 characters: by cosine, 0.7 (300) is closer to 200 than 0 is.
    one_cut = found["cosine_one_cut_for_set"]
    assert one_cut.extra == {"cut": 0.7} and one_cut.chars == 300 and one_cut.flags == (False, False)
    # 200 / 1000 = 0.2 of each pool: 80 of q1 (nothing fits), 120 of q2 (the 100).
    assert found["cosine_fixed_share"].extra == {"share": 0.2}
    assert found["cosine_fixed_share"].flags == (False, False) and found["cosine_fixed_share"].chars == 100
    assert found["bm25_fixed_share"].flags == (False, False) and found["bm25_fixed_share"].chars == 100


def test_the_summary_names_each_baseline_and_pairs_it_with_the_filter():
    summary = baselines_summary(QUESTIONS)
    cosine = summary["cosine_same_chars_per_question"]
    assert cosine["what"] == "cosine, same characters per question"
    assert cosine["answer_in_context"] == 0.0 and cosine["discordant"] == [1, 0] and cosine["p_vs_filter"] == 1.0
    assert summary["bm25_same_chars_per_question"]["discordant"] == [0, 0]
    assert summary["all_retrieved"]["discordant"] == [0, 1]
    assert summary["all_retrieved"]["context_chars_kept_share"] == 1.0
    assert summary["cosine_one_cut_for_set"]["context_chars_kept_share"] == 0.3
    assert "accuracy" not in summary["all_retrieved"]


def test_generated_answers_from_all_retrieved_are_paired_with_the_filters():
    import dataclasses

    graded = (
        dataclasses.replace(QUESTIONS[0], correct=True, all_retrieved_correct=False),
        dataclasses.replace(QUESTIONS[1], correct=False, all_retrieved_correct=False),
    )
    entry = baselines_summary(graded)["all_retrieved"]
    assert entry["accuracy"] == 0.0 and entry["filter_accuracy"] == 0.5 and entry["accuracy_graded"] == 2
    assert entry["accuracy_discordant"] == [1, 0] and entry["accuracy_p_vs_filter"] == 1.0


def test_no_answer_strings_no_baselines():
    import dataclasses

    claims = tuple(
        dataclasses.replace(q, answer_in_context_before=None, answer_in_context_after=None, gold=()) for q in QUESTIONS
    )
    assert baselines(claims) == [] and baselines_summary(claims) == {}
    assert curves(claims) == {} and points(claims) == {}


def test_the_report_summary_keeps_the_old_keys_beside_the_new_block():
    summary = EvalReport("popqa", QUESTIONS, "", 0.0, 0).summary()
    assert summary["baseline_cosine_answer_in_context_after"] == 0.0
    assert summary["baseline_bm25_answer_in_context_after"] == 0.5
    assert summary["baselines"]["bm25_same_chars_per_question"]["answer_in_context"] == 0.5
    assert summary["answer_strings"] is True and summary["fallback_rate"] == 0.0


def test_curves_and_points_share_their_axes():
    drawn = curves(QUESTIONS)
    assert set(drawn) == {
        "filter, its score cut swept",
        "cosine_one_cut_for_set",
        "cosine_fixed_share",
        "bm25_fixed_share",
    }
    # Share 0 keeps nothing; share 1 keeps every answer.
    assert drawn["cosine_fixed_share"][0] == (0.0, 0.0) and drawn["cosine_fixed_share"][-1] == (1.0, 1.0)
    assert points(QUESTIONS) == {
        "filter": (0.2, 0.5),
        "cosine_same_chars_per_question": (0.2, 0.0),
        "bm25_same_chars_per_question": (0.2, 0.5),
        "all_retrieved": (1.0, 1.0),
    }


def test_a_file_without_per_candidate_signals_keeps_the_baselines_it_can():
    import dataclasses

    old = tuple(dataclasses.replace(q, cosine=(), bm25=(), chars=()) for q in QUESTIONS)
    assert [b.name for b in baselines(old)] == [
        "all_retrieved",
        "cosine_same_chars_per_question",
        "bm25_same_chars_per_question",
    ]
    assert curves(old) == {}


def test_the_printed_table_names_each_baseline():
    from chunkrag_eval.report import format_baselines

    text = format_baselines(EvalReport("popqa", QUESTIONS, "", 0.0, 0).summary())
    lines = text.splitlines()
    assert lines[0] == "answer in context, filter: 0.500 at 20% of the characters"
    assert lines[2] == (
        "  cosine, same characters per question [cosine_same_chars_per_question]: 0.000 at 20%; "
        "filter only 1, baseline only 0, p = 1"
    )
    assert "[cosine_one_cut_for_set, cut 0.7]" in lines[4]
    assert "[bm25_fixed_share, 20% of each pool]" in lines[6]
    assert format_baselines({"answer_strings": False, "baselines": {}}) == (
        "no gold answer strings in this set: no answer-in-context baselines"
    )
