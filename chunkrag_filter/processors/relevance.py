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

import math
import re
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from chunkrag_core.providers.chat import ChatModel, ChatRequest, ChatResponse, Message, probability_of
from chunkrag_filter.processors import prompts
from chunkrag_filter.processors.parsing import parse_score, parse_yes_no

METHODS = ("multistage", "yes_no", "likert", "listwise")
# Passages per listwise prompt: numbered 1-9 so each label is one token in
# the tokenizers we use (Qwen splits "10" into two digits).
MAX_LISTWISE_BATCH = 9
CRITICS = ("heuristic", "llm", "off")
# How listwise passages are laid out: "numbered" ([1] text) or "quoted"
# (each fenced as data, the task restated around them: a mitigation of
# instructions planted in a chunk).
PASSAGE_FORMATS = ("numbered", "quoted")


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
    # Listwise: passages judged together in one call (at most 9).
    listwise_batch: int = MAX_LISTWISE_BATCH
    # Listwise: 2 asks each batch a second time with the passages in reverse
    # order and averages the two shares. A small model favours early
    # passages (measured: bench/results/filter_popqa_dev.json, ablation);
    # reversing cancels that first-order bias for one more call per batch.
    orders: int = 1
    # Listwise prompt layout (PASSAGE_FORMATS); see prompts.LISTWISE_QUOTED.
    passages: str = "numbered"

    def __post_init__(self) -> None:
        if self.passages not in PASSAGE_FORMATS:
            raise ValueError(f"unknown passage format {self.passages!r}; choose one of {', '.join(PASSAGE_FORMATS)}")
        if self.orders not in (1, 2):
            raise ValueError("orders must be 1 (as retrieved) or 2 (as retrieved and reversed)")
        if not 1 <= self.listwise_batch <= MAX_LISTWISE_BATCH:
            raise ValueError(f"listwise_batch must be between 1 and {MAX_LISTWISE_BATCH}")
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
    # The normalised retrieval score blended into ``combined``, when one was.
    prior: float | None = None
    # Listwise with two orders: the share in each order (``base`` is their mean).
    forward: float | None = None
    reverse: float | None = None
    # The calibrated probability of relevance, when the filter computed one.
    calibrated: float | None = None

    def stage_scores(self) -> dict[str, float]:
        named = {
            "base": self.base,
            "reflection": self.reflection,
            "critic": self.critic,
            "prior": self.prior,
            "forward": self.forward,
            "reverse": self.reverse,
            "calibrated": self.calibrated,
            "combined": self.combined,
        }
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


def judge(
    query: str,
    chunk_text: str,
    model: ChatModel,
    options: ScoringOptions = ScoringOptions(),
    *,
    cache: ScoreCache | None = None,
    model_name: str = "",
) -> Judgement:
    """Score ``chunk_text`` for ``query``. Provider errors propagate as
    :class:`ChatError` (the caller retries); unusable output does not."""
    if options.method == "listwise":
        return judge_listwise(query, [chunk_text], model, options, cache=cache, model_name=model_name)[0]
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


def judge_listwise(
    query: str,
    texts: Sequence[str],
    model: ChatModel,
    options: ScoringOptions = ScoringOptions(),
    *,
    cache: ScoreCache | None = None,
    model_name: str = "",
) -> list[Judgement]:
    """Judge up to nine passages in ONE call with one output token: the
    model names the passage that answers the query (0 for none), and the
    log-probabilities of the labels 1..n give each passage its share of
    P(answers). Without log-probabilities, the printed numbers count 1.0.

    Scores are relative within the batch (they sum to at most 1), which is
    what a per-query threshold needs; the call is booked on the first
    passage's judgement so totals add up."""
    if not texts:
        return []
    if len(texts) > MAX_LISTWISE_BATCH:
        raise ValueError(f"a listwise batch holds at most {MAX_LISTWISE_BATCH} passages, got {len(texts)}")
    cut = [t[: options.max_chunk_chars] for t in texts]
    layout = "" if options.passages == "numbered" else f"|{options.passages}"
    ledger = _Ledger(model, cache, f"{model_name}|listwise{layout}|{query}|" + "\x1f".join(cut))
    forward = _cached_listwise(query, cut, ledger, options, "")
    reverse = _cached_listwise(query, cut[::-1], ledger, options, "|reversed")[::-1] if options.orders == 2 else None
    scores = forward if reverse is None else [mean_of_orders(f, r) for f, r in zip(forward, reverse)]
    judgements = []
    for i, (text, score) in enumerate(zip(cut, scores)):
        critic = heuristic_critic(query, text) if options.critic == "heuristic" else None
        head = i == 0  # the calls, and any notes, are booked here
        judgements.append(
            Judgement(
                score,
                None,
                critic,
                combine(score, None, critic, options.weights),
                calls=ledger.calls if head else 0,
                cached_calls=ledger.cached if head else 0,
                prompt_tokens=ledger.prompt_tokens if head else 0,
                completion_tokens=ledger.completion_tokens if head else 0,
                notes=tuple(ledger.notes) if head or score is None else (),
                forward=forward[i] if reverse is not None else None,
                reverse=reverse[i] if reverse is not None else None,
            )
        )
    return judgements


