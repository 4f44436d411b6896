"""Where the project's relevance model scores a query's candidates, and
scoring that degrades from one place to the next instead of failing.

A place is a :class:`RelevanceModel`: the model in this process
(``chunkrag_core.providers.local_relevance``), or the Celery workers
(``workers.relevance_dispatch``). :class:`DegradingRelevance` tries its
places in order; one that raises :class:`JudgingUnavailable` (its broker or
its workers cannot score now) hands the query to the next, and the result
says where the candidates were scored and why not where meant to
(``FilterResult.relevance_by`` and ``relevance_by_reason``). Unlike judging
there is no retrieval-only last step: a query that asked for the model is
scored by it, or fails with the model's own error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from chunkrag_filter.judging import JudgingUnavailable

log = logging.getLogger(__name__)


class RelevanceModel(Protocol):
    """P(the chunk holds what the query asks), one per text, in order."""

    def score(self, query: str, texts: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class Scored:
    """A query's relevance scores and where they were made. ``by`` is None
    when the model did not say; ``reason`` says why scoring did not run
    where it was meant to (None when it did)."""

    scores: tuple[float, ...]
    by: str | None = None
    reason: str | None = None


@runtime_checkable
class ReportingRelevance(Protocol):
    """A relevance model that also says where it scored."""

    def scored(self, query: str, texts: Sequence[str]) -> Scored: ...


def score_relevance(model: RelevanceModel, query: str, texts: Sequence[str]) -> Scored:
    """``texts`` scored by ``model``, and where, when it says. A model that
    returns another number of scores than texts is an error, never a
    silently shifted ranking."""
    if isinstance(model, ReportingRelevance):
        scored = model.scored(query, texts)
    else:
        scored = Scored(tuple(model.score(query, texts)))
    if len(scored.scores) != len(texts):
        raise ValueError(f"the relevance model returned {len(scored.scores)} scores for {len(texts)} texts")
    return scored


def ranked(scores: Sequence[float]) -> list[tuple[int, float]]:
    """(index, score) best first, as a reranker returns them; ties keep their order."""
    return sorted(enumerate(scores), key=lambda pair: -pair[1])


class DegradingRelevance:
    """Scores in the first of ``places`` ((name, model) pairs: ``BY_WORKERS``,
    ``BY_GATEWAY``) that can. Each step down is logged and named in
    :attr:`Scored.reason`; the last place's errors propagate."""

    def __init__(self, places: Sequence[tuple[str, RelevanceModel]]):
        if not places:
            raise ValueError("relevance scoring needs at least one place to run")
        self.places = tuple(places)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return list(self.scored(query, texts).scores)

    def rerank(self, query: str, texts: Sequence[str]) -> list[tuple[int, float]]:
        return ranked(self.scored(query, texts).scores)

    def scored(self, query: str, texts: Sequence[str]) -> Scored:
        reasons: list[str] = []
        for step, (name, model) in enumerate(self.places):
            last = step + 1 == len(self.places)
            try:
                scores = model.score(query, texts)
            except JudgingUnavailable as exc:
                if last:
                    raise
                log.warning("relevance scoring on %s is unavailable: %s", name, exc)
                reasons.append(f"{name}: {exc.reason}")
                log.warning("relevance scoring falls back to %s: %s", self.places[step + 1][0], reasons[-1])
                continue
            return Scored(tuple(scores), name, "; ".join(reasons) or None)
        raise AssertionError("unreachable: the last place returns or raises")
