"""A calibrated filter: the retrieval signals (and the LLM's listwise share
when the judge runs) combined through a small logistic model into one
probability of relevance that a cut decides on.

Why: alone, the small local model's share separates answer-bearing chunks no
better than embedding cosine does; the signals make different mistakes. A
logistic model over a handful of features turns them into one probability.

The fitted models and their cuts are a file, not constants: a JSON document
(:func:`load_calibration`) holding a ``retrieval`` model (no judge) and a
``judged`` one, each with its features, weights, bias and cut. The shipped
file (``chunkrag_filter/calibration/default.json``) was fitted across
datasets by ``python -m bench.filter_loo run``; ``chunkrag calibrate``
writes one for another chat model or the user's own labelled data, chosen
with ``CHUNKRAG_CALIBRATION_FILE``.

Everything here is pure apart from reading and writing that file: features
from chunks' stage scores, the logistic fit (Newton steps with an L2
penalty, numpy only), and the measures used to choose it (ROC AUC, F1).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from chunkrag_filter.processors.features import CONTEXT_FEATURES
from chunkrag_filter.processors.gate import GATE_FEATURES, GATE_RELEVANCE_FEATURES

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
#   relevance_logit  the project's relevance model's log-odds that the chunk
#               holds what the query asks (chunkrag_core/providers/
#               local_relevance.py), clipped to +-12; 0 when it did not run
#   relevance_gap    relevance_logit minus the best among the candidates (<= 0)
# and the context features of processors/features.py (neighbours, passage,
# query-term, entity and header overlap, position). A gate model (the
# query-level "is anything relevant" decision) reads the query-level features
# of processors/gate.py instead.
JUDGE_FEATURES = ("judge", "judged", "judge_top")
CHEAP_FEATURES = ("cosine", "cosine_gap", "bm25", "inv_rank", "log_chars")
RELEVANCE_FEATURES = ("relevance_logit", "relevance_gap")
CHUNK_FEATURES = JUDGE_FEATURES + CHEAP_FEATURES + RELEVANCE_FEATURES + CONTEXT_FEATURES
FEATURES = CHUNK_FEATURES + GATE_FEATURES
# The relevance model's logits are clipped here: past it the probability is
# 1 or 0 to six places, and a calibration must not extrapolate further.
RELEVANCE_LOGIT_CLIP = 12.0
CALIBRATION_FORMAT = "chunkrag-calibration/1"
# The cut of a model that names none (a file from before cuts were stored).
DEFAULT_CUT = 0.4


class CalibrationError(ValueError):
    """A calibration file that cannot be read or used; the message names it."""


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
        return any(name in JUDGE_FEATURES for name in self.names)

    @property
    def uses_context(self) -> bool:
        return any(name in CONTEXT_FEATURES for name in self.names)

    @property
    def uses_relevance(self) -> bool:
        return any(name in RELEVANCE_FEATURES + GATE_RELEVANCE_FEATURES for name in self.names)

    @property
    def is_gate(self) -> bool:
        """Reads query-level features (processors/gate.py), not a chunk's."""
        return any(name in GATE_FEATURES for name in self.names)


# The relevance model's own probability as a calibration: sigmoid(logit).
RELEVANCE_ONLY = LogisticModel(("relevance_logit",), (1.0,), 0.0)


@dataclass(frozen=True, slots=True)
class Calibrated:
    """A model and the probability at which the filter keeps a chunk."""

    model: LogisticModel
    cut: float


@dataclass(frozen=True, slots=True)
class CalibrationFile:
    """The models of one calibration file: ``retrieval`` for the filter
    without the judge, ``judged`` (None when the file has none) with it, and
    ``relevance`` (None when none) for the filter scored by the project's
    relevance model (``relevance: crossencoder``) without the judge; and
    the gates (None when none), P(some candidate is relevant) per query:
    ``gate`` from the retrieval signals, ``gate_relevance`` with the
    relevance model on the best few candidates too."""

    retrieval: Calibrated
    judged: Calibrated | None
    about: Mapping[str, Any]
    source: str
    relevance: Calibrated | None = None
    gate: Calibrated | None = None
    gate_relevance: Calibrated | None = None

    def for_gate(self, kind: str) -> Calibrated:
        """The gate model for ``gate: retrieval`` or ``gate: crossencoder``."""
        chosen = self.gate_relevance if kind == "crossencoder" else self.gate
        if chosen is None:
            name = "gate_relevance" if kind == "crossencoder" else "gate"
            raise CalibrationError(f"{self.source} holds no {name} model for gate [{kind}]; use gate [off]")
        return chosen

    def for_judging(self, judging: bool, relevance_model: bool = False) -> Calibrated:
        if judging and self.judged is None:
            raise CalibrationError(
                f"{self.source} holds no model for the judge; run `chunkrag calibrate --judge` or turn the judge off"
            )
        if judging and self.judged is not None:
            return self.judged
        if relevance_model:
            if self.relevance is None:
                raise CalibrationError(
                    f"{self.source} holds no model for relevance [crossencoder]; use relevance [retrieval]"
                )
            return self.relevance
        return self.retrieval


@dataclass(frozen=True, slots=True)
class Configured:
    """The calibration named by ``path`` or, when None, by the setting
    ``CHUNKRAG_CALIBRATION_FILE`` (the shipped file when unset), read on first
    use; the filter takes the model for judging on or off from it."""

    path: str | None = None


CONFIGURED = Configured()


