"""Replaying scoring and threshold rules on recorded model outputs.

One evaluation run records, per question and candidate, the retrieval
signals and the judge's shares in both orders (``QuestionOutcome.rows``).
Every variant of the filter (which score, which cut, which candidates the
model sees) is then a pure function of those rows, so an ablation table
costs no further model call and compares the variants on exactly the same
model outputs. Calls and seconds per question are counted from what each
variant would have asked: listwise batches times orders, at the measured
seconds per call.

Answer-in-context here is "some kept chunk holds a gold answer" (per-chunk
gold); the runner's own figure joins the kept text, which can differ when
an answer spans two chunks.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from chunkrag_eval.measures import kept_within_budget
from chunkrag_filter.judging import scoring_batches
from chunkrag_filter.processors.calibration import LogisticModel, chunk_features, fit_logistic, roc_auc
from chunkrag_filter.processors.relevance import MAX_LISTWISE_BATCH
from chunkrag_filter.processors.thresholds import dynamic_threshold

Row = Mapping[str, Any]
# The product's fallback when nothing passes: the best k by retrieval.
FALLBACK_K = 3
# Below this a chunk never passes (FilterOptions.min_score).
MIN_SCORE = 0.01


@dataclass(frozen=True, slots=True)
class Question:
    item_id: str
    rows: tuple[Row, ...]  # every candidate in retrieval order, redundant ones included

    @property
    def judged_rows(self) -> list[Row]:
        return [r for r in self.rows if r.get("reason") != "redundant"]


@dataclass(frozen=True, slots=True)
class Variant:
    """How a filter scores its candidates and where it cuts.

    ``judge``: which LLM share the variant uses ("forward": the order as
    retrieved; "both": the mean of both orders; None: no model). ``top``:
    the cascade, only the best ``top`` candidates are judged. ``score``:
    "judge", "calibrated" or a cheap signal ("cosine", "bm25",
    "retrieval"). ``cut``: "algorithm1", "fixed:<t>", "relative:<r>" (at
    least r times the best score), "top:<k>"."""

    name: str
    score: str
    cut: str
    judge: str | None = None
    top: int | None = None
    features: tuple[str, ...] = ()

    @property
    def orders(self) -> int:
        return 2 if self.judge == "both" else (1 if self.judge else 0)


def judge_shares(rows: Sequence[Row], judge: str | None, top: int | None) -> list[float | None]:
    """The share each candidate would get. Listwise shares are relative to
    the batch, so a cascade that judges only the first batch reads exactly
    what the full run's first batch answered."""
    out = []
    for i, row in enumerate(rows):
        if judge is None or (top is not None and i >= top):
            out.append(None)
        elif judge == "forward":
            # Rows judged in one order carry only `base`; in two, `forward` too.
            out.append(row["forward"] if row.get("forward") is not None else row.get("base"))
        else:
            out.append(row.get("base"))
    return out


def study_batches(count: int, top: int | None) -> list[list[int]]:
    """The listwise batches the study asked: the best nine together, then
    the rest (only when the variant judges every candidate)."""
    head = list(range(min(count, MAX_LISTWISE_BATCH)))
    if top is not None or count <= MAX_LISTWISE_BATCH:
        return [head[:top]] if top is not None else [head]
    return [head] + [
        [MAX_LISTWISE_BATCH + i for i in part]
        for part in scoring_batches(count - MAX_LISTWISE_BATCH, MAX_LISTWISE_BATCH)
    ]


def calls_for(count: int, variant: Variant) -> int:
    """Calls the variant would make: the first batch in ``orders`` orders,
    the others (every-candidate variants) once each."""
    if not variant.judge or count == 0:
        return 0
    batches = study_batches(count, variant.top)
    return variant.orders + (len(batches) - 1)


def feature_rows(question: Question, variant: Variant) -> list[dict[str, float]]:
    rows = question.judged_rows
    shares = judge_shares(rows, variant.judge or "both", variant.top) if variant.judge else [None] * len(rows)
    batches = study_batches(len(rows), variant.top) if variant.judge else []
    return chunk_features(rows, shares, [r["chars"] for r in rows], batches)


def scores_for(question: Question, variant: Variant, model: LogisticModel | None = None) -> list[float | None]:
    rows = question.judged_rows
    if variant.score == "judge":
        return judge_shares(rows, variant.judge, variant.top)
    if variant.score == "calibrated":
        if model is None:
            raise ValueError(f"variant {variant.name} needs a fitted model")
        return [model.probability(f) for f in feature_rows(question, variant)]
    if variant.score == "retrieval":
        return [r.get("retrieval") for r in rows]
    return [r.get(variant.score, 0.0) for r in rows]


def cut(scores: Sequence[float | None], rule: str) -> list[int]:
    """Indices kept by ``rule`` among scored candidates (unscored never pass)."""
    known = [(i, s) for i, s in enumerate(scores) if s is not None]
    if not known:
        return []
    values = [s for _, s in known]
    kind, _, raw = rule.partition(":")
    if kind == "algorithm1":
        threshold = dynamic_threshold(values).value
        return [i for i, s in known if s >= threshold - 1e-9 and s >= MIN_SCORE]
    if kind == "fixed":
        return [i for i, s in known if s >= float(raw)]
    if kind == "relative":
        best = max(values)
        return [i for i, s in known if s >= float(raw) * best and s >= MIN_SCORE]
    if kind == "top":
        return [i for i, _ in sorted(known, key=lambda p: -p[1])[: int(raw)]]
    raise ValueError(f"unknown cut rule {rule!r}")


