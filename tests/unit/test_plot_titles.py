"""Plot titles name the filter that ran, not the judging method a run would
have used had its judge been on."""

from __future__ import annotations

import dataclasses

import pytest

from chunkrag_eval.plots import method_title, plot_title, write_plots
from chunkrag_eval.runner import EvalReport

# The options block `chunkrag eval` writes for the default filter.
EVAL_DEFAULT = {
    "method": "listwise",
    "orders": 1,
    "judge_top": 0,
    "calibrated": True,
    "prior_weight": 0.0,
    "threshold": "fixed",
    "fixed_threshold": 0.4,
}


@pytest.mark.parametrize(
    ("options", "title"),
    [
        (EVAL_DEFAULT, "retrieval signals (no judge), calibrated, cut at 0.4"),
        ({**EVAL_DEFAULT, "judge_top": 9}, "LLM judge, listwise (best 9), calibrated, cut at 0.4"),
        (
            {**EVAL_DEFAULT, "judge_top": 9, "orders": 2},
            "LLM judge, listwise (best 9), both orders, calibrated, cut at 0.4",
        ),
        (
            {**EVAL_DEFAULT, "judge_top": None, "calibrated": False, "threshold": "dynamic"},
            "LLM judge, listwise (every candidate), Algorithm 1 threshold",
        ),
        (
            {**EVAL_DEFAULT, "method": "multistage", "judge_top": None, "calibrated": False, "threshold": "llm"},
            "LLM judge, multistage (every candidate), LLM-chosen threshold",
        ),
        (
            {**EVAL_DEFAULT, "threshold": "relative", "fixed_threshold": 0.5},
            "retrieval signals (no judge), calibrated, cut at 0.5 of the best",
        ),
        # bench/judge_study.py collect: the shape of its options block.
        (
            {"method": "listwise", "judge": "none", "head": 9, "head_orders": 2, "threshold": "dynamic"},
            "retrieval signals (no judge), Algorithm 1 threshold",
        ),
        (
            {"method": "listwise", "judge": "cascade", "head": 9, "head_orders": 1, "threshold": "dynamic"},
            "LLM judge, listwise (best 9), Algorithm 1 threshold",
        ),
        # Older runs recorded only the method, and judged every candidate with it.
        (
            {"method": "listwise", "prior_weight": 0.5, "threshold": "dynamic"},
            "LLM judge, listwise, prior weight 0.5, Algorithm 1 threshold",
        ),
        (None, ""),
    ],
)
def test_method_title_names_what_ran(options, title):
    assert method_title(options) == title


def test_a_no_judge_run_is_never_titled_by_its_judging_method():
    assert "listwise" not in method_title(EVAL_DEFAULT)


def test_plot_title_puts_the_method_on_its_own_line():
    report = EvalReport("popqa", (), "", 0.0, 0)
    assert (
        plot_title(report, "held-out", EVAL_DEFAULT)
        == "popqa (0 questions) - held-out\nretrieval signals (no judge), calibrated, cut at 0.4"
    )
    assert plot_title(report) == "popqa (0 questions)"


def test_write_plots_titles_the_figures(tmp_path, monkeypatch):
    axes = pytest.importorskip("matplotlib.axes")
    titles = []
    original = axes.Axes.set_title
    monkeypatch.setattr(
        axes.Axes, "set_title", lambda self, text, *a, **k: (titles.append(text), original(self, text, *a, **k))[1]
    )
    report = EvalReport("popqa", (), "", 0.0, 0)
    written = write_plots(report, tmp_path, "run", EVAL_DEFAULT)
    assert [path.name for path in written] == ["kept_vs_threshold.png"]
    assert titles == [
        (
            "Chunk scores against the cut\npopqa (0 questions) - run\nretrieval signals (no judge), calibrated, "
            "cut at 0.4\nthe top-3 fallback never ran"
        )
    ]


def test_a_no_judge_options_block_names_no_method():
    """`chunkrag eval` records no method, place or model when no judge ran."""
    recorded = {**EVAL_DEFAULT, "judged": False, "method": None, "orders": None, "judge": None, "model": None}
    assert method_title(recorded) == "retrieval signals (no judge), calibrated, cut at 0.4"


def _outcomes(fallback_rows=False):
    from tests.unit.test_baselines import QUESTIONS

    if not fallback_rows:
        return QUESTIONS
    rows = ({"reason": "fallback"}, {"reason": "below_threshold"})
    return (dataclasses.replace(QUESTIONS[0], rows=rows), QUESTIONS[1])


def test_the_fallback_is_counted_in_the_figures():
    from chunkrag_eval.plots import fallback_note

    report = EvalReport("popqa", _outcomes(fallback_rows=True), "", 0.0, 0)
    assert fallback_note(report, {"fallback_k": 3}) == (
        "top-3 fallback kept chunks in 1 of 2 questions (none passed the cut)"
    )
    assert fallback_note(EvalReport("popqa", _outcomes(), "", 0.0, 0), None) == "the top-3 fallback never ran"


def test_a_set_with_answer_strings_gets_every_figure(tmp_path):
    pytest.importorskip("matplotlib")
    report = EvalReport("popqa", _outcomes(), "", 0.0, 0)
    notes = []
    written = write_plots(report, tmp_path, "", EVAL_DEFAULT, on_note=notes.append)
    assert [path.name for path in written] == [
        "kept_vs_threshold.png",
        "scores_by_gold.png",
        "context_budget.png",
        "answers_vs_chars.png",
    ]
    assert notes == []


def test_a_set_without_answer_strings_says_what_is_not_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    claims = tuple(
        dataclasses.replace(q, answer_in_context_before=None, answer_in_context_after=None, gold=(), correct=True)
        for q in _outcomes()
    )
    notes = []
    written = write_plots(EvalReport("pubhealth", claims, "", 0.0, 0), tmp_path, "", EVAL_DEFAULT, notes.append)
    assert [path.name for path in written] == ["kept_vs_threshold.png", "accuracy.png"]
    assert notes == [
        "pubhealth has no gold answer strings: scores_by_gold.png, context_budget.png and answers_vs_chars.png "
        "are not drawn"
    ]
