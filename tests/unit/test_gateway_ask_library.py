"""The library call behind the gateway (search_extension.ask) with doubles."""

import math
import threading
import time

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatError, ChatResponse
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import FilterOptions
from chunkrag_filter.processors.relevance import ScoringOptions
from search_extension.ask import ask
from search_extension.retriever import RetrievalResult

CHUNKS = tuple(
    Chunk(doc_id=d, position=0, text=f"{d} text", start=0, end=6, score=s) for d, s in (("a", 0.9), ("b", 0.5))
)


class FakeRetriever:
    def __init__(self):
        self.calls = []

    def search(self, text, **kwargs):
        self.calls.append((text, kwargs))
        return RetrievalResult(CHUNKS, kwargs.get("mode") or "minmax", "client", 4.0, 2.0)


class Model:
    """Yes/no by P(Yes) for chunk a; the rewrite and the answer by prompt."""

    def __init__(self, delay_s=0.0, fail_on=None):
        self.delay_s, self.fail_on, self.prompts = delay_s, fail_on, []
        self._lock = threading.Lock()

    def complete(self, request):
        prompt = request.messages[-1].content
        with self._lock:
            self.prompts.append(prompt)
        if "Rewritten Query:" in prompt:
            return ChatResponse(text="capital city of Japan", prompt_tokens=30)
        if "Passages:" in prompt:
            return ChatResponse(text="a [1].", prompt_tokens=50, completion_tokens=3)
        if self.fail_on and self.fail_on in prompt:
            raise ChatError("model answered 400", status=400)
        time.sleep(self.delay_s if "b text" in prompt else 0)
        yes = 0.95 if "a text" in prompt else 0.05
        return ChatResponse(
            text="Yes",
            prompt_tokens=10,
            completion_tokens=1,
            first_token_logprobs={"Yes": math.log(yes), "No": math.log(1 - yes)},
        )


def test_retrieval_only_calls_no_model_and_fetches_no_vectors():
    retriever = FakeRetriever()
    result = ask(
        "q",
        retriever=retriever,
        model=None,
        candidates=5,
        mode="bm25",
        filters=({"term": {"doc_id": "a"}},),
        stages=False,
    )
    assert result.filtered is None and result.rewrite is None and result.usage.model_calls == 0
    assert retriever.calls == [
        ("q", {"mode": "bm25", "size": 5, "filters": ({"term": {"doc_id": "a"}},), "include_vectors": False})
    ]
    assert set(result.timings_ms) == {"embed", "retrieval", "total"}


def test_rewrite_feeds_retrieval_and_judging_and_counts_in_usage():
    retriever, model = FakeRetriever(), Model()
    result = ask(
        "capital?",
        retriever=retriever,
        model=model,
        options=FilterOptions(
            gate="off",
            redundancy_threshold=None,
            scoring=ScoringOptions(method="multistage"),
            threshold="dynamic",
            calibration=None,
            judge_top=None,
        ),
        rewrite=True,
        candidates=2,
    )
    assert (
        retriever.calls[0][0] == "capital city of Japan"
        and result.query == "capital city of Japan"
        and result.question == "capital?"
    )
    assert [c.chunk_id for c in result.filtered.kept] == ["a:0"]
    assert result.usage.model_calls == 1 + 2 + 1 and result.usage.prompt_tokens == 30 + 2 * 10 + 50
    assert "rewrite" in result.timings_ms


def test_judging_within_a_budget_leaves_late_chunks_unjudged():
    judge_many = judge_in_threads(Model(delay_s=1.0), threads=2, budget_s=0.2)
    started = time.perf_counter()
    judgements = judge_many("q", CHUNKS, ScoringOptions())
    assert time.perf_counter() - started < 0.8
    assert judgements[0].base == pytest.approx(0.95)
    assert judgements[1].combined is None and "not judged within the budget of 0.2 s" in judgements[1].notes[0]


def test_listwise_batches_are_judged_and_timed_out_together():
    class Listwise:
        def __init__(self):
            self.prompts = []

        def complete(self, request):
            self.prompts.append(request.messages[-1].content)
            return ChatResponse(text="", prompt_tokens=10)

    model = Listwise()
    judgements = judge_in_threads(model, threads=2, budget_s=5)(
        "q", CHUNKS, ScoringOptions(method="listwise", listwise_batch=2)
    )
    assert (
        len(judgements) == 2
        and len(model.prompts) == 1
        and "a text" in model.prompts[0]
        and "b text" in model.prompts[0]
    )


def test_a_provider_error_while_judging_propagates():
    judge_many = judge_in_threads(Model(fail_on="b text"), threads=2, budget_s=5)
    with pytest.raises(ChatError, match="400"):
        judge_many("q", CHUNKS, ScoringOptions())
