"""The calibration file, the context features and the answer-kept curves,
with literal numbers."""

from __future__ import annotations

import json
import math

import pytest

from chunkrag_eval.calibrate import Collected, LabelledDataError, fit_model, read_labelled_jsonl
from chunkrag_eval.curves import (
    Flat,
    PoolQuestion,
    budget_curve,
    chars_for_kept,
    filter_curve,
    filter_point,
    highest_cut,
    kept_at_chars,
)
from chunkrag_filter.processors.calibration import (
    CALIBRATION_FORMAT,
    Calibrated,
    CalibrationError,
    LogisticModel,
    load_calibration,
    parse_calibration,
    write_calibration,
)
from chunkrag_filter.processors.features import content_terms, context_features, entity_terms, passage_ids

MODEL = {"features": ["cosine", "bm25"], "weights": [2.0, 1.0], "bias": -1.5, "cut": 0.3}


def payload(**models):
    return {"format": CALIBRATION_FORMAT, "models": models}


def test_a_calibration_file_round_trips_and_scores_with_its_weights(tmp_path):
    path = write_calibration(
        tmp_path / "c.json", Calibrated(LogisticModel(("cosine", "bm25"), (2.0, 1.0), -1.5), 0.3), None, {"note": 1}
    )
    loaded = load_calibration(str(path))
    assert loaded.retrieval.cut == 0.3 and loaded.judged is None and loaded.about == {"note": 1}
    # sigmoid(-1.5 + 2 * 0.5 + 1 * 1) = sigmoid(0.5) = 0.6225
    assert loaded.retrieval.model.probability({"cosine": 0.5, "bm25": 1.0}) == pytest.approx(0.622459, abs=1e-6)
    with pytest.raises(CalibrationError, match="no model for the judge"):
        loaded.for_judging(True)
    assert loaded.for_judging(False) is loaded.retrieval


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"format": "other"}, "not a calibration file"),
        (payload(judged=MODEL), 'at least a "retrieval"'),
        (payload(retrieval={**MODEL, "weights": [1.0]}), "one weight per feature"),
        (payload(retrieval={**MODEL, "features": ["cosine", "nope"]}), "unknown feature"),
        (payload(retrieval={**MODEL, "cut": 1.5}), "cut must be a probability"),
        (payload(retrieval={**MODEL, "bias": math.inf}), "finite"),
        (payload(retrieval={**MODEL, "features": ["judge", "bm25"]}), "must not read the judge"),
        (payload(retrieval={"features": ["cosine"]}), "missing or malformed"),
    ],
)
def test_a_calibration_the_filter_could_not_use_is_refused_with_the_reason(bad, message):
    with pytest.raises(CalibrationError, match=message):
        parse_calibration(bad, "f.json")


def test_unreadable_calibration_files_name_the_file(tmp_path):
    with pytest.raises(CalibrationError, match="cannot read calibration file"):
        load_calibration(str(tmp_path / "missing.json"))
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(CalibrationError, match="is not JSON"):
        load_calibration(str(broken))


def test_the_shipped_file_loads_with_both_models():
    shipped = load_calibration(None)
    assert not shipped.retrieval.model.uses_judge and shipped.judged.model.uses_judge
    assert 0.0 < shipped.retrieval.cut < 1.0


def test_query_terms_and_entities():
    assert content_terms("Who is the mayor of Paris in 2020?") == {"mayor", "paris", "2020"}
    assert entity_terms("Who is the mayor of Paris in 2020?") == {"paris", "2020"}
    assert entity_terms("What is it") == set()


def test_passages_break_at_a_blank_line_or_a_missing_position():
    # d:0 d:1 (same paragraph), d:2 (lead holds a blank line), d:4 (gap), e:0
    ids = passage_ids(["d", "d", "d", "d", "e"], [0, 1, 2, 4, 0], [None, " ", "\n\n", " ", None])
    assert ids[0] == ids[1] and len({ids[1], ids[2], ids[3], ids[4]}) == 4


def test_context_features_of_three_candidates():
    rows = context_features(
        "mayor of Paris",
        ["Paris has a mayor.", "It rains.", "Berlin too."],
        ["Paris", "", ""],
        ["d", "d", "e"],
        [0, 1, 0],
        [None, " ", None],
        [{"cosine": 0.8, "bm25": 1.0}, {"cosine": 0.4, "bm25": 0.2}, {"cosine": 0.5, "bm25": 0.0}],
    )
    first, second, third = rows
    assert first["term_overlap"] == 1.0 and first["entity_overlap"] == 1.0 and first["header_overlap"] == 0.5
    assert second["term_overlap"] == 0.0 and second["nb_cosine"] == 0.8 and first["nb_cosine"] == 0.4
    assert third["nb_cosine"] == 0.5  # no neighbour retrieved: its own cosine
    assert second["passage_cosine_max"] == 0.8 and second["passage_cosine_mean"] == pytest.approx(0.6)
    assert second["passage_bm25_max"] == 1.0 and third["passage_gap"] == pytest.approx(-0.3)
    assert first["inv_position"] == 1.0 and second["inv_position"] == 0.5


QUESTIONS = [
    PoolQuestion((100, 100), (True, False)),
    PoolQuestion((50, 150), (False, True), dropped_chars=100),
    PoolQuestion((200,), (False,)),  # nothing relevant in the pool
]
SCORES = [[0.9, 0.2], [0.6, 0.4], [0.1]]


