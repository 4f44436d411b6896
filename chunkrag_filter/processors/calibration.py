"""A calibrated judge: the LLM's listwise share combined with the cheap
signals the hybrid search already computed, through a small logistic model.

Why: alone, the small local model's share separates answer-bearing chunks no
better than embedding cosine does; the two make different mistakes. A
logistic model over a handful of features, fitted on dev data only and
cross-validated by question, turns them into one probability of relevance
that a threshold can cut. The fitted coefficients ship as constants
(:data:`RETRIEVAL_MODEL`, :data:`JUDGED_MODEL`), each feature documented below.

Everything here is pure: features from chunks' stage scores, the logistic
fit (Newton steps with an L2 penalty, numpy only), and the measures used to
choose it (ROC AUC, F1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

# Each feature, as computed by :func:`chunk_features` for one candidate among
# a query's candidates:
#   judge       the LLM's listwise share of P(answers) (mean of both orders when
#               asked twice); 0 when the model did not judge the chunk
#   judged      1 when the model judged the chunk, else 0 (a cascade judges
#               only the best-retrieved candidates)
#   judge_top   1 when the chunk holds the largest share of its batch (the
#               passage the model would name)
#   cosine      raw cosine of query and chunk embeddings
#   cosine_gap  cosine minus the best cosine among the candidates (<= 0):
#               per-query normalisation, since cosine levels vary by question
#   bm25        BM25 score min-max normalised over the candidates (0..1)
#   inv_rank    1 / (1 + hybrid retrieval rank), rank from 0
#   log_chars   log of the chunk's length in hundreds of characters
FEATURES = ("judge", "judged", "judge_top", "cosine", "cosine_gap", "bm25", "inv_rank", "log_chars")
CHEAP_FEATURES = ("cosine", "cosine_gap", "bm25", "inv_rank", "log_chars")


@dataclass(frozen=True, slots=True)
class LogisticModel:
    """P(relevant) = sigmoid(bias + sum(weight * feature)), on raw features."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float

    def __post_init__(self) -> None:
        if len(self.names) != len(self.weights):
            raise ValueError("one weight per feature name")
        unknown = set(self.names) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)}; known: {', '.join(FEATURES)}")

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(w * features[name] for name, w in zip(self.names, self.weights))
        return _sigmoid(z)

    @property
    def uses_judge(self) -> bool:
        return any(name in ("judge", "judged", "judge_top") for name in self.names)


# The shipped models, fitted by `python -m bench.judge_study ablate` on all
# 200 PopQA dev questions (bench/results/filter_popqa_dev_ablation.json,
# "fitted"); the cross-validated figures are in bench/REPORT.md.
#
# RETRIEVAL_MODEL: the retrieval signals alone, no model call: the default.
# Read its weights as: the raw cosine carries most of the evidence; a good
# retrieval rank, a high BM25 and a longer chunk add to it; the gap to the
# question's best cosine adds nothing once cosine and rank are in.
RETRIEVAL_MODEL = LogisticModel(
    names=("cosine", "cosine_gap", "bm25", "inv_rank", "log_chars"),
    weights=(3.376989, 0.006575, 0.625046, 0.766057, 0.826934),
    bias=-3.754981,
)
# JUDGED_MODEL: the listwise judge's share on the best nine (as retrieved,
# Qwen2.5-Coder-1.5B) beside the same signals, used when the judge runs.
# On these 200 questions the judge's share earns a small weight (0.85 against
# cosine's 3.58) and moves the cross-validated AUC from 0.804 to 0.805: the
# small local model adds little that retrieval does not already know.
# Another model's shares are scaled differently: refit with the same command.
JUDGED_MODEL = LogisticModel(
    names=FEATURES,
    weights=(0.84519, -0.506042, 0.305287, 3.583825, 0.329891, 0.56639, 0.404829, 0.812285),
    bias=-3.377824,
)
SHIPPED_MODELS = (RETRIEVAL_MODEL, JUDGED_MODEL)