@dataclass(frozen=True, slots=True)
class QuestionResult:
    before: bool
    after: bool
    chars_before: int
    chars_after: int
    cosine_after: bool
    bm25_after: bool
    calls: int


def kept_indices(question: Question, variant: Variant, model: LogisticModel | None = None) -> list[int]:
    """Indices into ``question.judged_rows`` the variant keeps (the
    retrieval top three when nothing passes, as the filter falls back)."""
    kept = cut(scores_for(question, variant, model), variant.cut)
    return kept or list(range(min(FALLBACK_K, len(question.judged_rows))))


def replay(question: Question, variant: Variant, model: LogisticModel | None = None) -> QuestionResult:
    rows = question.judged_rows
    kept = kept_indices(question, variant, model)
    chars_after = sum(rows[i]["chars"] for i in kept)
    every = question.rows
    texts_len = [r["chars"] for r in every]

    def baseline(signal: str) -> bool:
        # kept_within_budget only needs lengths: stand-in strings of the right length.
        taken = kept_within_budget(
            ["x" * n for n in texts_len], [r.get(signal, 0.0) or 0.0 for r in every], chars_after
        )
        return any(every[i]["gold"] for i in taken)

    return QuestionResult(
        before=any(r["gold"] for r in every),
        after=any(rows[i]["gold"] for i in kept),
        chars_before=sum(texts_len),
        chars_after=chars_after,
        cosine_after=baseline("cosine"),
        bm25_after=baseline("bm25"),
        calls=calls_for(len(rows), variant),
    )


def summarise(results: Sequence[QuestionResult], seconds_per_call: float | None) -> dict[str, Any]:
    n = len(results)
    before = sum(r.before for r in results) / n
    after = sum(r.after for r in results) / n
    calls = sum(r.calls for r in results) / n
    return {
        "answer_in_context_after": round(after, 4),
        "kept_share_of_before": round(after / before, 4) if before else None,
        "context_chars_kept_share": round(
            sum(r.chars_after for r in results) / sum(r.chars_before for r in results), 4
        ),
        "baseline_cosine_answer_in_context_after": round(sum(r.cosine_after for r in results) / n, 4),
        "baseline_bm25_answer_in_context_after": round(sum(r.bm25_after for r in results) / n, 4),
        "model_calls_per_question": round(calls, 3),
        "seconds_per_question_estimated": round(calls * seconds_per_call, 2) if seconds_per_call else None,
    }


def folds(questions: Sequence[Question], k: int, seed: int = 7) -> list[list[int]]:
    """Question indices shuffled (fixed seed) and dealt into k folds."""
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    return [order[f::k] for f in range(k)]


def training_rows(questions: Sequence[Question], variant: Variant) -> tuple[list[dict[str, float]], list[bool]]:
    rows, labels = [], []
    for question in questions:
        for features, row in zip(feature_rows(question, variant), question.judged_rows):
            rows.append(features)
            labels.append(bool(row["gold"]))
    return rows, labels


def fit(questions: Sequence[Question], variant: Variant, l2: float = 1.0) -> LogisticModel:
    rows, labels = training_rows(questions, variant)
    return fit_logistic(rows, labels, variant.features, l2=l2)


def cross_validated(
    questions: Sequence[Question], variant: Variant, k: int = 5, l2: float = 1.0
) -> tuple[list[QuestionResult], list[float], list[bool]]:
    """Each question replayed with a model fitted on the other folds only;
    also the out-of-fold probabilities and labels of every candidate."""
    results: list[QuestionResult | None] = [None] * len(questions)
    probabilities: list[float] = []
    labels: list[bool] = []
    for held_out in folds(questions, k):
        held = set(held_out)
        model = fit([q for i, q in enumerate(questions) if i not in held], variant, l2)
        for i in held_out:
            results[i] = replay(questions[i], variant, model)
            for p, row in zip(scores_for(questions[i], variant, model), questions[i].judged_rows):
                probabilities.append(p)
                labels.append(bool(row["gold"]))
    return [r for r in results if r is not None], probabilities, labels


def chunk_auc(questions: Sequence[Question], signal: Callable[[Question], Sequence[float | None]]) -> float | None:
    """ROC AUC of a per-candidate signal for "holds a gold answer", pooled
    over questions; unscored candidates count as the lowest score."""
    scores, labels = [], []
    for question in questions:
        for value, row in zip(signal(question), question.judged_rows):
            scores.append(-math.inf if value is None else value)
            labels.append(bool(row["gold"]))
    return roc_auc(scores, labels)


def questions_from_report(payload: Mapping[str, Any], need_gold: bool = True) -> list[Question]:
    """The questions of a report written by ``write_report`` that carry rows
    (with per-chunk gold, PopQA-style, unless ``need_gold`` is False)."""
    out = []
    for q in payload["questions"]:
        rows = tuple(q.get("rows") or ())
        if rows and (not need_gold or all(r.get("gold") is not None for r in rows)):
            out.append(Question(str(q["item_id"]), rows))
    return out


def median_seconds_per_call(payload: Mapping[str, Any]) -> float | None:
    per_call = [q["seconds"] / q["model_calls"] for q in payload["questions"] if q.get("model_calls")]
    return round(statistics.median(per_call), 3) if per_call else None
