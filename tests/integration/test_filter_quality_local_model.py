"""A quality floor for the LLM judge with the offline default model, on real
data: ten PopQA dev questions (the first ten of the seeded order the judge
study ran them in, so their measured outcome is on record in
bench/results/filter_popqa_dev.questions.json), each pool in real
Elasticsearch, the local model on llama-server judging the best nine (the
judge turned on: `judge_top=9`, its share calibrated with the retrieval
signals by the shipped calibration file's judged model, cut at 0.4).

The floors are the measured figures less a margin for the model's
run-to-run noise (parallel slots batch requests differently, which moves
log-probabilities slightly); no timing is asserted.
"""

from __future__ import annotations

import uuid

import pytest

from chunkrag_core.providers import make_chat
from chunkrag_eval.datasets import read_items
from chunkrag_eval.runner import evaluate
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import FilterOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION_IDS = ("28", "4", "41", "168", "81", "102", "120", "157", "13", "64")
# Measured on these ten with the judge turned on (replayed from
# bench/results/filter_popqa_dev.questions.json with the judged model, cut at
# 0.4): the answer is in 8 of the pools and kept for 7, at 12.6% of the
# characters (cosine kept to the same characters: 7; BM25: 7).
MEASURED_ANSWER_KEPT = 7
NOISE_MARGIN = 2  # questions


@pytest.fixture(scope="module")
def local_chat(local_model):
    return make_chat(local_model)


def test_the_judged_filter_keeps_the_answer_above_the_floor(es, embedder, settings, shared_eval, local_chat):
    _, items, _ = read_items(shared_eval / "popqa" / "dev.jsonl", "popqa", "ambiguous", None)
    chosen = [item for item in items if item.item_id in QUESTION_IDS]
    assert len(chosen) == len(QUESTION_IDS)
    index = f"test-quality-{uuid.uuid4().hex[:8]}"
    try:
        report = evaluate(
            chosen,
            "popqa",
            client=es,
            embedder=embedder,
            settings=settings,
            model=local_chat,
            options=FilterOptions(answer=False, judge_top=9, gate="off"),  # the judge, on every question
            judge_many=judge_in_threads(local_chat, threads=settings.chat.parallel),
            index=index,
        )
    finally:
        es.delete_index(index)
    outcomes = report.questions
    before = sum(bool(q.answer_in_context_before) for q in outcomes)
    after = sum(bool(q.answer_in_context_after) for q in outcomes)
    chars = sum(q.chars_after for q in outcomes) / sum(q.chars_before for q in outcomes)
    calls = sum(q.model_calls for q in outcomes)
    print(f"\nanswer kept {after} of {before}; {chars:.1%} of the characters; {calls} model calls")
    # The model really judged: the best nine go in one call.
    assert calls >= len(outcomes)
    assert all(q.rows and any("calibrated" in r for r in q.rows) for q in outcomes)
    assert after >= MEASURED_ANSWER_KEPT - NOISE_MARGIN
    assert chars <= 0.30


# The default filter (no judge: the shipped calibration file's retrieval
# model at its cut) on the same ten questions, searched among the 200 PopQA
# dev pools as `chunkrag table` indexes them: the answer is in 8 of the
# pools and kept for 7, at 80% of the characters (cut 0.005; 7 at 32% with
# the earlier cut 0.09).
# The floor allows one question for the fresh index's different BM25
# statistics and fused ranks (a ten-pool index, not two hundred).
DEFAULT_BEFORE = 8
DEFAULT_MEASURED = 7


def test_the_default_filter_keeps_the_answers_first(es, embedder, settings, shared_eval):
    _, items, _ = read_items(shared_eval / "popqa" / "dev.jsonl", "popqa", "ambiguous", None)
    chosen = [item for item in items if item.item_id in QUESTION_IDS]
    index = f"test-quality-default-{uuid.uuid4().hex[:8]}"
    try:
        report = evaluate(
            chosen,
            "popqa",
            client=es,
            embedder=embedder,
            settings=settings,
            model=None,  # the default asks no model
            options=FilterOptions(answer=False),
            index=index,
        )
    finally:
        es.delete_index(index)
    outcomes = report.questions
    before = sum(bool(q.answer_in_context_before) for q in outcomes)
    after = sum(bool(q.answer_in_context_after) for q in outcomes)
    assert sum(q.model_calls for q in outcomes) == 0
    assert before == DEFAULT_BEFORE
    assert after >= DEFAULT_MEASURED - 1
