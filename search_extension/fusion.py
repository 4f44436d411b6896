"""Client-side fusion of ranked lists, for clusters without fusion retrievers.

Each list is ``[(hit_id, score), ...]`` best first. Pure functions.
"""

from __future__ import annotations

from typing import Hashable, Sequence

Ranked = Sequence[tuple[Hashable, float]]


def minmax_normalise(ranked: Ranked) -> dict[Hashable, float]:
    """Scores rescaled to 0..1 within the list; a list whose scores are all
    equal maps them all to 1 (they are equally the best this list has)."""
    if not ranked:
        return {}
    scores = [s for _, s in ranked]
    low, high = min(scores), max(scores)
    if high == low:
        return {hit: 1.0 for hit, _ in ranked}
    return {hit: (score - low) / (high - low) for hit, score in ranked}


def minmax_fuse(lists: Sequence[Ranked], weights: Sequence[float], size: int) -> list[tuple[Hashable, float]]:
    """Weighted sum of min-max normalised scores; a hit absent from a list
    gets 0 from it. Ties keep the order of first appearance."""
    if len(lists) != len(weights):
        raise ValueError("one weight per list")
    fused: dict[Hashable, float] = {}
    for ranked, weight in zip(lists, weights):
        for hit, score in minmax_normalise(ranked).items():
            fused[hit] = fused.get(hit, 0.0) + weight * score
    return sorted(fused.items(), key=lambda item: -item[1])[:size]


def rrf_fuse(lists: Sequence[Ranked], size: int, rank_constant: int = 60) -> list[tuple[Hashable, float]]:
    """Reciprocal rank fusion: sum of 1 / (rank_constant + rank), rank from 1."""
    fused: dict[Hashable, float] = {}
    for ranked in lists:
        for rank, (hit, _) in enumerate(ranked, start=1):
            fused[hit] = fused.get(hit, 0.0) + 1.0 / (rank_constant + rank)
    return sorted(fused.items(), key=lambda item: -item[1])[:size]
