"""The answer benchmark of post-search: its pure parts on literal values."""

from __future__ import annotations

import pytest

from bench.post_search_answers import (
    best_first,
    by_cosine_within,
    context_figures,
    cut_to_budget,
    row_figures,
    summary_of,
)
from bench.post_search_bench import cluster_response, queries
from chunkrag_core.chunk import Chunk
from chunkrag_eval.answer_table import RowOutcome


def chunk(doc: str, text: str, **scores: float) -> Chunk:
    return Chunk(doc, 0, text, 0, len(text), stage_scores=scores)


def outcome(item: str, row: str, correct: bool, tokens: int = 100, chars: int = 300, cut: bool = False) -> RowOutcome:
    return RowOutcome(item, row, "an answer", correct, None, chars, 1, 1, tokens, 5, seconds=2.0, context_cut=cut)


def test_whole_texts_fit_untouched():
    texts = [chunk("a", "one two"), chunk("b", "three")]
    kept, cut = cut_to_budget(texts, 12)
    assert [c.text for c in kept] == ["one two", "three"] and not cut


def test_the_text_reaching_the_limit_is_cut_at_a_word_and_the_rest_left_out():
    texts = [chunk("a", "one two"), chunk("b", "three four five"), chunk("c", "six")]
    kept, cut = cut_to_budget(texts, 7 + 10)
    assert [c.text for c in kept] == ["one two", "three four"] and cut
    assert kept[1].end == kept[1].start + len("three four")


def test_a_cut_on_a_space_keeps_the_word_before_it():
    kept, cut = cut_to_budget([chunk("a", "three four five")], 10)
    assert [c.text for c in kept] == ["three four"] and cut


def test_a_first_text_longer_than_the_context_is_cut_not_dropped():
    kept, cut = cut_to_budget([chunk("a", "alpha beta gamma delta")], 11)
    assert [c.text for c in kept] == ["alpha beta"] and cut


def test_no_room_for_a_word_sends_nothing_of_that_text():
    kept, cut = cut_to_budget([chunk("a", "abc"), chunk("b", "longword")], 5)
    assert [c.text for c in kept] == ["abc"] and cut


def test_cosine_takes_the_best_within_the_characters_and_skips_one_that_overflows():
    passages = [chunk("a", "x" * 40), chunk("b", "y" * 80), chunk("c", "z" * 30), chunk("d", "w" * 20)]
    chosen = by_cosine_within(passages, [0.5, 0.9, 0.7, 0.1], 120)
    # 0.9 (80) then 0.7 (30): 110; 0.5 (40) overflows; 0.1 (20) would too.
    assert [c.doc_id for c in chosen] == ["b", "c"]
    assert by_cosine_within(passages, [0.5, 0.9, 0.7, 0.1], 0) == []


def test_best_first_orders_by_the_filters_combined_score():
    kept = [chunk("a", "a", combined=0.2), chunk("b", "b", combined=0.9), chunk("c", "c", combined=0.5)]
    assert [c.doc_id for c in best_first(kept)] == ["b", "c", "a"]


def test_row_figures_pair_with_the_reference_by_exact_mcnemar():
    reference = [outcome(f"q{i}", "whole_hits", r, tokens=3000, cut=True) for i, r in enumerate([1, 0, 0, 0, 0, 1])]
    row = [outcome(f"q{i}", "kept", r, tokens=1000) for i, r in enumerate([1, 1, 1, 1, 1, 0])]
    figures = row_figures(row, reference)
    assert figures["n"] == 6
    assert figures["accuracy"] == pytest.approx(5 / 6, abs=1e-4)
    assert figures["prompt_tokens_per_answer"] == 1000.0
    assert figures["right_only_here"] == 4 and figures["right_only_whole_hits"] == 1
    # Five discordant pairs, one the other way: 2 * (1 + 5) / 32.
    assert figures["p_vs_whole_hits"] == 0.375
    assert figures["contexts_cut_to_fit"] == 0
    assert row_figures(reference, reference)["p_vs_whole_hits"] == 1.0
    assert row_figures(reference, reference)["contexts_cut_to_fit"] == 6


def test_row_figures_refuse_unpaired_rows():
    with pytest.raises(ValueError, match="same questions"):
        row_figures([outcome("q0", "kept", True)], [outcome("q1", "whole_hits", True)])


def test_the_summary_counts_only_questions_every_row_answered():
    def cell(row, right, in_context):
        return {"outcome": outcome("q", row, right), "answer_in_context": in_context}

    questions = [
        {"rows": {"whole_hits": cell("whole_hits", False, False), "kept": cell("kept", True, True)}},
        {"rows": {"whole_hits": cell("whole_hits", True, True)}},  # stopped before the next row
    ]
    summary = summary_of(questions, ("whole_hits", "kept"))
    assert summary["whole_hits"]["n"] == 1 and summary["whole_hits"]["accuracy"] == 0.0
    assert summary["kept"]["accuracy"] == 1.0 and summary["kept"]["answer_in_context_share"] == 1.0
    assert summary_of([], ("whole_hits",)) == {"whole_hits": {"n": 0}}


def test_each_question_draws_its_gold_document_among_others_in_a_random_order():
    docs = [
        {"id": f"d{i}", "title": f"T{i}", "body": f"body {i}", "questions": [(f"q{i}", [f"a{i}"])]} for i in range(6)
    ]
    drawn = list(queries(docs, seed=7, hits=4, limit=3))
    assert len(drawn) == 3
    for gold, question, answers, hits in drawn:
        assert gold in hits and len({d["id"] for d in hits}) == 4
        assert (question, answers) == gold["questions"][0]
    assert [[d["id"] for d in h] for *_, h in drawn] == [[d["id"] for d in h] for *_, h in queries(docs, 7, 4, 3)]
    response = cluster_response("idx", drawn[0][3])
    assert [h["_id"] for h in response["hits"]["hits"]] == [d["id"] for d in drawn[0][3]]
    assert response["hits"]["hits"][0]["_source"] == {"title": drawn[0][3][0]["title"], "body": drawn[0][3][0]["body"]}


def test_context_figures_without_the_model():
    records = [
        {"whole_hits": {"answer_in_context": False, "context_chars": 900, "cut": True}},
        {"whole_hits": {"answer_in_context": True, "context_chars": 600, "cut": False}},
    ]
    assert context_figures(records, ("whole_hits",)) == {
        "whole_hits": {
            "n": 2,
            "answer_in_context_share": 0.5,
            "context_chars_per_question": 750.0,
            "contexts_cut_to_fit": 1,
        }
    }
    assert context_figures([], ("kept",)) == {"kept": {"n": 0}}
