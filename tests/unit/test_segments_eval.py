"""RSE in the evaluation: judged candidates, the kept characters as budget."""

from __future__ import annotations

from chunkrag_core.chunk import Chunk
from chunkrag_eval.segments_eval import segment_answer_in_context
from chunkrag_filter.pipeline import Decision, FilterResult
from search_extension.segments import SegmentSettings

TEXT = "The Normans came from Normandy. Normandy is in France. Rollo led them."
SPANS = [(0, 31), (32, 54), (55, 70)]


def chunk(position, score=None, **stage):
    start, end = SPANS[position]
    previous = SPANS[position - 1][1] if position else 0
    return Chunk(
        doc_id="pool",
        position=position,
        text=TEXT[start:end],
        start=start,
        end=end,
        score=score,
        stage_scores=stage,
        lead=TEXT[previous:start],
    )


def result(*decided):
    return FilterResult(
        kept=(),
        decisions=tuple(Decision(c, True, "above_threshold") for c in decided),
        threshold=None,
        nothing_relevant=False,
        model_calls=0,
        cached_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
    )


def test_the_judged_chunk_wins_over_retrieval_order_within_the_budget():
    candidates = [chunk(0, score=2.0), chunk(1, score=1.0), chunk(2, score=0.5)]
    judged = result(
        chunk(0, score=2.0, combined=0.1), chunk(1, score=1.0, combined=0.95), chunk(2, score=0.5, combined=0.05)
    )

    def fetch(wanted):
        return []  # every position is a candidate: nothing to fetch

    assert segment_answer_in_context(candidates, judged, ["France"], fetch, SegmentSettings(), budget_chars=30)
    # By retrieval order alone the first sentence would win, and it lacks the answer.
    unjudged = result(*candidates)
    assert not segment_answer_in_context(candidates, unjudged, ["France"], fetch, SegmentSettings(), budget_chars=31)
    assert not segment_answer_in_context(candidates, judged, ["France"], fetch, SegmentSettings(), budget_chars=0)
