"""Semantic chunking as the ChunkRAG paper does it, as pure functions.

Walk the sentences in order; start a new chunk where the cosine similarity of
a sentence to the one before it falls below the threshold, or where adding it
would make the chunk longer than ``max_chars``. The threshold is either a
fixed θ (the paper's) or a percentile of the document's own consecutive
similarities (LangChain's and Kamradt's breakpoint), which means the same
thing whatever range the embedding model's similarities sit in.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Span = tuple[int, int]


def consecutive_similarities(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row to the row before it (n-1 values) for
    L2-normalised rows."""
    if len(vectors) < 2:
        return np.zeros(0, dtype=np.float32)
    return np.einsum("ij,ij->i", vectors[1:], vectors[:-1])


def percentile_threshold(similarities: Sequence[float], percentile: float) -> float:
    """The similarity below which a break falls at ``percentile`` of the
    distances (1 - similarity): breaking where the distance exceeds its
    95th percentile is breaking where the similarity is below its 5th.
    Fewer than two sentences: no break (-inf)."""
    if not 0.0 <= percentile <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {percentile}")
    if len(similarities) == 0:
        return float("-inf")
    return float(np.percentile(np.asarray(similarities, dtype=np.float64), 100.0 - percentile))


def group_sentences(
    spans: Sequence[Span], similarities: Sequence[float], threshold: float, max_chars: int, min_chars: int = 0
) -> list[range]:
    """Indices of the sentences in each chunk, as consecutive ranges.

    ``similarities[i]`` is between sentence ``i`` and ``i + 1``. A chunk's
    length is measured from its first sentence's start to its last
    sentence's end, so it is exactly the text the chunk will hold. A chunk
    shorter than ``min_chars`` is not closed at a similarity drop (only the
    ``max_chars`` cap closes it), so no chunk is a stray short sentence.
    """
    if len(similarities) != max(len(spans) - 1, 0):
        raise ValueError(f"{len(spans)} sentences need {max(len(spans) - 1, 0)} similarities, got {len(similarities)}")
    groups: list[range] = []
    first = 0
    for i in range(1, len(spans)):
        too_long = spans[i][1] - spans[first][0] > max_chars
        long_enough = spans[i - 1][1] - spans[first][0] >= min_chars
        if (similarities[i - 1] < threshold and long_enough) or too_long:
            groups.append(range(first, i))
            first = i
    if spans:
        groups.append(range(first, len(spans)))
    return groups
