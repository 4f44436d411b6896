"""The answer table on three real PopQA questions: real Elasticsearch, the
real local model; every row answers every question, the calls and tokens
of generation are counted, and a second run comes from the cache."""

from __future__ import annotations

import uuid

import pytest

from chunkrag_core.providers import make_chat
from chunkrag_eval.answer_table import (
    DEFAULT_CONTEXT_TOKENS,
    FACTS_MAX_TOKENS,
    ROWS,
    GenerationCache,
    run_table,
    table_markdown,
)
from chunkrag_eval.datasets import read_items
from tests.support.model_speed import budgeted

pytestmark = pytest.mark.integration


@pytest.fixture
def table_index(es):
    name = f"test-table-{uuid.uuid4().hex[:10]}"
    yield name
    es.delete_index(name)


def test_three_popqa_questions_through_every_row(
    es, embedder, settings, shared_eval, local_model, table_index, tmp_path
):
    _, items, _ = read_items(shared_eval / "popqa" / "dev.jsonl", "popqa", limit=3)
    cache = GenerationCache(tmp_path / "generations.sqlite")
    # The longest call: a prompt filling the model's context window, then a
    # listwise judgement or an answer; its timeout from the model's speed now.
    chat = budgeted(local_model, prompt_tokens=DEFAULT_CONTEXT_TOKENS, completion_tokens=FACTS_MAX_TOKENS)

    def table():
        return run_table(
            items,
            "popqa",
            "popqa",
            client=es,
            embedder=embedder,
            settings=settings,
            model=make_chat(chat),
            model_name=local_model.model,
            cache=cache,
            index=table_index,
        )

    run = table()
    summary = run.summary()
    assert set(summary) == set(ROWS)
    for row in ROWS:
        assert summary[row]["n"] == 3
        assert 0.0 <= summary[row]["accuracy"] <= 1.0
        # One answer call per question, whose prompt tokens are counted (they once read 0).
        assert summary[row]["prompt_tokens_per_answer"] > 0
    assert summary["no_retrieval"]["context_chars_per_question"] == 0
    assert summary["topk"]["context_chars_per_question"] <= summary["filter"]["context_chars_per_question"]
    assert summary["filter"]["context_chars_per_question"] <= summary["rag"]["context_chars_per_question"]
    # The judge row makes one listwise call per question before the answer.
    assert summary["filter_judge"]["model_calls_per_question"] == 2.0
    assert "p_vs_rag" in summary["filter"] and "p_vs_rag" not in summary["rag"]
    assert "| all retrieved (RAG) |" in table_markdown({"popqa": summary})

    again = table()
    assert [o.text for o in again.outcomes] == [o.text for o in run.outcomes]
    assert again.summary()["rag"]["prompt_tokens_per_answer"] == summary["rag"]["prompt_tokens_per_answer"]
