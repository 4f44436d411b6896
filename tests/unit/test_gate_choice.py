"""The default gate's choosing rule (chunkrag_eval/gate_choice.py) with literal rows."""

from __future__ import annotations

import pytest

from chunkrag_eval import gate_choice as rule
from chunkrag_eval.gate_choice import GateAsked


class Fixed:
    """A gate model whose probability is the best cosine (the test's stand-in for a fitted model)."""

    def probability(self, features):
        return features["best_cosine"]


MODELS = {"retrieval": Fixed(), "crossencoder": Fixed()}


def row(set_, kind, cosine, holds=True, n=0):
    features = {"best_cosine": cosine}
    return {
        "key": f"{set_}:{kind}:{n}",
        "set": set_,
        "kind": kind,
        "features@8": features,
        "features@20": features,
        "holds@8": holds if kind == "answerable" else None,
        "holds@20": holds if kind == "answerable" else None,
    }


def test_holds_answer_reads_own_documents_answers_and_phrases():
    asked = GateAsked("nq", "answerable", "1", "q", "open", own=("nq-1",), answers=("Paris",))
    assert rule.holds_answer(asked, "nq-1", "It is in Paris.")
    assert not rule.holds_answer(asked, "nq-2", "It is in Paris.")
    assert not rule.holds_answer(asked, "nq-1", "It is in Parisian hands.")
    phrase = GateAsked("samples", "answerable", "0", "q", "samples", phrases=("Life,  Liberty",))
    assert rule.holds_answer(phrase, "any", "rights: life, liberty and the pursuit")
    pool = GateAsked("pubhealth", "answerable", "7", "claim", "open", own=("pubhealth-7",))
    assert rule.holds_answer(pool, "pubhealth-7", "whatever it says")


def test_sign_test_makes_five_turned_away_significant():
    assert rule.sign_test_p(4) == 0.0625
    assert rule.sign_test_p(5) == 0.03125


def test_evaluate_counts_turned_away_lost_and_caught():
    rows = [row("nq", "answerable", 0.5, n=i) for i in range(8)]
    rows += [row("nq", "answerable", 0.1, holds=False, n=8), row("nq", "answerable", 0.1, holds=True, n=9)]
    rows += [row("popqa", "absent", 0.05, n=1), row("popqa", "absent", 0.4, n=2)]
    out = rule.evaluate(rows, ("cosine", 0.2), MODELS)
    assert out["answerable"]["nq"] == {
        "questions": 10,
        "turned_away": 2,
        "lost": 1,
        "held": 9,
        "turned_away_share": 0.2,
        "sign_test_p": 0.25,
    }
    assert out["unanswerable"]["absent"] == {"questions": 2, "nothing_relevant": 1, "share": 0.5}
    off = rule.evaluate(rows, ("off", None), MODELS)
    assert off["answerable"]["nq"]["turned_away"] == 0 and off["unanswerable"]["absent"]["share"] == 0.0


def sets_of(cosines_by_set):
    rows = []
    for set_, cosines in cosines_by_set.items():
        rows += [row(set_, "answerable", c, n=i) for i, c in enumerate(cosines)]
    return rows


def test_eligible_needs_at_most_one_percent_no_significant_loss_and_every_sample():
    fine = {name: [0.9] * 500 for name in rule.ANSWERABLE_SETS} | {rule.SAMPLE_SET: [0.9] * 8}
    evaluated = rule.evaluate(sets_of(fine), ("cosine", 0.2), MODELS)
    assert rule.eligible(evaluated) == (True, [])
    # four of 500 turned away: 0.8%, p 0.0625: eligible; five (1%): p 0.03: not
    four = fine | {"nq": [0.1] * 4 + [0.9] * 496}
    assert rule.eligible(rule.evaluate(sets_of(four), ("cosine", 0.2), MODELS))[0]
    five = fine | {"nq": [0.1] * 5 + [0.9] * 495}
    ok, why = rule.eligible(rule.evaluate(sets_of(five), ("cosine", 0.2), MODELS))
    assert not ok and why == ["nq: 5 turned away, p 0.03125 against the gate off"]
    # two of 100 turned away is over 1% though not significant
    small = fine | {"wikiqa": [0.1] * 2 + [0.9] * 98}
    ok, why = rule.eligible(rule.evaluate(sets_of(small), ("cosine", 0.2), MODELS))
    assert not ok and why == ["wikiqa: turned away 2 of 100"]
    sample = fine | {rule.SAMPLE_SET: [0.1] + [0.9] * 7}
    ok, why = rule.eligible(rule.evaluate(sets_of(sample), ("cosine", 0.2), MODELS))
    assert not ok and why == ["sample questions turned away: 1"]