def test_a_filter_point_counts_answers_characters_and_nothing_relevant():
    p = filter_point(QUESTIONS, SCORES, 0.5)
    # kept 100 + 50 of 700; answer kept for the first (of two with gold); the third passes nothing
    assert (p.chars, p.kept, p.nothing, p.nothing_precision) == (150 / 700, 0.5, 1 / 3, 1.0)
    fallback = filter_point(QUESTIONS, SCORES, 0.95, fallback_k=1)
    assert fallback.chars == 350 / 700 and fallback.kept == 0.5 and fallback.nothing == 1.0
    flat = Flat.of(QUESTIONS).at(__import__("numpy").array([0.9, 0.2, 0.6, 0.4, 0.1]), 0.5)
    assert flat == p


def test_curves_are_read_at_a_character_share_and_at_a_recall():
    curve = filter_curve(QUESTIONS, SCORES, [0.0, 0.3, 0.5, 1.0])
    assert [(round(p.chars, 4), p.kept) for p in curve] == [(0.8571, 1.0), (0.4286, 1.0), (0.2143, 0.5), (0.0, 0.0)]
    assert kept_at_chars(curve, 0.25) == pytest.approx(0.5 + 0.5 * (0.25 - 150 / 700) / (300 / 700 - 150 / 700))
    assert chars_for_kept(curve, 0.9) == pytest.approx(150 / 700 + (300 / 700 - 150 / 700) * 0.4 / 0.5)
    assert chars_for_kept(curve[2:], 0.9) is None
    budgets = budget_curve(QUESTIONS, [[1.0, 0.0], [0.0, 1.0], [1.0]], [0.5])
    # half of each pool: 100 of 200, 150 of 300 (the gold chunk), 100 of 200 (the chunk is 200: nothing)
    assert budgets[0].chars == 250 / 700 and budgets[0].kept == 1.0


def test_the_highest_cut_keeping_the_target_on_the_mean_of_the_sets():
    assert highest_cut([(QUESTIONS, SCORES)], [0.0, 0.3, 0.5, 1.0], 0.9) == 0.3
    assert highest_cut([(QUESTIONS, SCORES)], [0.5, 1.0], 0.9) == 0.5  # none reaches it: the lowest


def test_a_model_and_its_cut_fitted_on_labelled_candidates():
    collected = [
        Collected("s", str(i), tuple({"cosine": c} for c in cos), (100,) * len(cos), gold, 0, False)
        for i, (cos, gold) in enumerate(
            [((0.9, 0.1), (True, False)), ((0.8, 0.3), (True, False)), ((0.2, 0.7), (False, True)), ((0.6,), (False,))]
        )
    ]
    fitted = fit_model(collected, ("cosine",), target=0.9)
    assert fitted.model.names == ("cosine",) and fitted.model.weights[0] > 0
    p = filter_point(
        [c.pool() for c in collected],
        [[fitted.model.probability(f) for f in c.features] for c in collected],
        fitted.cut,
    )
    assert p.kept >= 0.9
    with pytest.raises(LabelledDataError, match="both relevant and irrelevant"):
        fit_model(collected[3:], ("cosine",))


def test_labelled_jsonl_skips_unusable_lines_and_refuses_an_empty_file(tmp_path):
    path = tmp_path / "mine.jsonl"
    good = {"question": "q?", "documents": [{"text": "Some text.", "title": "T"}, "Plain text."], "answers": ["text"]}
    path.write_text("\n".join([json.dumps(good), "not json", json.dumps({"question": "q", "documents": []})]) + "\n")
    queries, skipped = read_labelled_jsonl(path)
    assert len(queries) == 1 and [s.split(":")[0] for s in skipped] == ["line 2", "line 3"]
    assert [d.title for d in queries[0].docs] == ["T", ""] and queries[0].gold("more text here")
    path.write_text("not json\n")
    with pytest.raises(LabelledDataError, match="no usable question"):
        read_labelled_jsonl(path)


def test_a_calibration_reading_context_features_is_scored_by_the_filter(tmp_path):
    from chunkrag_core.chunk import Chunk
    from chunkrag_filter.pipeline import FilterOptions, run_filter
    from chunkrag_filter.processors.calibration import Configured

    model = LogisticModel(("term_overlap", "cosine"), (4.0, 1.0), -2.0)
    path = write_calibration(tmp_path / "c.json", Calibrated(model, 0.5), None)
    chunks = [
        Chunk("d", i, text, 0, len(text), stage_scores={"cosine": 0.5})
        for i, text in enumerate(["The mayor of Paris.", "Unrelated words."])
    ]
    result = run_filter(
        "mayor Paris", chunks, model=None, options=FilterOptions(gate="off", calibration=Configured(str(path)))
    )
    scored = {d.chunk.chunk_id: d.chunk.stage_scores["calibrated"] for d in result.decisions}
    # sigmoid(-2 + 4 * 1 + 0.5) = 0.924142 and sigmoid(-2 + 0 + 0.5) = 0.182426; the cut 0.5 from the file
    assert scored == {"d:0": pytest.approx(0.924142, abs=1e-6), "d:1": pytest.approx(0.182426, abs=1e-6)}
    assert [c.chunk_id for c in result.kept] == ["d:0"] and result.threshold.value == 0.5
