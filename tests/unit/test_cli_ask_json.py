"""``chunkrag ask --json``: the gateway's /v1/ask response for the same
result, with literal values: the kept and dropped chunks with their ids,
scores, decisions and reasons, the gate's reading, the threshold, the answer
and the ids it cites, usage, and nothing_relevant with its reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunkrag_cli.output import ask_json
from chunkrag_core.chunk import Chunk
from chunkrag_filter.pipeline import Decision, FilterResult
from chunkrag_filter.processors.answer import Answer
from chunkrag_filter.processors.gate import GateOutcome
from chunkrag_filter.processors.thresholds import Threshold
from chunkrag_gateway.models import AskResponse
from search_extension.ask import AskResult
from search_extension.retriever import RetrievalResult


def chunk(doc: str, score: float, **stages) -> Chunk:
    text = f"{doc} text"
    return Chunk(doc, 0, text, 0, len(text), title=doc, score=score, stage_scores=stages)


KEY = chunk("key", 0.9, cosine=0.61, combined=0.8)
LUNCH = chunk("lunch", 0.4, cosine=0.12, combined=0.002)
RETRIEVAL = RetrievalResult((KEY, LUNCH), "minmax", "client", 12.0, 3.0)
FEATURES = {"best_cosine": 0.61, "best_term_overlap": 0.5, "best_entity_overlap": 0.0, "names_entities": 0.0}


def answered() -> AskResult:
    filtered = FilterResult(
        kept=(KEY,),
        decisions=(Decision(KEY, True, "above_threshold"), Decision(LUNCH, False, "below_threshold")),
        threshold=Threshold(0.005, "fixed", 0.401, 0.399, 0.159),
        nothing_relevant=False,
        model_calls=0,
        cached_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        gate=GateOutcome("retrieval", 0.9, 0.2, FEATURES),
    )
    answer = Answer("Press Rotate [1].", True, ("key:0",), prompt_tokens=120, completion_tokens=6, calls=1)
    return AskResult("how do I rotate a key?", RETRIEVAL, filtered, None, {"total": 40.0}, answer=answer)


def test_the_kept_chunk_its_scores_the_gate_the_threshold_the_answer_and_the_usage():
    body = json.loads(ask_json(answered(), "handbook"))
    assert body["index"] == "handbook" and body["question"] == "how do I rotate a key?"
    assert [(c["id"], c["kept"], c["reason"], c["scores"]) for c in body["chunks"]] == [
        ("key:0", True, "above_threshold", {"cosine": 0.61, "combined": 0.8}),
        ("lunch:0", False, "below_threshold", {"cosine": 0.12, "combined": 0.002}),
    ]
    assert body["chunks"][0]["retrieval_rank"] == 1 and body["chunks"][0]["text"] == "key text"
    assert body["gate"] == {"gate": "retrieval", "probability": 0.9, "cut": 0.2, "passed": True, "features": FEATURES}
    assert body["threshold"] == {"value": 0.005, "method": "fixed", "mean": 0.401, "std": 0.399}
    assert (body["answer"], body["found"], body["citations"]) == ("Press Rotate [1].", True, ["key:0"])
    assert body["usage"] == {"model_calls": 1, "cached_calls": 0, "prompt_tokens": 120, "completion_tokens": 6}
    assert body["nothing_relevant"] is False and "nothing_relevant_reason" not in body
    AskResponse.model_validate(body)  # the gateway's /v1/ask shape


def test_nothing_relevant_says_why_and_no_model_was_called():
    gate = GateOutcome("crossencoder", 0.031, 0.2, {**FEATURES, "best_relevance_logit": -4.2})
    filtered = FilterResult(
        kept=(),
        decisions=(Decision(KEY, False, "nothing_relevant"), Decision(LUNCH, False, "nothing_relevant")),
        threshold=None,
        nothing_relevant=True,
        model_calls=0,
        cached_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        gate=gate,
    )
    result = AskResult("who won in 1998?", RETRIEVAL, filtered, None, {}, answer=Answer("NOT FOUND", False, ()))
    body = json.loads(ask_json(result, "handbook"))
    assert body["nothing_relevant"] is True and body["nothing_relevant_reason"] == gate.reason()
    assert body["nothing_relevant_reason"].startswith("no candidate looks relevant: P(relevant) 0.031 < cut 0.2")
    assert body["gate"]["passed"] is False and body["threshold"] is None
    assert [c["reason"] for c in body["chunks"]] == ["nothing_relevant", "nothing_relevant"]
    assert (body["answer"], body["found"], body["citations"]) == ("NOT FOUND", False, [])
    assert body["usage"]["model_calls"] == 0


def test_a_models_numpy_scores_are_written_as_numbers_and_anything_else_is_refused():
    scored = chunk("key", 0.9, relevance=np.float32(0.25), combined=np.float64(0.5))
    filtered = FilterResult((scored,), (Decision(scored, True, "above_threshold"),), None, False, 0, 0, 0, 0)
    result = AskResult("q", RetrievalResult((scored,), "minmax", "client", 1.0, 1.0), filtered, None, {})
    assert json.loads(ask_json(result, "i"))["chunks"][0]["scores"] == {"relevance": 0.25, "combined": 0.5}
    odd = chunk("key", 0.9, combined=object())
    filtered = FilterResult((odd,), (Decision(odd, True, "above_threshold"),), None, False, 0, 0, 0, 0)
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        ask_json(AskResult("q", RetrievalResult((odd,), "minmax", "client", 1.0, 1.0), filtered, None, {}), "i")
