"""Answer kept against characters kept: the measures of a filter as a curve.

A question is a list of candidates (characters, gold) plus the characters
and gold of the near-duplicates the filter dropped before scoring (they
count in the pool, never in what is kept). Answer kept is the share of the
questions whose pool held a gold chunk for which a kept chunk holds one;
characters kept is all kept characters over all pool characters (a ratio
of sums, as ``chunkrag eval`` reports). Pure functions, tested with literal
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from chunkrag_eval.measures import kept_within_budget


@dataclass(frozen=True, slots=True)
class PoolQuestion:
    chars: tuple[int, ...]  # candidates, in retrieval order
    gold: tuple[bool, ...]
    dropped_chars: int = 0  # near-duplicates dropped before scoring
    dropped_gold: bool = False

    @property
    def pool_chars(self) -> int:
        return sum(self.chars) + self.dropped_chars

    @property
    def has_gold(self) -> bool:
        return any(self.gold) or self.dropped_gold


@dataclass(frozen=True, slots=True)
class Point:
    cut: float | None  # the probability cut or budget share that made it
    chars: float  # characters kept, share of the pool's
    kept: float | None  # answer kept, share of the questions whose pool held one
    nothing: float = 0.0  # share of questions where nothing passed ("nothing relevant")
    nothing_precision: float | None = None  # of those, share whose pool held nothing


def kept_at_cut(scores: Sequence[float], cut: float, fallback_k: int = 0) -> tuple[list[int], bool]:
    """Indices at or above ``cut``, and whether none was ("nothing
    relevant"); then the first ``fallback_k`` in retrieval order are kept
    (0: nothing, the filter's ``not_found`` fallback; the default filter's
    ``top_k`` keeps 3)."""
    kept = [i for i, s in enumerate(scores) if s >= cut]
    if kept:
        return kept, False
    return list(range(min(fallback_k, len(scores)))), True


def point(
    questions: Sequence[PoolQuestion],
    kept: Sequence[Sequence[int]],
    cut: float | None = None,
    nothing: Sequence[bool] = (),
) -> Point:
    """The point of one decision per question (indices kept)."""
    total = sum(q.pool_chars for q in questions)
    chars = sum(sum(q.chars[i] for i in k) for q, k in zip(questions, kept))
    with_gold = [(q, k) for q, k in zip(questions, kept) if q.has_gold]
    answered = sum(any(q.gold[i] for i in k) for q, k in with_gold)
    flagged = [q for q, flag in zip(questions, nothing) if flag]
    return Point(
        cut,
        chars / total if total else 0.0,
        answered / len(with_gold) if with_gold else None,
        len(flagged) / len(questions) if questions else 0.0,
        sum(not q.has_gold for q in flagged) / len(flagged) if flagged else None,
    )


def filter_point(
    questions: Sequence[PoolQuestion], scores: Sequence[Sequence[float]], cut: float, fallback_k: int = 0
) -> Point:
    decisions = [kept_at_cut(s, cut, fallback_k) for s in scores]
    return point(questions, [k for k, _ in decisions], cut, [flag for _, flag in decisions])


@dataclass(frozen=True)
class Flat:
    """One set's candidates as flat arrays, for sweeping many cuts fast (the
    same figures as :func:`filter_point` without a fallback)."""

    question: np.ndarray  # question number of each candidate
    chars: np.ndarray
    gold: np.ndarray
    has_gold: np.ndarray  # per question
    total_chars: float

    @classmethod
    def of(cls, questions: Sequence[PoolQuestion]) -> Flat:
        return cls(
            np.array([n for n, q in enumerate(questions) for _ in q.chars], dtype=np.int64),
            np.array([c for q in questions for c in q.chars], dtype=np.float64),
            np.array([g for q in questions for g in q.gold], dtype=bool),
            np.array([q.has_gold for q in questions], dtype=bool),
            float(sum(q.pool_chars for q in questions)),
        )

    def at(self, scores: np.ndarray, cut: float) -> Point:
        keep = scores >= cut
        n = len(self.has_gold)
        passed = np.bincount(self.question, weights=keep, minlength=n) > 0
        hits = np.bincount(self.question, weights=keep & self.gold, minlength=n) > 0
        nothing = ~passed
        flagged = int(nothing.sum())
        return Point(
            cut,
            float(self.chars[keep].sum() / self.total_chars) if self.total_chars else 0.0,
            float(hits[self.has_gold].mean()) if self.has_gold.any() else None,
            flagged / n if n else 0.0,
            float((~self.has_gold[nothing]).mean()) if flagged else None,
        )


def filter_curve(
    questions: Sequence[PoolQuestion], scores: Sequence[Sequence[float]], cuts: Sequence[float]
) -> list[Point]:
    flat = Flat.of(questions)
    values = np.array([s for per in scores for s in per], dtype=np.float64)
    return [flat.at(values, c) for c in cuts]


def budget_kept(question: PoolQuestion, signal: Sequence[float], budget: int) -> list[int]:
    """The candidates best by ``signal`` within ``budget`` characters."""
    return kept_within_budget(["x" * n for n in question.chars], list(signal), budget)


def budget_curve(
    questions: Sequence[PoolQuestion], signal: Sequence[Sequence[float]], shares: Sequence[float]
) -> list[Point]:
    """A ranking signal (cosine, BM25) given each question a budget of
    ``share`` of its pool's characters, for each share."""
    return [
        point(questions, [budget_kept(q, s, int(share * q.pool_chars)) for q, s in zip(questions, signal)], share)
        for share in shares
    ]


def same_budgets(
    questions: Sequence[PoolQuestion], signal: Sequence[Sequence[float]], kept: Sequence[Sequence[int]]
) -> Point:
    """The signal given, question by question, the characters a filter kept."""
    return point(
        questions,
        [budget_kept(q, s, sum(q.chars[i] for i in k)) for q, s, k in zip(questions, signal, kept)],
    )


def kept_at_chars(curve: Sequence[Point], share: float) -> float | None:
    """Answer kept at ``share`` of the characters, interpolated linearly
    between the curve's points on either side (None outside its range)."""
    points = sorted((p.chars, p.kept) for p in curve if p.kept is not None)
    for (c0, k0), (c1, k1) in zip(points, points[1:]):
        if c0 <= share <= c1:
            return k0 if c1 == c0 else k0 + (k1 - k0) * (share - c0) / (c1 - c0)
    if points and points[-1][0] == share:
        return points[-1][1]
    return None


def chars_for_kept(curve: Sequence[Point], target: float) -> float | None:
    """The fewest characters at which the curve keeps ``target`` of the
    answers, interpolated (None when it never does)."""
    points = sorted((p.chars, p.kept) for p in curve if p.kept is not None)
    previous = None
    for chars, kept in points:
        if kept >= target:
            if previous is None or previous[1] >= target:
                return chars
            c0, k0 = previous
            return c0 + (chars - c0) * (target - k0) / (kept - k0)
        previous = (chars, kept)
    return None


def highest_cut(
    per_set: Sequence[tuple[Sequence[PoolQuestion], Sequence[Sequence[float]]]], cuts: Sequence[float], target: float
) -> float:
    """The highest cut whose mean answer kept over the sets is >= ``target``
    (the lowest cut when none reaches it)."""
    flats = [(Flat.of(qs), np.array([s for per in scores for s in per], dtype=np.float64)) for qs, scores in per_set]
    for cut in sorted(cuts, reverse=True):
        values = [flat.at(scores, cut).kept for flat, scores in flats]
        known = [v for v in values if v is not None]
        if known and sum(known) / len(known) >= target:
            return cut
    return min(cuts)
