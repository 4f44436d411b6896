"""The baselines `chunkrag eval` sets against the filter, at the filter's
characters, each with a paired exact McNemar test.

Every baseline keeps chunks of the same candidate pools the filter saw:

- ``all_retrieved``: every candidate (what the filter starts from);
- ``cosine_same_chars_per_question`` / ``bm25_same_chars_per_question``:
  the best chunks by embedding cosine (BM25) until, question by question,
  they hold as many characters as the filter kept there;
- ``cosine_one_cut_for_set``: one cosine cut for the whole set, chosen so
  that the set's kept characters come closest to the filter's total;
- ``cosine_fixed_share`` / ``bm25_fixed_share``: in every question, the
  best chunks within the same share of its pool's characters, that share
  being the filter's overall share of the set's characters.

The same-characters baselines ask whether the filter ranks chunks better
within a question; the one-cut and fixed-share ones, whether it decides
better how much of each question to keep. A question counts for a baseline
when a kept chunk holds a gold answer (the same-characters baselines and
the filter read the kept text joined, as before). Pure functions over the
outcomes a run recorded, so a finished run's file is re-summarised alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from chunkrag_eval.curves import PoolQuestion, budget_curve, filter_curve
from chunkrag_eval.measures import discordant, mcnemar_exact, one_cut_for_set, rate, share_kept

# What each baseline is, in the words the summary and the plots use.
BASELINES = {
    "all_retrieved": "all retrieved chunks",
    "cosine_same_chars_per_question": "cosine, same characters per question",
    "bm25_same_chars_per_question": "BM25, same characters per question",
    "cosine_one_cut_for_set": "cosine, one cut for the set",
    "cosine_fixed_share": "cosine, a fixed share of each pool",
    "bm25_fixed_share": "BM25, a fixed share of each pool",
}


@dataclass(frozen=True, slots=True)
class Baseline:
    name: str
    flags: tuple[bool, ...]  # per question with gold answers: a kept chunk holds one
    chars: int  # characters kept over those questions
    extra: dict[str, Any]


def answer_questions(questions: Sequence[Any]) -> list[Any]:
    """The questions with gold answer strings (PopQA), the ones every
    answer-in-context figure is over."""
    return [q for q in questions if q.answer_in_context_after is not None]


def filter_share(questions: Sequence[Any]) -> float:
    before = sum(q.chars_before for q in questions)
    return sum(q.chars_after for q in questions) / before if before else 0.0


def baselines(questions: Sequence[Any]) -> list[Baseline]:
    """Each baseline's per-question flags and kept characters over the
    questions with gold answers ([] when there are none; only the first
    three when the run's file predates the per-candidate signals)."""
    qs = answer_questions(questions)
    if not qs:
        return []
    share = filter_share(qs)

    def holds(q, kept: Sequence[int]) -> bool:
        return any(q.gold[i] for i in kept)

    def kept_chars(q, kept: Sequence[int]) -> int:
        return sum(q.chars[i] for i in kept)

    out = [
        Baseline(
            "all_retrieved", tuple(bool(q.answer_in_context_before) for q in qs), sum(q.chars_before for q in qs), {}
        ),
        Baseline(
            "cosine_same_chars_per_question",
            tuple(bool(q.baseline_answer_in_context_after) for q in qs),
            sum(q.chars_after for q in qs),
            {},
        ),
        Baseline(
            "bm25_same_chars_per_question",
            tuple(bool(q.baseline_bm25_answer_in_context_after) for q in qs),
            sum(q.chars_after for q in qs),
            {},
        ),
    ]
    if any(len(q.cosine) != q.candidates or len(q.chars) != q.candidates or len(q.gold) != q.candidates for q in qs):
        return out
    cut, kept = one_cut_for_set([q.cosine for q in qs], [q.chars for q in qs], sum(q.chars_after for q in qs))
    out.append(
        Baseline(
            "cosine_one_cut_for_set",
            tuple(holds(q, k) for q, k in zip(qs, kept)),
            sum(kept_chars(q, k) for q, k in zip(qs, kept)),
            {"cut": round(cut, 6) if math.isfinite(cut) else None},
        )
    )
    for signal in ("cosine", "bm25"):
        kept = [share_kept(q.chars, getattr(q, signal), share) for q in qs]
        out.append(
            Baseline(
                f"{signal}_fixed_share",
                tuple(holds(q, k) for q, k in zip(qs, kept)),
                sum(kept_chars(q, k) for q, k in zip(qs, kept)),
                {"share": round(share, 4)},
            )
        )
    return out


def paired(filter_flags: Sequence[bool], baseline_flags: Sequence[bool]) -> dict[str, Any]:
    """The discordant pairs [filter only, baseline only] and the exact
    McNemar p of the filter against a baseline on the same questions."""
    b, c = discordant(filter_flags, baseline_flags)
    return {"discordant": [b, c], "p_vs_filter": round(mcnemar_exact(b, c), 4)}


def baselines_summary(questions: Sequence[Any]) -> dict[str, Any]:
    """The summary's ``baselines`` block: per baseline, what it is, its
    answer-in-context rate, its share of the characters, and the paired test
    against the filter; with generated answers for all retrieved chunks,
    their accuracy against the filter's too."""
    qs = answer_questions(questions)
    filter_flags = [bool(q.answer_in_context_after) for q in qs]
    before = sum(q.chars_before for q in qs)
    out: dict[str, Any] = {}
    for baseline in baselines(questions):
        out[baseline.name] = {
            "what": BASELINES[baseline.name],
            "answer_in_context": rate(baseline.flags),
            "context_chars_kept_share": round(baseline.chars / before, 4) if before else None,
            **paired(filter_flags, baseline.flags),
            **baseline.extra,
        }
    both = [q for q in questions if q.correct is not None and q.all_retrieved_correct is not None]
    if both:
        entry = out.setdefault("all_retrieved", {"what": BASELINES["all_retrieved"]})
        test = paired([q.correct for q in both], [q.all_retrieved_correct for q in both])
        entry.update(
            {
                "accuracy": rate([q.all_retrieved_correct for q in both]),
                "filter_accuracy": rate([q.correct for q in both]),
                "accuracy_graded": len(both),
                "accuracy_discordant": test["discordant"],
                "accuracy_p_vs_filter": test["p_vs_filter"],
            }
        )
    return out


# Points on each swept curve of the plot: budget shares 0, 0.05, ..., 1, and
# as many cuts, at the quantiles of the scores swept.
CURVE_POINTS = 21


def curves(questions: Sequence[Any]) -> dict[str, list[tuple[float, float]]]:
    """Characters kept (share of the set's) against answers kept (share of
    the questions whose pool held one), swept: the filter's own score cut
    (the run's threshold rule aside), one cosine cut for the set, and the
    fixed-share baselines ({} without gold answers or per-candidate signals)."""
    qs = [q for q in answer_questions(questions) if len(q.cosine) == q.candidates == len(q.chars) == len(q.gold)]
    if not qs:
        return {}
    pools = [PoolQuestion(tuple(q.chars), tuple(q.gold)) for q in qs]
    shares = [i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    filter_scores = [[-1.0 if s is None else s for s in q.scores] for q in qs]
    out = {
        "filter, its score cut swept": filter_curve(pools, filter_scores, _cuts(filter_scores)),
        "cosine_one_cut_for_set": filter_curve(pools, [q.cosine for q in qs], _cuts([q.cosine for q in qs])),
        "cosine_fixed_share": budget_curve(pools, [q.cosine for q in qs], shares),
        "bm25_fixed_share": budget_curve(pools, [q.bm25 for q in qs], shares),
    }
    return {name: sorted((p.chars, p.kept) for p in points if p.kept is not None) for name, points in out.items()}


def points(questions: Sequence[Any]) -> dict[str, tuple[float, float]]:
    """The same axes for what ran once: the filter as run, the
    same-characters baselines and all retrieved chunks."""
    qs = answer_questions(questions)
    in_pool = [q for q in qs if q.answer_in_context_before]
    before = sum(q.chars_before for q in qs)
    if not in_pool or not before:
        return {}
    share = sum(q.chars_after for q in qs) / before
    return {
        "filter": (share, sum(bool(q.answer_in_context_after) for q in in_pool) / len(in_pool)),
        "cosine_same_chars_per_question": (
            share,
            sum(bool(q.baseline_answer_in_context_after) for q in in_pool) / len(in_pool),
        ),
        "bm25_same_chars_per_question": (
            share,
            sum(bool(q.baseline_bm25_answer_in_context_after) for q in in_pool) / len(in_pool),
        ),
        "all_retrieved": (1.0, 1.0),
    }


def _cuts(scores: Sequence[Sequence[float]]) -> list[float]:
    values = np.array([s for per in scores for s in per], dtype=np.float64)
    if not len(values):
        return [0.0]
    return sorted({*np.quantile(values, np.linspace(0.0, 1.0, CURVE_POINTS)).tolist(), float(values.max()) + 1.0})
