"""`ask` with relevant segment extraction, with doubles for the retriever,
the neighbour fetch and the model."""

from __future__ import annotations

import math

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatResponse
from chunkrag_filter.pipeline import FilterOptions
from chunkrag_filter.processors.relevance import ScoringOptions
from search_extension.ask import ask
from search_extension.retriever import RetrievalResult
from search_extension.segments import SegmentSettings

TEXT = "Bees make honey. They gather nectar. Nectar becomes honey in the hive. Wasps do not."
SENTENCES = [(0, 16), (17, 36), (37, 70), (71, 85)]


def doc_chunk(position, score=None):
    start, end = SENTENCES[position]
    previous = SENTENCES[position - 1][1] if position else 0
    return Chunk(
        doc_id="bees",
        position=position,
        text=TEXT[start:end],
        start=start,
        end=end,
        score=score,
        lead=TEXT[previous:start],
    )


class Retriever:
    def search(self, text, **kwargs):
        return RetrievalResult((doc_chunk(2, 0.9), doc_chunk(0, 0.85), doc_chunk(3, 0.1)), "minmax", "client", 1.0, 1.0)


class Fetch:
    def __init__(self):
        self.calls = []

    def __call__(self, wanted):
        self.calls.append({k: tuple(v) for k, v in wanted.items()})
        return [doc_chunk(p) for p in wanted["bees"]]


class Model:
    """P(Yes) 0.95 for honey sentences, 0.05 otherwise; the answer by prompt."""

    def __init__(self):
        self.answer_prompts = []

    def complete(self, request):
        prompt = request.messages[-1].content
        if "Passages:" in prompt:
            self.answer_prompts.append(prompt)
            return ChatResponse(text="Bees make honey from nectar [1].", prompt_tokens=40, completion_tokens=8)
        chunk = prompt.split("Chunk:", 1)[-1]
        yes = 0.95 if "honey" in chunk else 0.05
        return ChatResponse(
            text="Yes",
            prompt_tokens=10,
            completion_tokens=1,
            first_token_logprobs={"Yes": math.log(yes), "No": math.log(1 - yes)},
        )


def test_retrieval_only_segments_use_normalised_scores_and_one_fetch():
    fetch = Fetch()
    result = ask(
        "how is honey made",
        retriever=Retriever(),
        model=None,
        stages=False,
        segments=SegmentSettings(),
        fetch_positions=fetch,
    )
    (segment,) = result.segments
    # relevances 1.0, 0.9375, 0.0: values 0.82, ~0.727, -0.18 (unretrieved 1), ~-0.18
    assert (segment.first, segment.stop) == (0, 3)
    assert segment.value == pytest.approx(0.82 + (0.75 / 0.8 * math.exp(-1 / 30) - 0.18) - 0.18)
    assert segment.text == TEXT[0:70]
    assert fetch.calls == [{"bees": (1,)}]
    assert "segments" in result.timings_ms


def test_judged_segments_feed_the_answer():
    fetch, model = Fetch(), Model()
    options = FilterOptions(
        gate="off",
        redundancy_threshold=None,
        scoring=ScoringOptions(method="multistage"),
        threshold="dynamic",
        calibration=None,
        judge_top=None,
    )
    result = ask(
        "how is honey made",
        retriever=Retriever(),
        model=model,
        options=options,
        segments=SegmentSettings(),
        fetch_positions=fetch,
    )
    (segment,) = result.segments
    assert segment.chunk_ids == ("bees:0", "bees:1", "bees:2")
    assert segment.chunks[0].stage_scores["combined"] > 0.9
    (prompt,) = model.answer_prompts
    assert "[1] Bees make honey. They gather nectar. Nectar becomes honey in the hive." in prompt
    assert result.answer.citations == ("bees:0",)
    # 3 judgements and one answer, counted once
    assert result.filtered.model_calls == 3 and result.usage.model_calls == 4


def test_without_segments_nothing_changes():
    result = ask("how is honey made", retriever=Retriever(), model=None, stages=False)
    assert result.segments is None
