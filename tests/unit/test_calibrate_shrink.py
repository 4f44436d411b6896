"""`chunkrag calibrate` on few questions: the fit is blended with the shipped
calibration, the command warns, and its progress reads line by line."""

from __future__ import annotations

import io

import pytest

from chunkrag_cli.main import progress_printer
from chunkrag_eval.calibrate import MIN_QUESTIONS, few_questions_warning, fit_weight, shrink_toward
from chunkrag_filter.processors.calibration import Calibrated, LogisticModel


def test_the_fit_weighs_its_share_of_the_minimum():
    assert MIN_QUESTIONS == 30
    assert fit_weight(3) == pytest.approx(0.1)
    assert fit_weight(15) == 0.5
    assert fit_weight(30) == 1.0 and fit_weight(300) == 1.0
    assert fit_weight(0) == 0.0


def test_shrinking_blends_weights_bias_and_cut():
    fitted = Calibrated(LogisticModel(("cosine", "bm25"), (10.0, 2.0), -4.0), 0.725)
    shipped = Calibrated(LogisticModel(("cosine", "inv_rank"), (6.0, 1.0), -5.0), 0.09)
    blended = shrink_toward(fitted, shipped, 0.1)
    assert blended.model.names == ("cosine", "bm25", "inv_rank")
    # 0.1 * fit + 0.9 * shipped; a feature one model lacks weighs 0 there.
    assert blended.model.weights == pytest.approx((0.1 * 10 + 0.9 * 6, 0.1 * 2 + 0.9 * 0, 0.1 * 0 + 0.9 * 1))
    assert blended.model.weights == pytest.approx((6.4, 0.2, 0.9))
    assert blended.model.bias == pytest.approx(-4.9)
    assert blended.cut == pytest.approx(0.1 * 0.725 + 0.9 * 0.09)  # 0.1535
    assert shrink_toward(fitted, shipped, 1.0) == fitted
    zero = shrink_toward(fitted, shipped, 0.0)
    assert dict(zip(zero.model.names, zero.model.weights)) == {"cosine": 6.0, "bm25": 0.0, "inv_rank": 1.0}
    assert zero.cut == 0.09


def test_few_questions_are_warned_about():
    assert few_questions_warning(3) == (
        "only 3 labelled questions, fewer than the 30 a fit stands on alone: the fitted weights and cut are "
        "blended with the shipped calibration's, the fit weighing 0.10 (3/30)"
    )
    assert few_questions_warning(1).startswith("only 1 labelled question,")
    assert few_questions_warning(30) is None


def test_progress_is_one_line_each_off_a_terminal():
    out = io.StringIO()
    show = progress_printer(out, "questions collected")
    for n in (1, 2, 3):
        show(n, 3)
    assert out.getvalue() == "questions collected 1/3\nquestions collected 2/3\nquestions collected 3/3\n"


def test_progress_on_a_terminal_rewrites_one_line_and_ends_it():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    show = progress_printer(out, "n")
    for n in (1, 2, 3):
        show(n, 3)
    assert out.getvalue() == "\rn 1/3\rn 2/3\rn 3/3\n"


def _question(query_id, texts, probabilities, answers):
    import math

    from chunkrag_eval.calibrate import Collected

    # With the model below (one weight 1 on cosine, bias 0) a candidate's
    # probability is sigmoid(cosine): cosine = logit(p).
    features = tuple({"cosine": math.log(p / (1 - p))} for p in probabilities)
    return Collected(
        "mine", query_id, features, tuple(len(t) for t in texts), (), 0, False, f"q{query_id}", answers, tuple(texts)
    )


def test_the_accuracy_target_takes_the_highest_cut_within_a_point_of_everything():
    from chunkrag_eval.calibrate import accuracy_cut

    model = LogisticModel(("cosine",), (1.0,), 0.0)
    collected = [
        _question("1", ["Paris is the capital.", "noise a", "noise b"], [0.6, 0.04, 0.02], ("Paris",)),
        _question("2", ["noise c", "Rome it is.", "noise d"], [0.6, 0.08, 0.01], ("Rome",)),
        _question("3", ["no answers here"], [0.5], ()),  # not graded: no answer strings
    ]
    calls = []

    def grade(question, passages, answers):
        calls.append((question, tuple(passages)))
        return any(a in p for p in passages for a in answers)

    cut, about = accuracy_cut(collected, model, grade)
    # Every candidate: both right. 0.5 ... 0.1 keep only q2's noise (0.5); 0.07 keeps Rome too.
    assert cut == 0.07
    assert about == {
        "questions": 2,
        "every_candidate": 1.0,
        "tried": [
            {"cut": 0.5, "accuracy": 0.5},
            {"cut": 0.3, "accuracy": 0.5},
            {"cut": 0.2, "accuracy": 0.5},
            {"cut": 0.15, "accuracy": 0.5},
            {"cut": 0.1, "accuracy": 0.5},
            {"cut": 0.07, "accuracy": 1.0},
        ],
    }
    # One answer per question and distinct kept set: everything (2), q1's best (1), q2's best, then its best two.
    assert len(calls) == 5
    assert ("q2", ("noise c", "Rome it is.")) in calls
    # A looser tolerance stops at the highest cut.
    assert accuracy_cut(collected, model, grade, tolerance=0.6)[0] == 0.5


def test_the_accuracy_target_needs_answer_strings():
    from chunkrag_eval.calibrate import LabelledDataError, accuracy_cut

    with pytest.raises(LabelledDataError, match="answers"):
        accuracy_cut([_question("1", ["x"], [0.5], ())], LogisticModel(("cosine",), (1.0,), 0.0), lambda *a: True)


def test_the_target_flag_reads_a_share_or_accuracy():
    from chunkrag_cli.main import _calibration_target

    assert _calibration_target("0.92") == 0.92 and _calibration_target("accuracy") == "accuracy"
    assert _calibration_target("1.5") is None and _calibration_target("most") is None


def test_the_accuracy_targets_answers_are_counted_line_by_line():
    from chunkrag_cli.main import _counted

    out = io.StringIO()
    grade = _counted(lambda question, passages, answers: question == "a", out)
    assert grade("a", [], ()) is True and grade("b", [], ()) is False
    assert out.getvalue() == "answers written 1 (right)\nanswers written 2 (wrong)\n"
