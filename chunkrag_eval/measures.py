"""Pure measures over what a filter kept, tested with literal values."""

from __future__ import annotations

import functools
import math
import re
import statistics
from typing import Sequence


def answer_in_context(context: str, answers: Sequence[str]) -> bool:
    """PopQA's rule: any gold answer as a case-insensitive substring."""
    lowered = context.lower()
    return any(answer.lower() in lowered for answer in answers if answer)


def answer_in_words(context: str, answers: Sequence[str]) -> bool:
    """Any gold answer as a case-insensitive whole-word match: not inside a
    longer word. A quarter of PopQA's aliases are three characters or
    shorter ("pol", "MP"), which as substrings match nearly any text."""
    return any(_whole_words(answer).search(context) for answer in answers if answer.strip())


@functools.lru_cache(maxsize=4096)
def _whole_words(answer: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + re.escape(answer.strip()) + r"(?!\w)", re.IGNORECASE)


def kept_within_budget(texts: Sequence[str], ranking: Sequence[float], budget_chars: int) -> list[int]:
    """Indices of ``texts`` taken best-ranked first while the total stays
    within ``budget_chars``, in taking order. A text that would overflow is
    skipped and smaller ones after it may still fit, so a baseline is not
    penalised for one long sentence; nothing is taken with a zero budget."""
    order = sorted(range(len(texts)), key=lambda i: -ranking[i])
    taken, used = [], 0
    for i in order:
        if used + len(texts[i]) <= budget_chars:
            taken.append(i)
            used += len(texts[i])
    return taken


def share_kept(chars: Sequence[int], ranking: Sequence[float], share: float) -> list[int]:
    """The fixed-share baseline for one question: the best-ranked chunks
    within ``share`` of the pool's characters (rounded down)."""
    return kept_within_budget(["x" * n for n in chars], ranking, math.floor(share * sum(chars)))


def one_cut_for_set(
    scores: Sequence[Sequence[float]], chars: Sequence[Sequence[int]], budget_chars: int
) -> tuple[float, list[list[int]]]:
    """One score cut for a whole set of questions: every chunk of every
    question at or above it is kept, and the cut is the one whose total kept
    characters come closest to ``budget_chars`` (on a tie, the one keeping
    fewer). Returns the cut (``inf``: nothing kept) and, per question, the
    indices kept."""
    by_score: dict[float, int] = {}
    for per_scores, per_chars in zip(scores, chars):
        for score, n in zip(per_scores, per_chars):
            by_score[score] = by_score.get(score, 0) + n
    best_cut, best_gap, used = math.inf, budget_chars, 0
    for score in sorted(by_score, reverse=True):
        used += by_score[score]
        if abs(used - budget_chars) < best_gap:
            best_cut, best_gap = score, abs(used - budget_chars)
    kept = [[i for i, s in enumerate(per) if s >= best_cut] for per in scores]
    return best_cut, kept


def discordant(first: Sequence[bool], second: Sequence[bool]) -> tuple[int, int]:
    """Paired outcomes: (right with ``first`` only, right with ``second`` only)."""
    if len(first) != len(second):
        raise ValueError(f"paired outcomes differ in length: {len(first)} and {len(second)}")
    pairs = list(zip(first, second))
    return sum(a and not b for a, b in pairs), sum(b and not a for a, b in pairs)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar test on the discordant pairs ``b`` and ``c``:
    under "no difference" each discordant pair goes either way with
    probability 1/2, so p is twice the binomial tail of the smaller count
    (capped at 1; 1 when there is no discordant pair)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "mean": round(statistics.fmean(ordered), 4),
        "p50": round(statistics.median(ordered), 4),
        "p95": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 4),
    }


def rate(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def risk_coverage(entries: Sequence[tuple[float, bool, bool]], points: int = 10) -> dict[str, object]:
    """Selective answering over one set of questions: ``entries`` hold per
    question (confidence, answered, right). The answered questions are taken
    most confident first; after each, coverage is the share of all questions
    answered so far and accuracy the share of those answered right. The area
    under that curve runs from coverage 0 to the share answered (each step
    1/n wide), so answering wrongly lowers it and not answering adds nothing;
    ``points`` of the curve are kept, evenly spaced in coverage."""
    n = len(entries)
    if not n:
        return {"questions": 0}
    ranked = sorted((c for c in range(n) if entries[c][1]), key=lambda i: -entries[i][0])
    right, area, curve = 0, 0.0, []
    for k, i in enumerate(ranked, 1):
        right += bool(entries[i][2])
        area += right / k / n
        curve.append((round(k / n, 4), round(right / k, 4)))
    step = max(1, math.ceil(len(curve) / points))
    kept = curve[step - 1 :: step]
    if curve and kept[-1] != curve[-1]:
        kept.append(curve[-1])
    return {
        "questions": n,
        "coverage": round(len(ranked) / n, 4),
        "accuracy_answered": round(right / len(ranked), 4) if ranked else None,
        "area": round(area, 4),
        "curve": kept,
    }


def cut_keeping(probabilities: Sequence[float], labels: Sequence[bool], keep: float) -> float:
    """The highest cut at which ``keep`` of the positives (label True) pass:
    a probability passes when it is at or above the cut."""
    positives = sorted(p for p, label in zip(probabilities, labels) if label)
    if not positives:
        raise ValueError("no positive to keep")
    allowed = math.floor((1 - keep) * len(positives) + 1e-9)  # positives the cut may turn away
    return positives[allowed]