def mean_of_orders(forward: float | None, reverse: float | None) -> float | None:
    """One order's share stands in when the other's answer was unreadable."""
    known = [s for s in (forward, reverse) if s is not None]
    return sum(known) / len(known) if known else None


def _cached_listwise(
    query: str, texts: Sequence[str], ledger: _Ledger, options: ScoringOptions, order: str
) -> list[float | None]:
    """One listwise call for ``texts`` in the order given, or its scores
    from the cache (keyed per order: each order is its own question)."""
    prefix = f"{ledger.cache_prefix}{order}"
    if ledger.cache is not None:
        cached = [ledger.cache.get(f"{prefix}|{i}") for i in range(len(texts))]
        if all(v is not None for v in cached):
            ledger.cached += len(texts)
            return list(cached)
    scores = _listwise_scores(query, texts, ledger, options)
    if ledger.cache is not None:
        for i, value in enumerate(scores):
            if value is not None:
                ledger.cache.set(f"{prefix}|{i}", value)
    return scores


def listwise_prompt(query: str, texts: Sequence[str], layout: str = "numbered") -> str:
    """The listwise prompt for ``texts`` in the order given. "quoted" fences
    each passage and turns angle brackets inside it into look-alikes, so a
    chunk cannot close its own fence and speak outside it."""
    if layout == "quoted":
        fenced = (" ".join(t.split()).replace("<", "\u2039").replace(">", "\u203a") for t in texts)
        passages = "\n".join(f"<passage {i}>\n{t}\n</passage {i}>" for i, t in enumerate(fenced, start=1))
        return prompts.LISTWISE_QUOTED.format(passages=passages, query=query)
    passages = "\n".join(f"[{i}] {' '.join(t.split())}" for i, t in enumerate(texts, start=1))
    return prompts.LISTWISE.format(passages=passages, query=query)


def _listwise_scores(query: str, texts: Sequence[str], ledger: _Ledger, options: ScoringOptions) -> list[float | None]:
    use_logprobs = options.use_logprobs
    response = ledger.ask(
        listwise_prompt(query, texts, options.passages),
        max_tokens=1 if use_logprobs else 12,
        top_logprobs=20 if use_logprobs else 0,
    )
    labels = {str(i): i for i in range(len(texts) + 1)}
    mass = {labels[t.strip()]: math.exp(lp) for t, lp in response.first_token_logprobs.items() if t.strip() in labels}
    if mass:
        total = sum(mass.values())
        return [round(mass.get(i, 0.0) / total, 6) for i in range(1, len(texts) + 1)]
    named = {int(n) for n in re.findall(r"\d+", response.text) if 1 <= int(n) <= len(texts)}
    if named or re.fullmatch(r"\s*0\s*\.?\s*", response.text):
        return [1.0 if i in named else 0.0 for i in range(1, len(texts) + 1)]
    ledger.notes.append(f"listwise answer unreadable: {response.text[:60]!r}")
    return [None] * len(texts)


def combine(
    base: float | None, reflection: float | None, critic: float | None, weights: tuple[float, float, float]
) -> float | None:
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
    return Judgement(
        base,
        reflection,
        critic,
        combined,
        ledger.calls,
        ledger.cached,
        ledger.prompt_tokens,
        ledger.completion_tokens,
        tuple(ledger.notes),
    )


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
    response = ledger.ask(
        prompts.YES_NO_RELEVANCE.format(query=query, chunk=text),
        max_tokens=1,
        top_logprobs=10 if options.use_logprobs else 0,
    )
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
