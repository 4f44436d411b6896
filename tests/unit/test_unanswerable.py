"""The open corpus's unanswerable half and its declared corpus: how each kind
is made, with literal documents and the real shared/eval files."""

from __future__ import annotations

import pytest

from chunkrag_eval.datasets import EvalDataError, EvalItem, read_items
from chunkrag_eval.open_corpus import build_corpus, parse_distractors
from chunkrag_eval.unanswerable import (
    SQUAD_ARTICLES,
    NameIndex,
    absent,
    answerable,
    off_topic,
    parse_kinds,
    squad_unanswerable,
)
from ingest_pipeline.sources import plain_document


def item(i: str, subject: str | None) -> EvalItem:
    return EvalItem(
        i, f"What is {subject}'s occupation?", f"{subject} was a politician.", ("politician",), None, subject
    )


DOCS = [
    plain_document("popqa-1", "Henry Feilden was an English politician.", "t"),
    plain_document("popqa-2", "Ann Lee sang. Henry Feildenson is another man.", "t"),
    plain_document("nq-5", "The ANN LEE trust was founded in 1990.", "t", title="Trusts"),
    plain_document("popqa-3", "Bob Smith wrote novels.", "t"),
]


def test_a_subject_is_named_as_whole_words_in_any_case_and_the_own_pool_does_not_count():
    names = NameIndex(DOCS)
    assert names.naming("Henry Feilden") == {"popqa-1"}  # "Feildenson" is another word
    assert names.naming("Ann Lee") == {"popqa-2", "nq-5"}
    assert names.naming("Trusts") == {"nq-5"}  # titles count: they head a chunk
    questions, counts = absent("popqa", [item("1", "Henry Feilden"), item("2", "Ann Lee"), item("4", None)], names)
    assert [q.item.item_id for q in questions] == ["1"]
    assert counts == {"considered": 3, "no_subject": 1, "named_elsewhere": 1, "kept": 1}
    (q,) = questions
    assert q.kind == "absent" and q.own_doc == "popqa-1" and not q.answerable
    assert q.filters == ({"bool": {"must_not": [{"term": {"doc_id": "popqa-1"}}]}},)


def test_answerable_and_off_topic_questions_name_their_views():
    (a,) = answerable("popqa", [item("1", "Henry Feilden")])
    assert a.answerable and a.filters == () and a.own_doc == "popqa-1"
    (o,) = off_topic("popqa", [item("1", "Henry Feilden")])
    assert o.kind == "off_topic" and o.filters == ({"prefix": {"doc_id": "pubhealth-"}},) and o.own_doc is None
    with pytest.raises(EvalDataError, match="no off-topic view for bio"):
        off_topic("bio", [])


def test_kinds_parse_and_refuse_what_does_not_exist():
    assert parse_kinds("absent,unanswerable=0:60,off_topic=20") == {
        "absent": (0, None),
        "unanswerable": (0, 60),
        "off_topic": (0, 20),
    }
    assert parse_kinds("unanswerable=60:120") == {"unanswerable": (60, 60)}
    assert parse_kinds("none") == {} == parse_kinds(None)
    with pytest.raises(ValueError, match="choose among absent"):
        parse_kinds("missing")
    with pytest.raises(ValueError, match="KIND=A:B"):
        parse_kinds("absent=9:3")


def test_squad_unanswerable_questions_come_from_the_article_the_relevance_model_held_out(shared_eval):
    import json

    from chunkrag_train.pairs import split_of

    data = json.loads((shared_eval / "squad" / "squad2_cs224n_dev-v2.0.json").read_text())["data"]
    held_out = tuple(a["title"] for a in data if split_of("squad:" + a["title"], 13) == "validation")
    assert held_out == SQUAD_ARTICLES
    questions, counts = squad_unanswerable(shared_eval / "squad" / "squad2_cs224n_dev-v2.0.json", 10, 5)
    assert counts == {"articles": 1, "unanswerable_in_them": 175, "kept": 5}
    assert all(q.kind == "unanswerable" and q.own_doc.startswith("squad-") and not q.item.answers for q in questions)
    assert len({q.item.item_id for q in questions}) == 5


def test_the_corpus_is_the_same_whatever_is_read_and_a_missing_file_is_named(shared_eval, tmp_path):
    popqa = shared_eval / "popqa" / "dev.jsonl"
    corpus = build_corpus([popqa], shared_eval, parse_distractors("nq=5"))
    # every pool of both dev files (the evaluated file once), whatever --limit read, and the distractors
    assert dict(corpus.sources) == {"popqa": 200, "pubhealth": 150, "nq": 5}
    assert [f["documents"] for f in corpus.files] == [200, 150, 5]
    assert all(len(f["sha256"]) == 64 for f in corpus.files)
    _, items, _ = read_items(popqa, limit=3)
    assert {f"popqa-{i.item_id}" for i in items} <= {d.doc_id for d in corpus.documents}
    with pytest.raises(EvalDataError, match="distractor set squad .* not found at .*; set CHUNKRAG_SHARED"):
        build_corpus([popqa], tmp_path, parse_distractors("squad"), dev_pools=False)
    with pytest.raises(EvalDataError, match="an evaluation file not found"):
        build_corpus([popqa], tmp_path, {})