def test_choose_takes_the_eligible_candidate_catching_most(monkeypatch):
    monkeypatch.setattr(rule, "CANDIDATES", (("off", None), ("cosine", 0.2), ("cosine", 0.3), ("retrieval", 0.2)))
    answerable = {name: [0.5] * 100 for name in rule.ANSWERABLE_SETS} | {rule.SAMPLE_SET: [0.5] * 8}
    rows = sets_of(answerable)
    rows += [row("squad", "in_article", c, n=i) for i, c in enumerate([0.1, 0.25, 0.6])]
    rows += [row("scifact", "answerable", 0.25, n=1), row("scifact", "scifact_absent", 0.1, n=1)]
    out = rule.choose(rows, MODELS)
    # cosine 0.3 catches two of three, the others one or none: every candidate passes 0.5
    assert out["chosen"] == "cosine=0.3"
    assert [c["caught"] for c in out["candidates"].values()] == [0.0, 0.3333, 0.6667, 0.3333]
    # the held-out sets are not read by the choice, only reported for the chosen one
    assert out["held_out"]["answerable"]["scifact"]["turned_away"] == 1
    assert out["held_out"]["caught"] == 1.0
    # a caller naming a gate gets that gate's eligible cut catching the most
    assert out["each_gate"] == {"retrieval": "retrieval=0.2", "crossencoder": None}
    # retrieval at 0.2 ties cosine at 0.2 on what it catches: the cheaper gate wins the tie
    monkeypatch.setattr(rule, "CANDIDATES", (("off", None), ("retrieval", 0.2), ("cosine", 0.2)))
    assert rule.choose(rows, MODELS)["chosen"] == "cosine=0.2"


def test_choose_falls_back_to_the_gate_off(monkeypatch):
    monkeypatch.setattr(rule, "CANDIDATES", (("off", None), ("cosine", 0.3)))
    answerable = {name: [0.5] * 100 for name in rule.ANSWERABLE_SETS} | {rule.SAMPLE_SET: [0.2] + [0.5] * 7}
    rows = sets_of(answerable) + [row("popqa", "absent", 0.1)]
    assert rule.choose(rows, MODELS)["chosen"] == "off"


@pytest.mark.parametrize("maker", ["wikiqa_documents_and_questions", "sample_questions"])
def test_the_sets_read_from_their_files(maker, tmp_path):
    if maker == "sample_questions":
        (tmp_path / "questions.json").write_text('[{"question": "Q?", "expect_doc": "d", "expect_phrase": "p"}]')
        asked = rule.sample_questions(tmp_path)
        assert [(a.set, a.kind, a.phrases) for a in asked] == [("samples", "answerable", ("p",))]
        return
    (tmp_path / "wikiqa").mkdir()
    (tmp_path / "wikiqa" / "WikiQA-dev.tsv").write_text(
        "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel\n"
        "Q1\twho?\tD1\tT\tD1-0\tFirst one.\t0\n"
        "Q1\twho?\tD1\tT\tD1-1\tThe answer.\t1\n"
        "Q2\twhat?\tD2\tU\tD2-0\tNothing here.\t0\n"
    )
    documents, asked = rule.wikiqa_documents_and_questions(tmp_path)
    assert [d.text for d in documents["wikiqa"]] == ["First one. The answer.", "Nothing here."]
    assert [d.text for d in documents["wikiqa_removed"]] == ["First one.", "Nothing here."]
    assert [(a.kind, a.index, a.phrases) for a in asked] == [
        ("answerable", "wikiqa", ("The answer.",)),
        ("answer_removed", "wikiqa_removed", ()),
    ]


def test_each_gates_cut_is_written_into_the_calibration_file(tmp_path):
    from chunkrag_filter.processors.calibration import load_calibration, shipped_path

    path = tmp_path / "calibration.json"
    path.write_bytes(shipped_path().read_bytes())
    before = load_calibration(str(path))
    rule.write_each_gate_cut({"retrieval": "retrieval=0.07", "crossencoder": None}, path)
    after = load_calibration(str(path))
    assert after.gate.cut == 0.07 and after.gate.model == before.gate.model
    assert after.gate_relevance == before.gate_relevance  # no eligible cut named: kept as it was
    assert after.about["gate"].endswith(f"before it {before.gate.cut:g}")
    assert "cut 0.07: chosen by the rule that loses no answers" in after.about["gate"]


class _Chunk:
    def __init__(self, text, cosine):
        self.text, self.doc_id, self.stage_scores = text, "d1", {"cosine": cosine}


class _Retriever:
    def search(self, question, size, filters):
        return type("Found", (), {"chunks": [_Chunk("Paris is the capital of France.", 0.7), _Chunk("Lunch.", 0.1)]})


class _Relevance:
    def __init__(self):
        self.calls = 0

    def score(self, question, texts):
        self.calls += 1
        return [0.9 for _ in texts]