def _model_from(entry: Any, where: str) -> Calibrated:
    if not isinstance(entry, Mapping):
        raise CalibrationError(f"{where} must be an object with features, weights, bias and cut")
    try:
        names = tuple(str(n) for n in entry["features"])
        weights = tuple(float(w) for w in entry["weights"])
        bias = float(entry["bias"])
        cut = float(entry.get("cut", DEFAULT_CUT))
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(f"{where}: missing or malformed {exc}") from None
    if not all(math.isfinite(v) for v in (*weights, bias, cut)):
        raise CalibrationError(f"{where}: weights, bias and cut must be finite numbers")
    if not 0.0 <= cut <= 1.0:
        raise CalibrationError(f"{where}: cut must be a probability (0..1), got {cut}")
    try:
        return Calibrated(LogisticModel(names, weights, bias), cut)
    except ValueError as exc:
        raise CalibrationError(f"{where}: {exc}") from None


def parse_calibration(payload: Any, source: str) -> CalibrationFile:
    """A calibration from its decoded JSON, with a clear error for anything
    the filter could not use."""
    if not isinstance(payload, Mapping) or payload.get("format") != CALIBRATION_FORMAT:
        raise CalibrationError(f'{source} is not a calibration file (expected "format": "{CALIBRATION_FORMAT}")')
    models = payload.get("models")
    if not isinstance(models, Mapping) or "retrieval" not in models:
        raise CalibrationError(f'{source}: "models" must hold at least a "retrieval" model')
    retrieval = _model_from(models["retrieval"], f"{source}: models.retrieval")
    if retrieval.model.uses_judge:
        raise CalibrationError(f"{source}: models.retrieval must not read the judge's features")
    judged = _model_from(models["judged"], f"{source}: models.judged") if models.get("judged") else None
    relevance = _model_from(models["relevance"], f"{source}: models.relevance") if models.get("relevance") else None
    if relevance is not None and relevance.model.uses_judge:
        raise CalibrationError(f"{source}: models.relevance must not read the judge's features")
    for name, entry in (("retrieval", retrieval), ("judged", judged), ("relevance", relevance)):
        if entry is not None and entry.model.is_gate:
            raise CalibrationError(f"{source}: models.{name} scores chunks and must not read a gate's features")
    gates = {}
    for name in ("gate", "gate_relevance"):
        gate = _model_from(models[name], f"{source}: models.{name}") if models.get(name) else None
        if gate is not None and not set(gate.model.names) <= set(GATE_FEATURES):
            raise CalibrationError(
                f"{source}: models.{name} must read only the gate's features: {', '.join(GATE_FEATURES)}"
            )
        if name == "gate" and gate is not None and gate.model.uses_relevance:
            raise CalibrationError(f"{source}: models.gate must not read the relevance model (that is gate_relevance)")
        gates[name] = gate
    return CalibrationFile(retrieval, judged, dict(payload.get("about") or {}), source, relevance, **gates)


def shipped_path() -> Path:
    return Path(str(resources.files("chunkrag_filter") / "calibration" / "default.json"))


@functools.lru_cache(maxsize=8)
def load_calibration(path: str | None = None) -> CalibrationFile:
    """The calibration in ``path`` (None or "": the shipped file), read once
    per process and path."""
    target = Path(path) if path else shipped_path()
    try:
        payload = json.loads(target.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationError(f"cannot read calibration file {target}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"calibration file {target} is not JSON: {exc.msg} (line {exc.lineno})") from None
    return parse_calibration(payload, str(target))


def calibration_payload(
    retrieval: Calibrated,
    judged: Calibrated | None,
    about: Mapping[str, Any] | None = None,
    relevance: Calibrated | None = None,
    gate: Calibrated | None = None,
    gate_relevance: Calibrated | None = None,
) -> dict[str, Any]:
    def entry(c: Calibrated) -> dict[str, Any]:
        return {
            "features": list(c.model.names),
            "weights": list(c.model.weights),
            "bias": c.model.bias,
            "cut": round(c.cut, 6),
        }

    models = {
        "retrieval": entry(retrieval),
        **({"judged": entry(judged)} if judged else {}),
        **({"relevance": entry(relevance)} if relevance else {}),
        **({"gate": entry(gate)} if gate else {}),
        **({"gate_relevance": entry(gate_relevance)} if gate_relevance else {}),
    }
    return {"format": CALIBRATION_FORMAT, "models": models, "about": dict(about or {})}


def write_calibration(
    path: str | Path,
    retrieval: Calibrated,
    judged: Calibrated | None,
    about: Mapping[str, Any] | None = None,
    relevance: Calibrated | None = None,
    gate: Calibrated | None = None,
    gate_relevance: Calibrated | None = None,
) -> Path:
    """Write a calibration file (checked by reading it back) and return its path."""
    payload = calibration_payload(retrieval, judged, about, relevance, gate, gate_relevance)
    parse_calibration(payload, str(path))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    load_calibration.cache_clear()
    return target


def shipped_model(judging: bool) -> LogisticModel:
    """The shipped file's model for judging on or off."""
    return load_calibration(None).for_judging(judging).model


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
    relevance = [relevance_logit(s.get("relevance")) for s in stage_scores]
    best_relevance = max(relevance, default=0.0)
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
                "relevance_logit": relevance[rank],
                "relevance_gap": relevance[rank] - best_relevance,
            }
        )
    return rows


def relevance_logit(probability: float | None) -> float:
    """The relevance model's probability back to clipped log-odds (0 when
    the model did not score the chunk)."""
    if probability is None:
        return 0.0
    p = min(max(float(probability), 1e-12), 1 - 1e-12)
    return max(-RELEVANCE_LOGIT_CLIP, min(RELEVANCE_LOGIT_CLIP, math.log(p / (1 - p))))


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
