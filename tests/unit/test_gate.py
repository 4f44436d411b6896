"""The gate: is anything retrieved relevant at all? Literal numbers, a
scripted relevance model (a unit-test double), calibration files of the test's own."""

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_filter.pipeline import FilterOptions, run_filter
from chunkrag_filter.processors.calibration import (
    Calibrated,
    CalibrationError,
    Configured,
    LogisticModel,
    load_calibration,
    parse_calibration,
    write_calibration,
)
from chunkrag_filter.processors.gate import GateOutcome, gate_features
from search_extension.ask import answer_for


def chunk(i, text, cosine):
    return Chunk("d", i, text, 0, len(text), score=1.0 - i / 10, stage_scores={"cosine": cosine, "bm25": 1.0 - i / 4})


def test_features_are_absolute_the_best_over_the_candidates():
    texts = ["Henry Feilden was a Conservative politician.", "Lunch is at noon.", "Henry went home."]
    features = gate_features(
        "What is Henry Feilden's occupation?", texts, [{"cosine": 0.61}, {"cosine": 0.05}, {}], [1.5, -3.0]
    )
    # content words: henry, feilden, occupation (2 of 3 in the first); names: henry, feilden (both)
    assert features == {
        "best_cosine": 0.61,
        "best_term_overlap": pytest.approx(2 / 3),
        "best_entity_overlap": 1.0,
        "names_entities": 1.0,
        "best_relevance_logit": 1.5,
    }
    judged = gate_features("q", texts, [{"cosine": 0.61}], judge_cosines=[0.42, 0.7, 0.1])
    assert judged["best_judge_cosine"] == 0.7
    lower = gate_features("who sang it", ["nothing here"], [{"cosine": 0.2}])
    assert lower["names_entities"] == 0.0 and lower["best_entity_overlap"] == 0.0
    assert gate_features("q", [], [])["best_cosine"] == 0.0


def test_the_outcome_says_why_in_words():
    outcome = GateOutcome(
        "retrieval",
        0.031,
        0.2,
        {"best_cosine": 0.21, "best_term_overlap": 0.5, "best_entity_overlap": 0.0, "names_entities": 1.0},
    )
    assert not outcome.passed
    assert outcome.reason() == (
        "no candidate looks relevant: P(relevant) 0.031 < cut 0.2, best cosine 0.21, "
        "0% of the query's names in the best candidate, 50% of its words"
    )
    assert GateOutcome("retrieval", 0.2, 0.2).passed  # at the cut passes
    assert outcome.to_json()["passed"] is False


GATE = Calibrated(LogisticModel(("best_cosine",), (20.0,), -8.0), 0.5)  # passes above cosine 0.4
GATE_RELEVANCE = Calibrated(LogisticModel(("best_relevance_logit",), (1.0,), 0.0), 0.5)  # passes at log-odds >= 0


@pytest.fixture
def calibration(tmp_path):
    retrieval = Calibrated(LogisticModel(("cosine",), (1.0,), 0.0), 0.0)
    relevance = Calibrated(LogisticModel(("relevance_logit",), (1.0,), 0.0), 0.0)
    path = write_calibration(tmp_path / "c.json", retrieval, None, {}, relevance, GATE, GATE_RELEVANCE)
    yield Configured(str(path))
    load_calibration.cache_clear()


class Scripted:
    """P(relevant) by text; counts the texts it read."""

    def __init__(self, by_text):
        self.by_text, self.read = by_text, []

    def score(self, query, texts):
        self.read += list(texts)
        return [self.by_text[t] for t in texts]


class NoModel:
    def complete(self, request):
        raise AssertionError("no model call when nothing is relevant")


def test_below_the_gate_nothing_is_kept_whatever_the_fallback_and_no_model_is_called(calibration):
    candidates = [chunk(0, "Lunch is at noon.", 0.31), chunk(1, "Invoices go out monthly.", 0.12)]
    options = FilterOptions(gate="retrieval", calibration=calibration, fallback="top_k")
    result = run_filter("how do I rotate the API keys?", candidates, model=NoModel(), options=options)
    assert result.kept == () and result.nothing_relevant
    assert [d.reason for d in result.decisions] == ["nothing_relevant", "nothing_relevant"]
    assert result.gate.probability == pytest.approx(1 / (1 + 2.718281828 ** -(20 * 0.31 - 8)), abs=1e-5)
    assert result.nothing_relevant_reason.startswith("no candidate looks relevant: P(relevant) 0.142 < cut 0.5")
    answer = answer_for("how do I rotate the API keys?", result, None, NoModel())
    assert answer.text == "NOT FOUND" and answer.calls == 0