class _Judge:
    """Unit vectors: the question along x, the capital sentence at 0.6 to it, the rest at 0."""

    def embed(self, texts):
        table = {"Paris is the capital of France.": [0.6, 0.8], "Lunch.": [0.0, 1.0]}
        return [table.get(t, [1.0, 0.0]) for t in texts]


def test_a_cached_row_gets_the_judges_cosines_and_keeps_the_rest(tmp_path):
    asked = [GateAsked("nq", "answerable", "1", "What is the capital of France?", "open", answers=("Paris",))]
    cache, relevance = tmp_path / "rows.jsonl", _Relevance()
    first = rule.read_all(asked, {"open": _Retriever()}, relevance, cache)
    assert "judge_cosines" not in first[0] and relevance.calls == 1
    assert rule.unread(asked, cache) == 0 and rule.unread(asked, cache, judged=True) == 1
    judged = rule.read_all(asked, {"open": _Retriever()}, relevance, cache, judge=_Judge())
    assert relevance.calls == 1  # the relevance model is not read again
    assert judged[0]["judge_cosines"] == [0.6, 0.0]
    assert judged[0]["features@8"]["best_judge_cosine"] == 0.6
    assert judged[0]["relevance_logits"] == first[0]["relevance_logits"]
    assert rule.read_rows(cache)[-1] == judged[0] and rule.unread(asked, cache, judged=True) == 0


def test_the_judges_gate_is_read_only_with_its_model(monkeypatch):
    monkeypatch.setattr(rule, "CANDIDATES", (("off", None), ("crossencoder", 0.2), ("judge", 0.2)))
    rows = sets_of({name: [0.5] * 100 for name in rule.ANSWERABLE_SETS} | {rule.SAMPLE_SET: [0.5] * 8})
    assert "judge=0.2" not in rule.choose(rows, MODELS)["candidates"]
    out = rule.choose(rows, MODELS | {"judge": Fixed()})
    assert "judge=0.2" in out["candidates"] and out["each_gate"]["judge"] == "judge=0.2"


def test_a_fit_reports_model_reads_back_as_the_same_model():
    from chunkrag_eval.gate_study import fit_report
    from chunkrag_filter.processors.calibration import Calibrated, LogisticModel

    model = LogisticModel(("best_cosine", "best_judge_cosine"), (7.5, 3.25), -4.0)
    report = fit_report({"gate_judge": {"calibrated": Calibrated(model, 0.1), "fitted_cut": 0.1}})
    assert report["gate_judge"]["cut"] == 0.1
    assert rule.fitted_model(report["gate_judge"]["model"]) == model


def test_the_fit_adds_the_judges_gate_when_every_row_has_its_cosine():
    from chunkrag_eval.gate_study import GATE_JUDGE_FIT_FEATURES, fit

    def training_row(i, label, judged=True):
        features = {"best_cosine": 0.3 + 0.01 * (i % 7), "best_term_overlap": 0.5, "best_entity_overlap": 0.5}
        features |= {"names_entities": 1.0, "best_relevance_logit": -1.0 + 0.1 * (i % 5)}
        if judged:
            features["best_judge_cosine"] = (0.7 if label else 0.2) + 0.01 * (i % 3)
        return {"source": "nq", "view": "whole", "label": label, "relevance_held_out": True, "features": features}

    rows = [training_row(i, i % 2 == 0) for i in range(40)]
    fitted = fit(rows)
    assert fitted["gate_judge"]["calibrated"].model.names == GATE_JUDGE_FIT_FEATURES
    assert fitted["gate_judge"]["cross_validated_auc"] == 1.0  # the judge's cosine alone separates them here
    assert "gate_judge" not in fit(rows[:-1] + [training_row(39, False, judged=False)])


def test_nq_records_name_a_shared_passage_by_its_first_question(tmp_path):
    import gzip
    import json

    from chunkrag_eval.datasets import nq_gold

    lines = [
        {"question": "q0", "answers": ["a"], "ctxs": [{"text": "P", "title": "T", "isgold": True}]},
        {"question": "q1", "answers": ["b"], "ctxs": [{"text": "other", "isgold": False}]},
        {"question": "q2", "answers": ["c"], "ctxs": [{"text": "P", "title": "T", "isgold": True}]},
    ]
    path = tmp_path / "nq.jsonl.gz"
    with gzip.open(path, "wt") as out:
        out.write("".join(json.dumps(line) + "\n" for line in lines))
    records = list(nq_gold(path))
    assert [(r.number, r.question, r.doc_id) for r in records] == [(0, "q0", "nq-0"), (2, "q2", "nq-0")]
    assert records[1].answers == ("c",) and records[1].gold_title == "T"
