"""Choosing the relevance threshold (Algorithm 1, lines 19-22) and what to do
when nothing passes it. Pure functions over scores."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

# The paper's ε is not given. Scores live in [0, 1]; a variance below 0.01
# (σ < 0.1) means the scores cluster tightly, where the mean alone would keep
# about half of a pool of near-equals, so the bar is raised to μ + σ.
DEFAULT_VARIANCE_EPSILON = 0.01


@dataclass(frozen=True, slots=True)
class Threshold:
    value: float
    method: str  # "dynamic" | "fixed" | "relative" | "llm"
    mean: float
    std: float
    variance: float


def dynamic_threshold(scores: Sequence[float], epsilon: float = DEFAULT_VARIANCE_EPSILON) -> Threshold:
    """T = μ + σ when var(S) < ε, else μ (population statistics)."""
    if not scores:
        return Threshold(1.0, "dynamic", 0.0, 0.0, 0.0)
    mean = statistics.fmean(scores)
    variance = statistics.pvariance(scores, mu=mean)
    std = variance**0.5
    value = mean + std if variance < epsilon else mean
    return Threshold(value, "dynamic", mean, std, variance)


def fixed_threshold(scores: Sequence[float], value: float) -> Threshold:
    mean = statistics.fmean(scores) if scores else 0.0
    variance = statistics.pvariance(scores, mu=mean) if scores else 0.0
    return Threshold(value, "fixed", mean, variance**0.5, variance)


def relative_threshold(scores: Sequence[float], share: float) -> Threshold:
    """T = share × the best score: keep what comes close to the best chunk.
    Suits calibrated probabilities, whose level says how sure the judge is
    but whose spread Algorithm 1 reads as noise when most chunks are 0."""
    if not 0.0 < share <= 1.0:
        raise ValueError("a relative threshold's share must be in (0, 1]")
    mean = statistics.fmean(scores) if scores else 0.0
    variance = statistics.pvariance(scores, mu=mean) if scores else 0.0
    return Threshold(share * max(scores) if scores else 1.0, "relative", mean, variance**0.5, variance)


def passing(scores: Sequence[float], threshold: Threshold) -> list[int]:
    """Indices of the scores at or above the threshold (float noise forgiven)."""
    return [i for i, score in enumerate(scores) if score >= threshold.value - 1e-9]


def llm_threshold(
    query: str, scores: Sequence[float], model, fallback_epsilon: float = DEFAULT_VARIANCE_EPSILON
) -> tuple[Threshold, int]:
    """The paper's appendix prompt picks the threshold from the scores; an
    unreadable answer falls back to :func:`dynamic_threshold`. Returns the
    threshold and the prompt tokens spent."""
    from chunkrag_core.providers.chat import ChatRequest, Message
    from chunkrag_filter.processors import prompts
    from chunkrag_filter.processors.parsing import parse_score

    listed = ", ".join(f"{s:.2f}" for s in scores)
    response = model.complete(
        ChatRequest(messages=(Message("user", prompts.THRESHOLD.format(query=query, scores=listed)),), max_tokens=8)
    )
    value = parse_score(response.text)
    dynamic = dynamic_threshold(scores, fallback_epsilon)
    if value is None:
        return dynamic, response.prompt_tokens
    return Threshold(value, "llm", dynamic.mean, dynamic.std, dynamic.variance), response.prompt_tokens


@dataclass(frozen=True, slots=True)
class CutInputs:
    """What a threshold method may read: ``value`` is the fixed threshold,
    or the share of the best score for "relative"; the query and the model
    are for "llm"."""

    value: float
    epsilon: float = DEFAULT_VARIANCE_EPSILON
    query: str = ""
    model: Any = None


@dataclass(frozen=True, slots=True)
class Cut:
    """A chosen threshold and the model calls choosing it cost."""

    threshold: Threshold
    calls: int = 0
    prompt_tokens: int = 0


def _llm_cut(scores: Sequence[float], inputs: CutInputs) -> Cut:
    # Nothing to show the model: Algorithm 1's cut, no call.
    if not scores:
        return Cut(dynamic_threshold(scores, inputs.epsilon))
    threshold, prompt_tokens = llm_threshold(inputs.query, scores, inputs.model, inputs.epsilon)
    return Cut(threshold, calls=1, prompt_tokens=prompt_tokens)


ThresholdMethod = Callable[[Sequence[float], CutInputs], Cut]

# Every threshold method by name, in the order options list them.
THRESHOLD_METHODS: Mapping[str, ThresholdMethod] = {
    "dynamic": lambda scores, inputs: Cut(dynamic_threshold(scores, inputs.epsilon)),
    "llm": _llm_cut,
    "fixed": lambda scores, inputs: Cut(fixed_threshold(scores, inputs.value)),
    "relative": lambda scores, inputs: Cut(relative_threshold(scores, inputs.value)),
}


def cut(method: str, scores: Sequence[float], inputs: CutInputs) -> Cut:
    """The threshold ``method`` picks for ``scores``."""
    try:
        chosen = THRESHOLD_METHODS[method]
    except KeyError:
        raise ValueError(f"unknown threshold {method!r}; choose one of {', '.join(THRESHOLD_METHODS)}") from None
    return chosen(scores, inputs)
