"""The evaluation command's pure parts: reading the shared formats and the
measures, with literal values."""

import json

import pytest

from chunkrag_eval.datasets import EvalDataError, detect_format, pool_text, read_items
from chunkrag_eval.measures import answer_in_context, kept_within_budget, rate, summary
from chunkrag_filter.processors.answer import verdict_from_chunks


def test_answer_in_context_is_a_case_insensitive_substring_of_any_answer():
    assert answer_in_context("He was a British POLITICIAN.", ["politician", "pol"])
    assert not answer_in_context("He was a poet.", ["politician"])
    assert not answer_in_context("anything", [""])


def test_budget_takes_best_first_and_skips_what_would_overflow():
    texts = ["aaaa", "bb", "cccccc", "d"]
    assert kept_within_budget(texts, [0.9, 0.1, 0.8, 0.5], 7) == [0, 3, 1]
    assert kept_within_budget(texts, [0.9, 0.1, 0.8, 0.5], 0) == []


def test_summary_and_rate():
    assert summary([3.0, 1.0, 2.0]) == {"n": 3, "mean": 2.0, "p50": 2.0, "p95": 3.0}
    assert summary([]) == {"n": 0}
    assert rate([True, False, True, True]) == 0.75 and rate([]) is None


def test_pool_pieces_become_paragraphs():
    assert pool_text("Knowledge1: a b [sep] Knowledge2: c") == "Knowledge1: a b\n\nKnowledge2: c"


def test_formats_are_detected_from_their_fields():
    assert detect_format({"question": "q", "answers": []}) == "popqa"
    assert detect_format({"claim": "c", "label": "true"}) == "pubhealth"
    assert detect_format({"topic": "t", "passages": []}) == "bio"
    with pytest.raises(EvalDataError, match="--format"):
        detect_format({"text": "x"})


def test_reading_reports_bad_lines_and_goes_on(tmp_path):
    path = tmp_path / "popqa.jsonl"
    good = {
        "question_id": 7,
        "question": "What is X's occupation?",
        "answers": ["poet"],
        "contexts": {"ambiguous": "X was a poet. [sep] Y"},
    }
    path.write_text(
        "\n".join([json.dumps(good), "{not json", json.dumps({"question": "q", "answers": ["a"]}), json.dumps([1])])
        + "\n"
    )
    fmt, items, bad = read_items(path)
    assert fmt == "popqa" and len(items) == 1
    assert items[0].item_id == "7" and items[0].answers == ("poet",) and items[0].pool == "X was a poet.\n\nY"
    assert [b.line for b in bad] == [2, 3, 4]
    assert "not JSON" in bad[0].reason and "contexts" in bad[1].reason


