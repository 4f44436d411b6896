"""`eval` with segments on real PopQA records and the real Elasticsearch; a
scripted model over HTTP picks the passage holding the gold answer."""

from __future__ import annotations

import uuid

import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_eval.datasets import read_items
from chunkrag_eval.runner import evaluate
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import FilterOptions
from local_services.scripted_openai import ScriptedOpenAI, completion, is_listwise, listwise_choice
from search_extension.segments import SegmentSettings

pytestmark = pytest.mark.integration


def test_eval_reports_segments_within_the_kept_characters(es, embedder, settings, shared_eval):
    _, items, _ = read_items(shared_eval / "popqa" / "dev.jsonl", "popqa", limit=3)
    gold = {item.question: item.answers for item in items}

    def oracle(request):
        prompt = request["messages"][-1]["content"]
        question = next(q for q in gold if q in prompt)
        if is_listwise(request):
            answer = next(
                (
                    a
                    for a in gold[question]
                    if any(a.lower() in line.lower() for line in prompt.splitlines() if line.startswith("["))
                ),
                "\x00",
            )
            return listwise_choice(answer)(request)
        return completion(f"The answer is {gold[question][0]} [1].")(request)

    index = f"test-eval-segments-{uuid.uuid4().hex[:10]}"
    try:
        with ScriptedOpenAI(default=oracle) as server:
            model = OpenAICompatibleChat(model="scripted", base_url=server.base_url, timeout_s=10)
            report = evaluate(
                items,
                "popqa",
                client=es,
                embedder=embedder,
                settings=settings,
                model=model,
                options=FilterOptions(answer=False, judge_top=9, calibration=None, threshold="dynamic"),
                judge_many=judge_in_threads(model, threads=2),
                index=index,
                segments=SegmentSettings(),
            )
    finally:
        es.delete_index(index)
    outcomes = report.questions
    assert all(isinstance(q.segments_answer_in_context_after, bool) for q in outcomes)
    # The oracle judge (uncalibrated: its share is the relevance) gives the
    # gold chunk the top probability: RSE finds it
    # wherever the filter kept it.
    for q in outcomes:
        if q.answer_in_context_after:
            assert q.segments_answer_in_context_after, q.question
    assert report.summary()["segments_answer_in_context_after"] is not None
