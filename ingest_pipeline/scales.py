"""Larger-scale chunks for multi-scale ensembling, as pure functions.

A document is also cut into chunks of about ``scale`` tokens (a token taken
as ``CHARS_PER_TOKEN`` characters), at the same sentence boundaries the
semantic chunker uses: sentences are added to a chunk while its text (first
sentence's start to last sentence's end) stays within the target, so every
chunk is exact document text between two sentence boundaries.
"""

from __future__ import annotations

from typing import Sequence

from chunkrag_core.settings import CHARS_PER_TOKEN
from ingest_pipeline.chunking import group_sentences

Span = tuple[int, int]


def target_chars(scale: int) -> int:
    """The character length a chunk of ``scale`` tokens aims at."""
    return scale * CHARS_PER_TOKEN


def group_to_size(spans: Sequence[Span], max_chars: int) -> list[range]:
    """Sentence indices of each chunk, as consecutive ranges: greedy, a new
    chunk starts where the next sentence would take the chunk past
    ``max_chars`` (a single sentence longer than that is a chunk alone)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    # The semantic grouping with no similarity break: only the length cap cuts.
    never = [1.0] * max(len(spans) - 1, 0)
    return group_sentences(spans, never, float("-inf"), max_chars)
