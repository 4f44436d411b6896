"""The pair-level relevance measure (chunkrag_eval/pair_study.py): its
numbers by hand, and its pair builders on tiny files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from chunkrag_eval import pair_study as ps
from chunkrag_eval.pair_study import Pair


def test_auc_counts_ties_half():
    # Positives 0.8 and 0.35; negatives 0.1 and 0.4: 0.8 beats both, 0.35 beats 0.1 only.
    assert ps.weighted_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    # A positive tied with a negative counts half: (1 + 0.5) / 2.
    assert ps.weighted_auc([0.5, 0.5, 0.9], [False, True, True]) == 0.75
    # Every score equal: 0.5.
    assert ps.weighted_auc([1.0, 1.0, 1.0, 1.0], [True, False, True, False]) == 0.5
    assert math.isnan(ps.weighted_auc([0.2, 0.3], [True, True]))


def test_auc_weights_count_pairs_that_often():
    # The negative 0.4 counted twice: the positive 0.35 beats 1 of 3 negatives' weight, 0.8 all 3.
    assert ps.weighted_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True], [1, 2, 1, 1]) == pytest.approx(
        (1 / 3 + 1) / 2
    )
    # Weight 0 is leaving the pair out.
    assert ps.weighted_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True], [1, 0, 1, 1]) == 1.0


def test_auc_agrees_with_the_filters_own():
    from chunkrag_filter.processors.calibration import roc_auc

    scores = [3, 1, 2, 2, 0, 3, 1, 2, 0, 1]
    labels = [True, False, True, False, False, True, True, False, False, False]
    assert ps.weighted_auc(scores, labels) == pytest.approx(roc_auc(scores, labels))


def test_resamples_draw_whole_questions():
    weights = ps.question_resamples(["q1", "q1", "q2", "q3"], 50, seed=3)
    assert weights.shape == (50, 4)
    assert np.array_equal(weights[:, 0], weights[:, 1])  # a question's pairs move together
    assert set(weights.sum(axis=1) - weights[:, 1]) <= {3.0}  # three questions drawn each time
    assert np.array_equal(weights, ps.question_resamples(["q1", "q1", "q2", "q3"], 50, seed=3))


def test_interval_and_share_above():
    assert ps.interval(list(range(101))) == [2.5, 97.5]
    assert ps.interval([float("nan"), 1.0]) == [1.0, 1.0]
    # Positives 0.2, 0.5, 0.9: two at or above 0.5.
    assert ps.share_above([0.2, 0.5, 0.9, 0.95], [True, True, True, False], 0.5) == pytest.approx(2 / 3)
    assert math.isnan(ps.share_above([0.3], [False], 0.5))


def test_bm25_by_hand():
    index = ps.Bm25([["a", "b"], ["b", "c", "c"]])
    # avgdl 2.5; idf(c) = ln(1 + 1.5 / 1.5) = ln 2; tf 2 in a 3-term text.
    norm = 1 - 0.75 + 0.75 * 3 / 2.5
    idf_b = math.log(1 + 0.5 / 2.5)
    expected = idf_b * 1 / (1 + 1.2 * norm) + math.log(2) * 2 / (2 + 1.2 * norm)
    assert index.score(["b", "c"], 1) == pytest.approx(expected)
    assert index.score(["b", "c"], 1) == pytest.approx(0.4867519568)
    assert index.score(["c", "c"], 0) == 0.0
    # A repeated query term counts once.
    assert index.score(["c", "c"], 1) == index.score(["c"], 1)


def test_bm25_terms_drop_stop_words_and_stem():
    assert ps.bm25_terms("The Nation's wounds were binding") == ["nation", "wound", "were", "bind"]


def test_question_features_normalise_within_a_question():
    pairs = [Pair("q", "x", "a" * 100, True), Pair("q", "x", "b" * 100, False), Pair("r", "y", "c" * 200, False)]
    f = ps.question_features(pairs, [2.0, -1.0, 30.0], [0.6, 0.2, 0.1], [4.0, 0.0, 1.0])
    assert f[0]["hybrid"] == 1.0 and f[1]["hybrid"] == 0.0
    assert f[0]["inv_rank"] == 1.0 and f[1]["inv_rank"] == 0.5
    assert f[1]["relevance_gap"] == -3.0 and f[1]["cosine_gap"] == pytest.approx(-0.4)
    # A question of one pair: each side all-equal, so 1 (search_extension/fusion.py), and the logit clipped.
    assert f[2]["hybrid"] == 1.0 and f[2]["relevance_logit"] == 12.0
    assert f[2]["log_chars"] == pytest.approx(math.log(2))


def test_gate_logit_threshold_is_where_the_gate_passes():
    from chunkrag_filter.processors.calibration import load_calibration

    gate = load_calibration(None).gate_relevance
    pair = Pair("q", "Who wrote Federalist No. 10?", "James Madison wrote it in 1787.", True)
    needed = ps.logit_threshold(pair, 0.4, gate.model, gate.cut)
    assert ps.gate_view(pair, needed, 0.4, gate.model) == pytest.approx(gate.cut)
    assert ps.gate_view(pair, needed + 0.1, 0.4, gate.model) > gate.cut


def test_measure_and_goal():
    pairs = [Pair("q1", "x", "t1", True), Pair("q1", "x", "t2", False), Pair("q2", "y", "t3", False)]
    block = ps.measure(
        pairs,
        {"model": [0.9, 0.1, 0.2], "cosine": [0.5, 0.6, 0.1]},
        {"rule": [True, False, False]},
        resamples=20,
    )
    assert block["pairs"] == 3 and block["questions"] == 2 and block["questions_with_positive"] == 1
    assert block["auc"]["model"]["auc"] == 1.0 and block["auc"]["cosine"]["auc"] == 0.5
    assert block["model_minus_cosine"]["auc"] == 0.5
    assert block["share_positives_passed"] == {"rule": 1.0}
    assert ps.goal(block, "rule") == {
        "auc_margin": 0.5,
        "auc_met": True,
        "share_rule": "rule",
        "share": 1.0,
        "share_met": True,
    }


def test_measure_holds_a_judge_against_cosine_too():
    pairs = [Pair("q1", "x", "t1", True), Pair("q1", "x", "t2", False), Pair("q2", "y", "t3", False)]
    block = ps.measure(
        pairs,
        {"model": [0.9, 0.1, 0.2], "judge": [0.2, 0.3, 0.1], "cosine": [0.5, 0.6, 0.1]},
        {},
        resamples=20,
    )
    assert block["model_minus_cosine"]["auc"] == 0.5
    assert block["judge_minus_cosine"]["auc"] == 0.0  # t1 beats t3 only, as cosine does
    assert "bm25_minus_cosine" not in block


def test_cached_values_compute_each_pair_once(tmp_path):
    calls = []

    def compute(query, texts):
        calls.append((query, list(texts)))
        return [len(t) for t in texts]

    pairs = [Pair("1", "q", "ab", True), Pair("1", "q", "abc", False), Pair("2", "r", "ab", False)]
    assert ps.cached_values(tmp_path / "c.jsonl", pairs, compute) == [2, 3, 2]
    assert calls == [("q", ["ab", "abc"]), ("r", ["ab"])]
    assert ps.cached_values(tmp_path / "c.jsonl", pairs, compute) == [2, 3, 2]
    assert len(calls) == 2  # the second run read them all from the cache


def test_wikiqa_pairs(tmp_path):
    path = tmp_path / "wikiqa.tsv"
    path.write_text(
        "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel\n"
        "Q1\thow tall is it\tD1\tT\tD1-0\tIt is 10 m tall.\t1\n"
        "Q1\thow tall is it\tD1\tT\tD1-1\tIt is red.\t0\n",
        encoding="utf-8",
    )
    assert ps.wikiqa_pairs(path) == [
        Pair("Q1", "how tall is it", "It is 10 m tall.", True),
        Pair("Q1", "how tall is it", "It is red.", False),
    ]


def test_scifact_pairs_read_rationale_sentences_of_cited_abstracts(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"_id": "10", "title": "A", "text": "s0 s1 s2", "sentences": ["s0", "s1", "s2"]})
        + "\n"
        + json.dumps({"_id": "20", "title": "B", "text": "u0", "sentences": ["u0"]})
        + "\n",
        encoding="utf-8",
    )
    (tmp_path / "qrels_validation_cited.tsv").write_text(
        "query-id\tcorpus-id\tscore\n1\t10\t1\n1\t20\t1\n2\t20\t1\n", encoding="utf-8"
    )
    (tmp_path / "queries_validation.jsonl").write_text(
        json.dumps(
            {"_id": "1", "text": "claim", "evidence": {"10": {"label": "SUPPORT", "rationale_sentence_idx": [[0, 2]]}}}
        )
        + "\n"
        + json.dumps({"_id": "2", "text": "no evidence", "evidence": {}})
        + "\n",
        encoding="utf-8",
    )
    assert [(p.group, p.text, p.label) for p in ps.scifact_pairs(tmp_path)] == [
        ("1", "s0", True),
        ("1", "s1", False),
        ("1", "s2", True),
        ("1", "u0", False),
    ]


def test_squad_pairs_label_the_sentence_holding_the_span(tmp_path):
    first = "Alpha is one. Beta is two."
    second = "Gamma is three."
    data = {
        "data": [
            {
                "title": "Held",
                "paragraphs": [
                    {
                        "context": first,
                        "qas": [
                            {"id": "a", "question": "What is Beta?", "answers": [{"text": "two", "answer_start": 22}]},
                            {"id": "b", "question": "?", "answers": [], "is_impossible": True},
                        ],
                    },
                    {"context": second, "qas": []},
                ],
            },
            {
                "title": "Trained",
                "paragraphs": [{"context": "x.", "qas": [{"id": "c", "question": "x", "answers": []}]}],
            },
        ]
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), encoding="utf-8")

    def split(text):  # sentences end at ". "
        spans, start = [], 0
        for i, ch in enumerate(text):
            if ch == "." and (i + 1 == len(text) or text[i + 1] == " "):
                spans.append((start, i + 1))
                start = i + 2
        return spans

    pairs = ps.squad_pairs(path, ("Held",), split, count=None)
    assert [(p.group, p.text, p.label) for p in pairs] == [
        ("a", "Alpha is one.", False),
        ("a", "Beta is two.", True),
        ("a", "Gamma is three.", False),
    ]


def test_popqa_pairs_whole_word_answers(tmp_path):
    path = tmp_path / "popqa.jsonl"
    record = {
        "question": "What is Tom's occupation?",
        "question_id": 7,
        "answers": ["actor"],
        "contexts": {"ambiguous": "Tom is an actor. [sep] Tom met a factor."},
    }
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")

    def by_passage(documents):
        return [doc[1].split("\n\n") for doc in documents]

    pairs = ps.popqa_pairs(path, by_passage)
    assert [(p.group, p.text, p.label) for p in pairs] == [
        ("7", "Tom is an actor.", True),
        ("7", "Tom met a factor.", False),
    ]


def test_sample_pairs_and_the_committed_questions(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The cat sat on the mat.\n\nDogs  bark loudly at night.", encoding="utf-8")
    questions = tmp_path / "q.json"
    questions.write_text(
        json.dumps(
            [
                {"question": "Which animal is noisy after dark?", "expect_phrase": "dogs bark loudly"},
                {"question": "Split?", "expect_phrase": "mat. Dogs"},
            ]
        ),
        encoding="utf-8",
    )

    def by_paragraph(documents):
        return [d.text.split("\n\n") for d in documents]

    pairs, unheld = ps.sample_pairs(corpus, questions, by_paragraph)
    assert [(p.group, p.label) for p in pairs] == [("0", False), ("0", True), ("1", False), ("1", False)]
    assert unheld == ["Split?"]
    # The committed question set: at least 40, none of the README's eight, each phrase in the corpus.
    held = json.loads(ps.QUESTIONS.read_text(encoding="utf-8"))
    readme = {q["question"] for q in json.loads((ps.SAMPLES / "questions.json").read_text(encoding="utf-8"))}
    assert len(held) >= 40 and not readme & {q["question"] for q in held}
    corpus_text = " ".join(ps._flat(p.read_text(encoding="utf-8")) for p in (ps.SAMPLES / "corpus").iterdir())
    assert all(ps._flat(q["expect_phrase"]) in corpus_text for q in held)


def test_cosines_embed_each_text_once():
    class Embedder:
        calls: list[list[str]] = []

        def embed(self, texts):
            self.calls.append(list(texts))
            unit = {"q": [1.0, 0.0], "a": [0.6, 0.8], "b": [0.0, 1.0]}
            return np.array([unit[t] for t in texts])

    embedder = Embedder()
    cosines = ps.embedder_cosines(embedder)
    assert cosines("q", ["a", "b"]) == pytest.approx([0.6, 0.0])
    assert cosines("q", ["b"]) == pytest.approx([0.0])
    assert embedder.calls == [["q", "a", "b"]]


def test_views_keep_the_own_paragraph_and_the_own_file(tmp_path):
    squad = tmp_path / "squad.json"
    paragraphs = [{"context": "A one. A two.", "qas": [{"id": "a"}]}, {"context": "B one.", "qas": [{"id": "b"}]}]
    squad.write_text(json.dumps({"data": [{"title": "T", "paragraphs": paragraphs}]}), encoding="utf-8")
    pairs = [Pair("a", "q", "A two.", True), Pair("a", "q", "B one.", False), Pair("b", "r", "B one.", False)]
    assert ps.squad_own_paragraph(pairs, squad) == [pairs[0], pairs[2]]

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Cats purr.", encoding="utf-8")
    (corpus / "people.jsonl").write_text(
        json.dumps({"id": "p-1", "title": "One", "text": "Ann sings."})
        + "\n"
        + json.dumps({"id": "p-2", "title": "Two", "text": "Bob runs."})
        + "\n",
        encoding="utf-8",
    )
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps([{"question": "Who runs?", "expect_doc": "p-2", "expect_phrase": "Bob runs"}]))
    pairs = [Pair("0", "Who runs?", t, t == "Bob runs.") for t in ("Cats purr.", "Ann sings.", "Bob runs.")]
    # Both records are of people.jsonl: the file, not the record, is the view.
    assert ps.samples_own_file(pairs, corpus, questions) == pairs[1:]