def test_above_the_gate_the_filter_runs_as_without_it(calibration):
    candidates = [chunk(0, "To rotate an API key, press Rotate.", 0.72), chunk(1, "Lunch is at noon.", 0.1)]
    with_gate = run_filter(
        "rotate the API key",
        candidates,
        model=NoModel(),
        options=FilterOptions(gate="retrieval", calibration=calibration),
    )
    without = run_filter(
        "rotate the API key", candidates, model=NoModel(), options=FilterOptions(gate="off", calibration=calibration)
    )
    assert with_gate.gate.passed and not with_gate.nothing_relevant
    assert [c.chunk_id for c in with_gate.kept] == [c.chunk_id for c in without.kept]
    assert without.gate is None
    # a cut of the caller's own overrides the file's
    strict = run_filter(
        "rotate the API key",
        candidates,
        model=NoModel(),
        options=FilterOptions(gate="retrieval", gate_cut=0.9999, calibration=calibration),
    )
    assert strict.kept == () and strict.gate.cut == 0.9999


def test_chunks_that_were_not_retrieved_are_not_gated(calibration):
    # No candidate carries a cosine to the query (chunks made by hand): nothing for the gate to read.
    bare = [Chunk("d", 0, "Lunch is at noon.", 0, 17), Chunk("d", 1, "Invoices go out monthly.", 0, 24)]
    options = FilterOptions(gate="retrieval", calibration=calibration)
    result = run_filter("how do I rotate the API keys?", bare, model=NoModel(), options=options)
    assert result.gate is None and not result.nothing_relevant


def test_the_crossencoder_gate_reads_only_the_best_few_or_reuses_scores(calibration):
    texts = ["To rotate an API key, press Rotate.", "Lunch is at noon.", "Invoices.", "Parking."]
    candidates = [chunk(i, t, 0.3) for i, t in enumerate(texts)]
    model = Scripted({texts[0]: 0.8, texts[1]: 0.1, texts[2]: 0.1, texts[3]: 0.1})
    options = FilterOptions(gate="crossencoder", gate_top=2, calibration=calibration)
    result = run_filter("rotate the key", candidates, model=NoModel(), options=options, relevance_model=model)
    assert model.read == texts[:2]  # the best two by retrieval, once
    assert result.gate.passed and result.gate.features["best_relevance_logit"] == pytest.approx(1.386294, abs=1e-5)
    # with relevance: crossencoder every candidate is scored once, and the gate reuses those scores
    model.read = []
    both = FilterOptions(gate="crossencoder", relevance="crossencoder", gate_top=2, calibration=calibration)
    run_filter("rotate the key", candidates, model=NoModel(), options=both, relevance_model=model)
    assert model.read == texts


def test_a_gate_model_reads_only_gate_features_and_a_missing_one_is_named(tmp_path):
    payload = {
        "format": "chunkrag-calibration/1",
        "models": {
            "retrieval": {"features": ["cosine"], "weights": [1.0], "bias": 0.0, "cut": 0.1},
            "gate": {"features": ["cosine"], "weights": [1.0], "bias": 0.0, "cut": 0.1},
        },
    }
    with pytest.raises(CalibrationError, match="models.gate must read only the gate's features"):
        parse_calibration(payload, "c.json")
    payload["models"]["gate"] = {"features": ["best_relevance_logit"], "weights": [1.0], "bias": 0.0, "cut": 0.1}
    with pytest.raises(CalibrationError, match="models.gate must not read the relevance model"):
        parse_calibration(payload, "c.json")
    payload["models"]["gate"] = {"features": ["best_cosine"], "weights": [1.0], "bias": 0.0, "cut": 0.1}
    payload["models"]["retrieval"] = {"features": ["best_cosine"], "weights": [1.0], "bias": 0.0, "cut": 0.1}
    with pytest.raises(CalibrationError, match="models.retrieval scores chunks"):
        parse_calibration(payload, "c.json")
    payload["models"]["retrieval"] = {"features": ["cosine"], "weights": [1.0], "bias": 0.0, "cut": 0.1}
    parsed = parse_calibration(payload, "c.json")
    with pytest.raises(CalibrationError, match="holds no gate_relevance model for gate \\[crossencoder\\]"):
        parsed.for_gate("crossencoder")
    assert parsed.for_gate("retrieval").cut == 0.1


def test_the_training_cut_keeps_the_share_of_answerable_questions_asked():
    from chunkrag_eval.measures import cut_keeping

    probabilities = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.01]
    labels = [True] * 10 + [False]
    # 10 answerable: keeping 90% allows one to be turned away, so the cut is the second lowest
    assert cut_keeping(probabilities, labels, keep=0.9) == 0.1
    assert cut_keeping(probabilities, labels, keep=1.0) == 0.05
    with pytest.raises(ValueError):
        cut_keeping([0.5], [False], keep=0.98)