def test_pubhealth_labels_and_limits(tmp_path):
    path = tmp_path / "pubhealth.jsonl"
    rows = [
        {"id": i, "claim": f"claim {i}", "label": label, "contexts": {"ambiguous": "text"}}
        for i, label in enumerate(["true", "False", "mixture"])
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    fmt, items, bad = read_items(path)
    assert fmt == "pubhealth" and [i.label for i in items] == ["true", "false"]
    assert bad[0].line == 3 and "neither true nor false" in bad[0].reason
    assert len(read_items(path, limit=1)[1]) == 1


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(EvalDataError, match="cannot read"):
        read_items(tmp_path / "nope.jsonl")


def test_verdict_reads_the_first_true_or_false_word():
    from chunkrag_core.providers.chat import ChatResponse

    class One:
        def __init__(self, text):
            self.text = text

        def complete(self, request):
            return ChatResponse(text=self.text)

    assert verdict_from_chunks("claim", [], One(" False.")).label == "false"
    assert verdict_from_chunks("claim", [], One("It is TRUE")).label == "true"
    assert verdict_from_chunks("claim", [], One("unclear")).label is None


def test_the_shared_files_of_each_format_read_cleanly(shared_eval):
    for fmt, expected in (("popqa", 200), ("pubhealth", 150), ("bio", 50)):
        detected, items, bad = read_items(shared_eval / fmt / "dev.jsonl")
        assert detected == fmt and len(items) == expected and not bad, fmt
    _, bios, _ = read_items(shared_eval / "bio" / "dev.jsonl", limit=1)
    assert bios[0].question.startswith("Tell me a bio of") and ":" in bios[0].pool.split("\n\n")[0]


def _question(n: int, *, filter_calls: int, filter_tokens: int, answer_calls: int, answer_tokens: int):
    from chunkrag_eval.runner import QuestionOutcome

    return QuestionOutcome(
        item_id=str(n),
        question=f"q{n}",
        candidates=10,
        kept=3,
        pool_truncated=False,
        chars_before=1000,
        chars_after=300,
        threshold=0.005,
        nothing_relevant=False,
        model_calls=filter_calls,
        cached_calls=0,
        prompt_tokens=filter_tokens,
        seconds=0.1,
        generation_calls=answer_calls,
        generation_prompt_tokens=answer_tokens,
        generation_completion_tokens=5 * answer_calls,
    )


def test_the_summary_counts_the_answers_calls_and_tokens_with_the_filters():
    from chunkrag_eval.runner import EvalReport

    questions = (
        # The default filter (no model call) and one answer of 500 prompt tokens.
        _question(1, filter_calls=0, filter_tokens=0, answer_calls=1, answer_tokens=500),
        # The judge (2 calls, 900 tokens), then the answer and the all-retrieved answer.
        _question(2, filter_calls=2, filter_tokens=900, answer_calls=2, answer_tokens=1100),
    )
    summary = EvalReport("popqa", questions, "", 0.0, 0).summary()
    assert summary["model_calls_per_question"] == 2.5  # (0 + 1 + 2 + 2) / 2
    assert summary["prompt_tokens_per_question"] == 1250.0  # (500 + 900 + 1100) / 2
    assert summary["filter_model_calls_per_question"] == 1.0
    assert summary["filter_prompt_tokens_per_question"] == 450.0
    assert summary["generation_calls_per_question"] == 1.5
    assert summary["generation_prompt_tokens_per_question"] == 800.0
    # The naive judge (NAIVE_CALLS_PER_CHUNK = 3 calls for each of 10 candidates) writes the same answers.
    assert summary["naive_model_calls_per_question"] == 31.5


def test_without_answers_the_summary_counts_the_filter_alone():
    from chunkrag_eval.runner import EvalReport

    questions = (_question(1, filter_calls=3, filter_tokens=600, answer_calls=0, answer_tokens=0),)
    summary = EvalReport("popqa", questions, "", 0.0, 0).summary()
    assert summary["model_calls_per_question"] == summary["filter_model_calls_per_question"] == 3.0
    assert summary["prompt_tokens_per_question"] == 600.0 and summary["naive_model_calls_per_question"] == 30.0
    assert EvalReport("popqa", (), "", 0.0, 0).summary()["model_calls_per_question"] is None


def test_answers_match_as_whole_words_not_inside_longer_ones():
    from chunkrag_eval.measures import answer_in_context, answer_in_words

    # PopQA's short aliases: "pol" is in "politician" as a substring, not as a word.
    assert answer_in_context("He was a politician.", ["pol"]) and not answer_in_words("He was a politician.", ["pol"])
    assert answer_in_words("He served as an MP (1990).", ["mp"])
    assert answer_in_words("a C++ programmer", ["C++"]) and not answer_in_words("a C++x", ["C++"])
    assert not answer_in_words("NOT FOUND", ["no", "found it"]) and not answer_in_words("anything", ["", " "])


def test_risk_coverage_takes_the_most_confident_answers_first_and_not_answering_adds_no_area():
    from chunkrag_eval.measures import risk_coverage

    # (confidence, answered, right): four questions, three answered, the second most confident wrong.
    curve = risk_coverage([(0.9, True, True), (0.8, True, False), (0.1, False, False), (0.5, True, True)])
    assert curve["coverage"] == 0.75 and curve["accuracy_answered"] == 0.6667
    # running accuracy 1, 1/2, 2/3, each step a quarter of the questions wide
    assert curve["area"] == round((1 + 0.5 + 2 / 3) / 4, 4) == 0.5417
    assert curve["curve"] == [(0.25, 1.0), (0.5, 0.5), (0.75, 0.6667)]
    assert risk_coverage([(0.3, False, False)])["accuracy_answered"] is None
    assert risk_coverage([]) == {"questions": 0}
    thinned = risk_coverage([(1 - i / 100, True, True) for i in range(100)], points=10)["curve"]
    assert len(thinned) == 10 and thinned[-1] == (1.0, 1.0)
