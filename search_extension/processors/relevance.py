"""Multi-stage LLM relevance scoring of one chunk: base score, self-reflection,
critic, combined (Algorithm 1, lines 12-17), and LLMRetriever's yes/no and
1-10 modes.

Cost control, measured in the benchmarks:
- the base score is one call with one output token where the provider returns
  log-probabilities (P(Yes) read off the first token), not a printed number;
- self-reflection runs only on borderline base scores, where it can change a
  decision; a confident score is its own reflection;
- the default critic is a rule check (dates and names shared with the query)
  costing no call; an LLM critic is available.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from chunkrag_core.providers.chat import ChatError, ChatModel, ChatRequest, ChatResponse, Message, probability_of
from search_extension.processors import prompts
from search_extension.processors.parsing import parse_score, parse_yes_no

METHODS = ("multistage", "yes_no", "likert")
CRITICS = ("heuristic", "llm", "off")


@dataclass(frozen=True, slots=True)
class ScoringOptions:
    method: str = "multistage"
    # Read P(Yes) from log-probabilities when the provider returns them.
    use_logprobs: bool = True
    # Self-reflect only when the base score lies inside this band: outside it
    # the model is confident and a second call rarely flips the decision.
    reflect_band: tuple[float, float] = (0.3, 0.7)
    critic: str = "heuristic"
    # How base, reflection and critic combine; a skipped stage's weight goes
    # to the stages that ran. The paper leaves the combination unspecified.
    weights: tuple[float, float, float] = (0.5, 0.3, 0.2)
    # LLMRetriever's 1-10 scale: a chunk passes at this score or above.
    likert_threshold: int = 5
    # Longer chunk text is cut before prompting (chunks are ~500 characters;
    # this only guards against a huge hit from a foreign index).
    max_chunk_chars: int = 2000

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown scoring method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.critic not in CRITICS:
            raise ValueError(f"unknown critic {self.critic!r}; choose one of {', '.join(CRITICS)}")


@dataclass(frozen=True, slots=True)
class Judgement:
    """Scores of one chunk for one query; None where a stage did not run or
    its output was unusable (``notes`` says which)."""

    base: float | None
    reflection: float | None
    critic: float | None
    combined: float | None
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    notes: tuple[str, ...] = field(default=())

    def stage_scores(self) -> dict[str, float]:
        named = {"base": self.base, "reflection": self.reflection, "critic": self.critic, "combined": self.combined}
        return {name: value for name, value in named.items() if value is not None}


class ScoreCache(Protocol):
    """(query, chunk, model, stage) -> score; a Redis one lives in the workers."""

    def get(self, key: str) -> float | None: ...

    def set(self, key: str, value: float) -> None: ...


class _Ledger:
    """Counts the calls and tokens spent on one judgement."""

    def __init__(self, model: ChatModel, cache: ScoreCache | None, cache_prefix: str):
        self.model, self.cache, self.cache_prefix = model, cache, cache_prefix
        self.calls = self.cached = self.prompt_tokens = self.completion_tokens = 0
        self.notes: list[str] = []

    def ask(self, prompt: str, *, max_tokens: int, top_logprobs: int = 0) -> ChatResponse:
        request = ChatRequest(messages=(Message("user", prompt),), max_tokens=max_tokens, top_logprobs=top_logprobs)
        response = self.model.complete(request)
        self.calls += 1
        self.prompt_tokens += response.prompt_tokens
        self.completion_tokens += response.completion_tokens
        return response

    def cached_score(self, stage: str, compute) -> float | None:
        key = f"{self.cache_prefix}|{stage}"
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            self.cached += 1
            return hit
        value = compute()
        if self.cache is not None and value is not None:
            self.cache.set(key, value)
        return value


def judge(query: str, chunk_text: str, model: ChatModel, options: ScoringOptions = ScoringOptions(), *, cache: ScoreCache | None = None, model_name: str = "") -> Judgement:
    """Score ``chunk_text`` for ``query``. Provider errors propagate as
    :class:`ChatError` (the caller retries); unusable output does not."""
    text = chunk_text[: options.max_chunk_chars]
    ledger = _Ledger(model, cache, f"{model_name}|{options.method}|{query}|{text}")
    if options.method == "yes_no":
        base = ledger.cached_score("yes_no", lambda: _yes_no(query, text, ledger, options))
        return _finish(ledger, base, None, None, base)
    if options.method == "likert":
        base = ledger.cached_score("likert", lambda: _likert(query, text, ledger))
        return _finish(ledger, base, None, None, base)

    base = ledger.cached_score("base", lambda: _base(query, text, ledger, options))
    reflection = None
    low, high = options.reflect_band
    if base is not None and low < base < high:
        reflection = ledger.cached_score("reflection", lambda: _reflect(query, text, base, ledger))
    critic = None
    if options.critic == "heuristic":
        critic = heuristic_critic(query, text)
    elif options.critic == "llm" and base is not None:
        critic = ledger.cached_score("critic", lambda: _llm_critic(query, text, base, reflection, ledger))
    return _finish(ledger, base, reflection, critic, combine(base, reflection, critic, options.weights))


def combine(base: float | None, reflection: float | None, critic: float | None, weights: tuple[float, float, float]) -> float | None:
    """Weighted mean of the stages that produced a score. A skipped
    reflection counts as agreeing with the base (the base was confident)."""
    if base is None:
        return None
    stages = [(base, weights[0]), (reflection if reflection is not None else base, weights[1])]
    if critic is not None:
        stages.append((critic, weights[2]))
    total = sum(w for _, w in stages)
    return sum(s * w for s, w in stages) / total if total else base


def _finish(ledger: _Ledger, base, reflection, critic, combined) -> Judgement:
    return Judgement(base, reflection, critic, combined, ledger.calls, ledger.cached, ledger.prompt_tokens, ledger.completion_tokens, tuple(ledger.notes))


def _base(query: str, text: str, ledger: _Ledger, options: ScoringOptions) -> float | None:
    if options.use_logprobs:
        score = _yes_no(query, text, ledger, options)
        if score is not None:
            return score
    response = ledger.ask(prompts.RELEVANCE_SCORE.format(query=query, chunk=text), max_tokens=8)
    score = parse_score(response.text)
    if score is None:
        ledger.notes.append(f"base score unreadable: {response.text[:60]!r}")
    return score


def _yes_no(query: str, text: str, ledger: _Ledger, options: ScoringOptions) -> float | None:
    response = ledger.ask(prompts.YES_NO_RELEVANCE.format(query=query, chunk=text), max_tokens=1, top_logprobs=10 if options.use_logprobs else 0)
    probability = probability_of(response.first_token_logprobs, ["yes"], ["no"])
    if probability is not None:
        return probability
    answer = parse_yes_no(response.text)
    if answer is None:
        ledger.notes.append(f"yes/no answer unreadable: {response.text[:60]!r}")
        return None
    return 1.0 if answer else 0.0


def _likert(query: str, text: str, ledger: _Ledger) -> float | None:
    response = ledger.ask(prompts.LIKERT_RELEVANCE.format(query=query, chunk=text), max_tokens=4)
    match = re.search(r"\d+", response.text)
    if not match or not 1 <= int(match.group()) <= 10:
        ledger.notes.append(f"1-10 score unreadable: {response.text[:60]!r}")
        return None
    return (int(match.group()) - 1) / 9


def _reflect(query: str, text: str, base: float, ledger: _Ledger) -> float | None:
    response = ledger.ask(prompts.SELF_REFLECTION.format(query=query, chunk=text, score=f"{base:.2f}"), max_tokens=8)
    score = parse_score(response.text)
    if score is None:
        ledger.notes.append(f"reflection unreadable: {response.text[:60]!r}")
    return score


def _llm_critic(query: str, text: str, base: float, reflection: float | None, ledger: _Ledger) -> float | None:
    scores = f"{base:.2f}" + (f", {reflection:.2f}" if reflection is not None else "")
    response = ledger.ask(prompts.CRITIC.format(query=query, chunk=text, scores=scores), max_tokens=8)
    score = parse_score(response.text)
    if score is None:
        ledger.notes.append(f"critic unreadable: {response.text[:60]!r}")
    return score


_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")


def heuristic_critic(query: str, text: str) -> float | None:
    """A rule critic costing no model call: temporal consistency, the
    paper's example. When the question names a year, a chunk that names
    years but not that one is about another time (0.0); one that names it
    scores 1.0. None (no opinion) when the question names no year or the
    chunk names none: a chunk rarely repeats every detail of the question,
    and an earlier name-matching rule here punished exactly the chunks that
    held the answer (measured on the sample corpus)."""
    years = set(_YEAR.findall(query))
    found = set(_YEAR.findall(text))
    if not years or not found:
        return None
    return 1.0 if years & found else 0.0
