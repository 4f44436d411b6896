"""The shipped cut for ``relevance: crossencoder``, by a rule fixed before any held-out figure.

Rule: on the relevance model's own validation questions (SQuAD articles and
NQ questions kept out of training; never a held-out dataset), the highest
probability cut at which at least ``KEEP_ANSWERS`` of the questions that
have a relevant chunk still keep one. The calibration file's ``relevance``
model is the relevance model's own log-odds (weight 1, bias 0), so its
probability is the model's: nothing else is fitted.
"""

from __future__ import annotations

import math
from typing import Sequence

from chunkrag_train.pairs import Pair

# Share of validation questions whose relevant chunk must survive the cut:
# the shipped retrieval cut keeps 0.988 of PopQA's answers in the pool, and
# answers written from fewer fell by points; 0.95 trades a little of that
# for a cut that drops chunks.
KEEP_ANSWERS = 0.95


def choose_cut(pairs: Sequence[Pair], scores: Sequence[float], keep: float = KEEP_ANSWERS) -> float:
    """The highest cut keeping a relevant chunk for ``keep`` of the questions
    that have one: the (1 - keep) quantile of each question's best relevant score."""
    best: dict[str, float] = {}
    for pair, score in zip(pairs, scores):
        if pair.label:
            best[pair.group] = max(best.get(pair.group, 0.0), score)
    if not best:
        raise ValueError("no question with a relevant chunk")
    ordered = sorted(best.values())
    # Rounded first: (1 - 0.9) * 10 is 0.9999999999999998 in floating point.
    allowed_losses = math.floor(round((1.0 - keep) * len(ordered), 9))
    return ordered[allowed_losses]
