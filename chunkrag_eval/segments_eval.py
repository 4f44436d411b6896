"""Segments in the evaluation: relevant segment extraction over the judged
candidates of one question, within the characters the filter kept, so the
two contexts are compared at the same size."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_eval.measures import answer_in_context
from chunkrag_filter.pipeline import FilterResult
from search_extension.segments import FetchPositions, SegmentSettings, extract_segments


def segment_answer_in_context(
    candidates: Sequence[Chunk],
    result: FilterResult,
    answers: Sequence[str],
    fetch: FetchPositions,
    settings: SegmentSettings,
    budget_chars: int,
) -> bool:
    """Is a gold answer in the segments RSE builds from ``candidates`` (in
    retrieval order, valued by the judge's scores in ``result``) within
    ``budget_chars``? Nothing fits a zero budget."""
    if budget_chars < 1:
        return False
    judged = {d.chunk.chunk_id: d.chunk for d in result.decisions}
    ranked = [judged.get(c.chunk_id, c) for c in candidates]
    segments = extract_segments(ranked, fetch, dataclasses.replace(settings, max_total_chars=budget_chars))
    return answer_in_context(" ".join(s.text for s in segments), answers)
