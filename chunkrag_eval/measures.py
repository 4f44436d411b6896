"""Pure measures over what a filter kept, tested with literal values."""

from __future__ import annotations

import statistics
from typing import Sequence


def answer_in_context(context: str, answers: Sequence[str]) -> bool:
    """PopQA's rule: any gold answer as a case-insensitive substring."""
    lowered = context.lower()
    return any(answer.lower() in lowered for answer in answers if answer)


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