def shipped_model(judging: bool) -> LogisticModel:
    """The shipped calibration that matches whether the judge runs: the
    retrieval-only model cannot read a share, and the judged one expects
    one."""
    return JUDGED_MODEL if judging else RETRIEVAL_MODEL


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def chunk_features(
    stage_scores: Sequence[Mapping[str, float]],
    judge_scores: Sequence[float | None],
    lengths: Sequence[int],
    batches: Sequence[Sequence[int]] = (),
) -> list[dict[str, float]]:
    """The features of each candidate of one query, in retrieval order.

    ``stage_scores`` are the chunks' retrieval signals (``cosine``, ``bm25``
    from the hybrid search); ``judge_scores`` the LLM's shares (None where
    not judged); ``batches`` the listwise batches (indices) the shares were
    asked in, for ``judge_top``."""
    cosines = [s.get("cosine", 0.0) for s in stage_scores]
    best_cosine = max(cosines, default=0.0)
    top_of_batch: set[int] = set()
    for batch in batches:
        judged = [(judge_scores[i], i) for i in batch if judge_scores[i] is not None]
        if judged:
            top_of_batch.add(max(judged)[1])
    rows = []
    for rank, (scores, judge, length) in enumerate(zip(stage_scores, judge_scores, lengths)):
        cosine = scores.get("cosine", 0.0)
        rows.append(
            {
                "judge": judge if judge is not None else 0.0,
                "judged": 1.0 if judge is not None else 0.0,
                "judge_top": 1.0 if rank in top_of_batch else 0.0,
                "cosine": cosine,
                "cosine_gap": cosine - best_cosine,
                "bm25": scores.get("bm25", 0.0),
                "inv_rank": 1.0 / (1.0 + rank),
                "log_chars": math.log(max(length, 1) / 100.0),
            }
        )
    return rows


def fit_logistic(
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    names: Sequence[str],
    l2: float = 1.0,
    iterations: int = 50,
) -> LogisticModel:
    """Maximum-likelihood logistic regression with an L2 penalty ``l2`` on
    the standardised weights (not the bias), by Newton's method. Features
    are standardised for the fit and the weights mapped back to raw units,
    so the model applies to raw features."""
    if len(rows) != len(labels) or not rows:
        raise ValueError("need one label per row, and at least one row")
    x = np.array([[row[n] for n in names] for row in rows], dtype=np.float64)
    y = np.array(labels, dtype=np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], float(l2))
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -35, 35)))
        gradient = z.T @ (p - y) + penalty * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    weights = w[1:] / scale
    bias = w[0] - float(np.sum(w[1:] * mean / scale))
    return LogisticModel(tuple(names), tuple(round(float(v), 6) for v in weights), round(float(bias), 6))


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Probability that a random positive outscores a random negative (ties
    count half); None without both classes."""
    positives = [s for s, label in zip(scores, labels) if label]
    negatives = [s for s, label in zip(scores, labels) if not label]
    if not positives or not negatives:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # average rank of a tie group, from 1
        i = j + 1
    positive_rank_sum = sum(r for r, label in zip(ranks, labels) if label)
    n_pos, n_neg = len(positives), len(negatives)
    return (positive_rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def f1_at(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> float:
    predicted = [s >= threshold for s in scores]
    tp = sum(p and label for p, label in zip(predicted, labels))
    fp = sum(p and not label for p, label in zip(predicted, labels))
    fn = sum(label and not p for p, label in zip(predicted, labels))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def best_f1(scores: Sequence[float], labels: Sequence[bool]) -> tuple[float, float]:
    """The best F1 over every threshold, and that threshold (an upper bound:
    the threshold is chosen on the same data)."""
    best = (0.0, 0.0)
    for threshold in sorted(set(scores)):
        best = max(best, (f1_at(scores, labels, threshold), threshold))
    return best
