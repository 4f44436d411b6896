"""Ordering the final context against "lost in the middle": models use the
start and the end of a long context best, so the strongest chunks go to the
two ends and the weakest to the middle."""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")


def lost_in_the_middle(ranked: Sequence[T]) -> list[T]:
    """Best first, second best last, third second, fourth second to last, …

    >>> lost_in_the_middle([1, 2, 3, 4, 5])
    [1, 3, 5, 4, 2]
    """
    front: list[T] = []
    back: list[T] = []
    for rank, item in enumerate(ranked):
        (front if rank % 2 == 0 else back).append(item)
    return front + back[::-1]
