"""The answer table: the ChunkRAG paper's Table 1 layout with this project's
rows, and the rule that chooses the shipped cut by answer accuracy.

Every question is retrieved once (its own pool, as ``chunkrag eval`` does);
each row is a way of choosing the context from those candidates, and the
local model writes an answer from it with the prompt and the token cap of
``chunkrag eval --generate``:

- ``no_retrieval``: the question alone (PubHealth: the verdict prompt with
  no passages, the paper's setting);
- ``rag``: every retrieved chunk in retrieval order, cut to the model's
  context where they do not fit;
- ``topk``: chunks by hybrid score, best first, up to the characters the
  filter kept for that question;
- ``filter``: the default filter (no model call);
- ``filter_judge``: the filter with the LLM judge on the best ``judge_top``;
- ``cut=<c>``: the default filter's model cut at ``c`` (the cut selection);
- the variants in ``VARIANTS``: the default filter with one of its steps
  changed (the order of the kept chunks, redundancy removal), to find which
  step costs answers.

Answers go through :class:`MeteredChat` over a :class:`GenerationCache`
(sqlite, keyed by the model, the prompt and the token cap), so a context
that two rows or two cuts share is generated once; a cached answer counts
the calls, tokens and seconds of its first run.

Grading: PopQA, a gold answer as a case-insensitive substring of the
answer (the paper's string match); PubHealth, the verdict equals the label;
Biography, a FactScore-style share: the configured model splits the answer
into atomic facts and judges each against the question's whole retrieved
pool (not Wikipedia, as FactScore does); an answer with no fact ("NOT
FOUND") scores 0. Rows are compared with RAG question by question: exact
McNemar on right/wrong, an exact sign test on the Biography scores.

The pure parts (tests, cut selection, facts parsing, the table) take
literal numbers; model and engine calls sit in the functions below them.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_core.engines.schema import DOC_ID
from chunkrag_core.providers.chat import ChatError, ChatModel, ChatRequest, ChatResponse, Message
from chunkrag_core.settings import Settings
from chunkrag_eval.datasets import EvalItem
from chunkrag_eval.measures import answer_in_context, discordant, kept_within_budget, mcnemar_exact
from chunkrag_eval.runner import MAX_CANDIDATES, doc_id_for, index_pools
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import JUDGE_TOP_WHEN_ASKED, FilterOptions, FilterResult, run_filter
from chunkrag_filter.processors.answer import NOT_FOUND, Answer, answer_from_chunks, verdict_from_chunks
from chunkrag_filter.processors.answer import context_chars as context_budget_chars
from search_extension.retriever import HybridRetriever

ROWS = ("no_retrieval", "rag", "topk", "filter", "filter_judge")
ROW_LABELS = {
    "no_retrieval": "no retrieval",
    "rag": "all retrieved (RAG)",
    "topk": "top-k by hybrid score, the filter's characters",
    "filter": "filter (default, no model call)",
    "filter_judge": "filter with the LLM judge",
    "filter_retrieval_order": "filter, kept chunks in retrieval order",
    "filter_no_redundancy": "filter without redundancy removal",
    "filter_cut_only": "filter, cut only, retrieval order",
    "filter_scored_order": "filter, near-duplicates dropped, by score, best at both ends",
}
REFERENCE = "rag"
# The default filter (the calibration's cut, no redundancy stage, the kept
# chunks in retrieval order) with its other steps set explicitly, so that
# each row means the same whatever the defaults are.
VARIANTS: Mapping[str, Mapping[str, Any]] = {
    # The near-duplicate drop (cosine above 0.9), the rest in retrieval order.
    "filter_retrieval_order": {"rerank": "off", "lost_in_the_middle": False, "redundancy_threshold": 0.9},
    # No near-duplicate drop, reordered by score with the best at both ends.
    "filter_no_redundancy": {"rerank": "score", "lost_in_the_middle": True, "redundancy_threshold": None},
    # Only the cut drops, the rest stay in retrieval order (the default since
    # it answered as all retrieved on both dev sets: bench/REPORT.md).
    "filter_cut_only": {"rerank": "off", "lost_in_the_middle": False, "redundancy_threshold": None},
    # The default until then: near-duplicates dropped, reordered by score,
    # the best at both ends.
    "filter_scored_order": {"rerank": "score", "lost_in_the_middle": True, "redundancy_threshold": 0.9},
}
# The cuts the default is chosen among (written before the run, bench/REPORT.md).
CANDIDATE_CUTS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.09)
# The selection rule: within this much accuracy of "all retrieved" on every
# set, and not significantly below it at this level (exact McNemar).
MAX_DROP = 0.01
ALPHA = 0.05

# `chunkrag eval --generate`'s cap for a one-sentence answer (runner._generate).
ANSWER_MAX_TOKENS = 48
# A biography gets a little more room: the same prompt, a few facts.
BIO_MAX_TOKENS = 96
FACTS_MAX_TOKENS = 160
SUPPORT_MAX_TOKENS = 3
# Facts judged per biography: a rambling answer is not graded forever.
MAX_FACTS = 8
# The local llama-server's context per slot (local_services/llm_server.py
# DEFAULT_CTX); the CLI passes it in.
DEFAULT_CONTEXT_TOKENS = 4096
# Attempts more of a call that failed retryably (a timeout, a 5xx), and the pause between.
RETRIES = 2
RETRY_PAUSE_S = 5.0

NO_RETRIEVAL_PROMPT = """Question: {query}

Answer the question in one sentence.
Answer:"""

FACTS_PROMPT = """Text: {text}

Break the text into short independent facts, one per line. \
Each fact is a full sentence that names its subject. No other text.
Facts:"""

# Passages first: a server that caches prompt prefixes reuses them for every
# fact of a question, whichever row wrote the answer.
SUPPORT_PROMPT = """Passages:
{passages}

Statement: {fact}

Is the statement supported by the passages above? Answer True or False.
Answer:"""


# ---------------------------------------------------------------- pure parts


def sign_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact sign test on paired scores (ties dropped)."""
    if len(a) != len(b):
        raise ValueError(f"paired scores differ in length: {len(a)} and {len(b)}")
    return mcnemar_exact(sum(x > y for x, y in zip(a, b)), sum(y > x for x, y in zip(a, b)))


def accuracy(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def cut_holds(
    reference: Sequence[bool], trial: Sequence[bool], max_drop: float = MAX_DROP, alpha: float = ALPHA
) -> bool:
    """The rule on one set: accuracy within ``max_drop`` of the reference and
    not significantly below it (a cut that does better always holds)."""
    drop = (accuracy(reference) or 0.0) - (accuracy(trial) or 0.0)
    if drop <= 0:
        return True
    only_reference, only_trial = discordant(reference, trial)
    return drop <= max_drop + 1e-9 and mcnemar_exact(only_reference, only_trial) >= alpha


@dataclass(frozen=True, slots=True)
class CutChoice:
    cut: float
    held: bool  # False: no candidate held on every set; the most permissive is shipped
    holding: tuple[float, ...]  # the candidates that held on every set


def choose_cut(
    sets: Mapping[str, Mapping[str, Sequence[bool]]],
    cuts: Sequence[float] = CANDIDATE_CUTS,
    reference: str = REFERENCE,
) -> CutChoice:
    """The highest cut (the fewest prompt tokens) that holds on every set;
    ``sets[name]`` maps ``reference`` and ``f"cut={c}"`` to per-question
    right/wrong. When none holds, the lowest cut: drop only what is clearly
    irrelevant."""
    holding = tuple(
        c for c in sorted(cuts) if all(cut_holds(rows[reference], rows[cut_row(c)]) for rows in sets.values())
    )
    if holding:
        return CutChoice(max(holding), True, holding)
    return CutChoice(min(cuts), False, ())


def leave_one_out(
    sets: Mapping[str, Mapping[str, Sequence[bool]]],
    cuts: Sequence[float] = CANDIDATE_CUTS,
    reference: str = REFERENCE,
) -> list[dict[str, Any]]:
    """For each set: the cut chosen on the others, and how it does on it."""
    out = []
    for held_out, rows in sets.items():
        others = {name: r for name, r in sets.items() if name != held_out}
        choice = choose_cut(others or {held_out: rows}, cuts, reference)
        ref, trial = rows[reference], rows[cut_row(choice.cut)]
        only_ref, only_trial = discordant(ref, trial)
        out.append(
            {
                "held_out": held_out,
                "chosen_on": sorted(others),
                "cut": choice.cut,
                "held_on_others": choice.held,
                "accuracy_reference": round(accuracy(ref) or 0.0, 4),
                "accuracy_cut": round(accuracy(trial) or 0.0, 4),
                "right_only_reference": only_ref,
                "right_only_cut": only_trial,
                "p": round(mcnemar_exact(only_ref, only_trial), 4),
                "holds": cut_holds(ref, trial),
                "n": len(ref),
            }
        )
    return out


def cut_row(c: float) -> str:
    return f"cut={c:g}"


def parse_limits(text: str | None) -> dict[str, int]:
    """``"200"`` (every set) or ``"popqa=200,bio=10"`` (per set; ``"*"``
    for the rest) as {set or "*": n}."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        name, _, value = part.strip().rpartition("=")
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"a limit is N or SET=N, not {part.strip()!r}") from None
        if n < 1:
            raise ValueError(f"a limit must be at least 1, not {n}")
        out[name.strip() or "*"] = n
    return out


def limit_for(limits: Mapping[str, int], name: str) -> int | None:
    return limits.get(name, limits.get("*"))


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")
_CITATION = re.compile(r"\s*\[\d+(?:,\s*\d+)*\]")


def parse_facts(text: str, limit: int = MAX_FACTS) -> list[str]:
    """The model's atomic facts, one a line, bullets and numbers removed;
    lines of fewer than three words are not facts."""
    facts = []
    for line in text.splitlines():
        fact = _BULLET.sub("", line).strip()
        if len(fact.split()) >= 3 and fact not in facts:
            facts.append(fact)
    return facts[:limit]


def parse_support(text: str) -> bool:
    """A support verdict: True only for an answer starting true/yes/supported."""
    words = re.findall(r"[a-z]+", text.lower())
    return bool(words) and words[0] in ("true", "yes", "supported")


def strip_citations(text: str) -> str:
    return _CITATION.sub("", text).strip()


def fit_context(chunks: Sequence[Chunk], budget_chars: int) -> tuple[list[Chunk], bool]:
    """Chunks in order while they fit ``budget_chars``; whether any was cut."""
    kept, used = [], 0
    for chunk in chunks:
        if used + len(chunk.text) > budget_chars:
            return kept, True
        kept.append(chunk)
        used += len(chunk.text)
    return kept, False


@dataclass(frozen=True, slots=True)
class RowOutcome:
    """One question answered by one row."""

    item_id: str
    row: str
    text: str
    correct: bool | None  # PopQA / PubHealth
    score: float | None  # Biography: share of supported facts
    context_chars: int
    chunks: int
    calls: int  # every model call the row makes for this question (judge, answer)
    prompt_tokens: int  # of the answer call(s)
    completion_tokens: int
    judge_calls: int = 0
    judge_prompt_tokens: int = 0
    seconds: float = 0.0
    context_cut: bool = False
    facts: tuple[tuple[str, bool], ...] = ()
    grading_calls: int = 0


def row_summary(outcomes: Sequence[RowOutcome], reference: Sequence[RowOutcome] | None, kind: str) -> dict[str, Any]:
    """A row's figures and its paired test against ``reference`` (same questions, same order)."""
    n = len(outcomes)
    if n == 0:
        return {"n": 0}
    out: dict[str, Any] = {
        "n": n,
        "prompt_tokens_per_answer": round(sum(o.prompt_tokens for o in outcomes) / n, 1),
        "judge_prompt_tokens_per_question": round(sum(o.judge_prompt_tokens for o in outcomes) / n, 1),
        "model_calls_per_question": round(sum(o.calls for o in outcomes) / n, 2),
        "seconds_per_question": round(sum(o.seconds for o in outcomes) / n, 2),
        "context_chars_per_question": round(sum(o.context_chars for o in outcomes) / n, 1),
        "contexts_cut_to_fit": sum(o.context_cut for o in outcomes),
    }
    if kind == "bio":
        scores = [o.score or 0.0 for o in outcomes]
        out["accuracy"] = round(sum(scores) / n, 4)
        out["grading_calls_per_question"] = round(sum(o.grading_calls for o in outcomes) / n, 2)
        out["facts_per_answer"] = round(sum(len(o.facts) for o in outcomes) / n, 2)
        if reference is not None:
            _check_paired(outcomes, reference)
            ref = [r.score or 0.0 for r in reference]
            out["better_than_rag"] = sum(x > y for x, y in zip(scores, ref))
            out["worse_than_rag"] = sum(y > x for x, y in zip(scores, ref))
            out["p_vs_rag"] = round(sign_test(scores, ref), 4)
            out["test"] = "exact sign test on per-question scores"
        return out
    flags = [bool(o.correct) for o in outcomes]
    out["accuracy"] = round(sum(flags) / n, 4)
    if reference is not None:
        _check_paired(outcomes, reference)
        only_row, only_rag = discordant(flags, [bool(r.correct) for r in reference])
        out["right_only_here"] = only_row
        out["right_only_rag"] = only_rag
        out["p_vs_rag"] = round(mcnemar_exact(only_row, only_rag), 4)
        out["test"] = "exact McNemar"
    return out


def _check_paired(a: Sequence[RowOutcome], b: Sequence[RowOutcome]) -> None:
    if [o.item_id for o in a] != [o.item_id for o in b]:
        raise ValueError("rows compared with RAG must cover the same questions in the same order")


def summarise(outcomes: Sequence[RowOutcome], kind: str, rows: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each row's summary, paired with RAG on the questions both answered."""
    by_row: dict[str, list[RowOutcome]] = {row: [] for row in rows}
    for outcome in outcomes:
        by_row.setdefault(outcome.row, []).append(outcome)
    reference = {o.item_id: o for o in by_row.get(REFERENCE, [])}
    out = {}
    for row in rows:
        mine = by_row.get(row, [])
        if not mine:
            continue
        paired = [o for o in mine if o.item_id in reference]
        ref = [reference[o.item_id] for o in paired] if row != REFERENCE and paired else None
        summary = row_summary(mine if ref is None else paired, ref, kind)
        if ref is not None and len(paired) < len(mine):
            summary["unpaired"] = len(mine) - len(paired)
        out[row] = summary
    return out


KIND_METRIC = {
    "popqa": "accuracy (answer string match)",
    "pubhealth": "accuracy (verdict)",
    "bio": "FactScore-style (share of supported atomic facts, judged by the local model against the retrieved pool)",
}


def table_markdown(tables: Mapping[str, Mapping[str, Mapping[str, Any]]], rows: Sequence[str] = ROWS) -> str:
    """The paper's Table 1 layout: a row per method, per dataset its score,
    prompt tokens per question (the answer's and the judge's; not the
    grading's), model calls and seconds per question, n and the paired p
    against RAG."""
    datasets = list(tables)
    head = ["method"]
    for name in datasets:
        head += [f"{name} {'FactScore*' if name == 'bio' else 'acc'}", "tokens", "calls", "s/q", "n", "p vs RAG"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [ROW_LABELS.get(row, row)]
        for name in datasets:
            s = tables[name].get(row)
            if not s:
                cells += ["–"] * 6
                continue
            p = s.get("p_vs_rag")
            cells += [
                f"{100 * s['accuracy']:.1f}",
                f"{s['prompt_tokens_per_answer'] + s['judge_prompt_tokens_per_question']:.0f}",
                f"{s['model_calls_per_question']:.2f}",
                f"{s['seconds_per_question']:.1f}",
                str(s["n"]),
                "–" if p is None else f"{p:.3f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------ model edge


class GenerationCache:
    """Model responses on disk (sqlite), keyed by the model, the prompt and
    the token cap: a context two rows share is generated once."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS generations (key TEXT PRIMARY KEY, response TEXT NOT NULL)")
        return self._db

    @staticmethod
    def key(model: str, request: ChatRequest) -> str:
        payload = {
            "model": model,
            "messages": [[m.role, m.content] for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_logprobs": request.top_logprobs,
            "stop": list(request.stop),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> tuple[ChatResponse, float] | None:
        with self._lock:
            row = self._connection().execute("SELECT response FROM generations WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        data = json.loads(row[0])
        seconds = data.pop("seconds")
        return ChatResponse(**data), seconds

    def put(self, key: str, response: ChatResponse, seconds: float) -> None:
        data = {
            "text": response.text,
            "model": response.model,
            "prompt_tokens": response.prompt_tokens,
            "completion_tokens": response.completion_tokens,
            "first_token_logprobs": dict(response.first_token_logprobs),
            "seconds": round(seconds, 3),
        }
        with self._lock:
            db = self._connection()
            db.execute("INSERT OR REPLACE INTO generations VALUES (?, ?)", (key, json.dumps(data)))
            db.commit()


@dataclass
class MeteredChat:
    """A chat model through the cache, counting what one row spends on one
    question; a cached response counts as its first run did."""

    model: ChatModel
    cache: GenerationCache | None
    model_name: str
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Prompts being answered now, by cache key, shared by every fresh() copy:
    # two rows with the very same prompt (the default filter keeping all
    # retrieved chunks in their order) wait for one answer instead of going
    # to the server together, where two requests batched on its slots can
    # be answered differently.
    _in_flight: dict[str, Future] = field(default_factory=dict)
    _in_flight_lock: threading.Lock = field(default_factory=threading.Lock)

    def complete(self, request: ChatRequest) -> ChatResponse:
        key = GenerationCache.key(self.model_name, request)
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            response, seconds = hit
        else:
            with self._in_flight_lock:
                pending = self._in_flight.get(key)
                if pending is None:
                    self._in_flight[key] = mine = Future()
            if pending is not None:
                hit = pending.result()  # answered once, counted as a cached answer
                response, seconds = hit
            else:
                try:
                    started = time.perf_counter()
                    response = self._complete(request)
                    seconds = time.perf_counter() - started
                    if self.cache is not None:
                        self.cache.put(key, response, seconds)
                    mine.set_result((response, seconds))
                except BaseException as exc:
                    mine.set_exception(exc)
                    raise
                finally:
                    with self._in_flight_lock:
                        self._in_flight.pop(key, None)
        with self._lock:
            self.calls += 1
            self.cached += hit is not None
            self.prompt_tokens += response.prompt_tokens
            self.completion_tokens += response.completion_tokens
            self.seconds += seconds
        return response

    def _complete(self, request: ChatRequest) -> ChatResponse:
        # A busy shared server times out now and then: tried again before
        # the run fails, since a whole table hangs on every answer.
        for attempt in range(RETRIES + 1):
            try:
                return self.model.complete(request)
            except ChatError as exc:
                if not exc.retryable or attempt == RETRIES:
                    raise
                time.sleep(RETRY_PAUSE_S)
        raise AssertionError("unreachable")

    def fresh(self) -> MeteredChat:
        return MeteredChat(
            self.model,
            self.cache,
            self.model_name,
            _in_flight=self._in_flight,
            _in_flight_lock=self._in_flight_lock,
        )


# ------------------------------------------------------------ one question


@dataclass(frozen=True, slots=True)
class Prepared:
    """A question's retrieval and the filter's cheap decisions, shared by all rows."""

    item: EvalItem
    candidates: tuple[Chunk, ...]
    retrieval_seconds: float
    filtered: Mapping[str, FilterResult]  # "filter" and each "cut=<c>"
    filter_seconds: float


def prepare(
    item: EvalItem,
    dataset: str,
    retriever: HybridRetriever,
    model: ChatModel,
    options: FilterOptions,
    cuts: Sequence[float],
    variants: Sequence[str] = (),
) -> Prepared:
    started = time.perf_counter()
    retrieval = retriever.search(
        item.question,
        size=MAX_CANDIDATES,
        filters=[{"term": {DOC_ID: doc_id_for(dataset, item)}}],
        include_vectors=True,
    )
    retrieval_seconds = time.perf_counter() - started
    candidates = tuple(retrieval.chunks)
    started = time.perf_counter()
    filtered = {"filter": run_filter(item.question, candidates, model=model, options=options)}
    filter_seconds = time.perf_counter() - started
    for name in variants:
        filtered[name] = run_filter(item.question, candidates, model=model, options=replace(options, **VARIANTS[name]))
    for c in cuts:
        filtered[cut_row(c)] = run_filter(
            item.question, candidates, model=model, options=replace(options, fixed_threshold=c)
        )
    return Prepared(item, candidates, retrieval_seconds, filtered, filter_seconds)


def answer_row(
    prepared: Prepared,
    row: str,
    kind: str,
    chat: MeteredChat,
    *,
    options: FilterOptions,
    judge_top: int,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> RowOutcome:
    """One row's context for the question, the answer from it, and its grade."""
    item = prepared.item
    max_tokens = BIO_MAX_TOKENS if kind == "bio" else ANSWER_MAX_TOKENS
    budget = context_budget_chars(context_tokens, max_tokens)
    judge_calls = judge_tokens = 0
    seconds = prepared.retrieval_seconds
    if row == "no_retrieval":
        context: list[Chunk] = []
        seconds = 0.0
    elif row == "rag":
        context = list(prepared.candidates)
    elif row == "topk":
        texts = [c.text for c in prepared.candidates]
        filter_chars = sum(len(c.text) for c in prepared.filtered["filter"].kept)
        taken = kept_within_budget(texts, [c.score or 0.0 for c in prepared.candidates], filter_chars)
        context = [prepared.candidates[i] for i in taken]
    elif row == "filter_judge":
        judge_chat = chat.fresh()
        judged = run_filter(
            item.question,
            prepared.candidates,
            model=judge_chat,
            options=replace(options, judge_top=judge_top),
            judge_many=judge_in_threads(judge_chat, threads=1),
        )
        context = list(judged.kept)
        judge_calls, judge_tokens = judge_chat.calls, judge_chat.prompt_tokens
        seconds += prepared.filter_seconds + judge_chat.seconds
    elif row in prepared.filtered:
        context = list(prepared.filtered[row].kept)
        seconds += prepared.filter_seconds
    else:
        raise ValueError(f"unknown row {row!r}; choose among {', '.join([*ROWS, *VARIANTS])} or cut=<c>")
    context, was_cut = fit_context(context, budget)
    answer_chat = chat.fresh()
    text, correct = _answer(item, context, kind, answer_chat, max_tokens, no_retrieval=row == "no_retrieval")
    facts: tuple[tuple[str, bool], ...] = ()
    score = None
    grading_calls = 0
    if kind == "bio":
        grade_chat = chat.fresh()
        facts = grade_biography(text, prepared.candidates, grade_chat, budget)
        score = sum(ok for _, ok in facts) / len(facts) if facts else 0.0
        grading_calls = grade_chat.calls
    return RowOutcome(
        item_id=item.item_id,
        row=row,
        text=text,
        correct=correct,
        score=None if score is None else round(score, 4),
        context_chars=sum(len(c.text) for c in context),
        chunks=len(context),
        calls=judge_calls + answer_chat.calls,
        prompt_tokens=answer_chat.prompt_tokens,
        completion_tokens=answer_chat.completion_tokens,
        judge_calls=judge_calls,
        judge_prompt_tokens=judge_tokens,
        seconds=round(seconds + answer_chat.seconds, 3),
        context_cut=was_cut,
        facts=facts,
        grading_calls=grading_calls,
    )


def _answer(
    item: EvalItem, context: Sequence[Chunk], kind: str, chat: ChatModel, max_tokens: int, *, no_retrieval: bool
) -> tuple[str, bool | None]:
    if kind == "pubhealth":
        # With no passages the verdict prompt says "(none)": the paper's no-retrieval setting.
        verdict = verdict_from_chunks(item.question, context, chat)
        return verdict.text, verdict.label == item.label
    if no_retrieval:
        response = chat.complete(
            ChatRequest(
                messages=(Message("user", NO_RETRIEVAL_PROMPT.format(query=item.question)),), max_tokens=max_tokens
            )
        )
        answer = Answer(response.text.strip(), True, ())
    else:
        # The prompt of `chunkrag ask` and `chunkrag eval --generate` (search_extension.ask.answer_for
        # without segments is this call).
        answer = answer_from_chunks(item.question, context, chat, max_tokens=max_tokens)
    correct = answer_in_context(answer.text, item.answers) if item.answers else None
    return answer.text, correct


def grade_biography(
    text: str, pool: Sequence[Chunk], chat: ChatModel, budget_chars: int
) -> tuple[tuple[str, bool], ...]:
    """The answer's atomic facts, each judged supported or not by the pool."""
    if not text.strip() or NOT_FOUND in text.upper():
        return ()
    response = chat.complete(
        ChatRequest(
            messages=(Message("user", FACTS_PROMPT.format(text=strip_citations(text))),), max_tokens=FACTS_MAX_TOKENS
        )
    )
    facts = parse_facts(response.text)
    passages, _ = fit_context(pool, budget_chars)
    joined = "\n\n".join(" ".join(c.text.split()) for c in passages)
    graded = []
    for fact in facts:
        verdict = chat.complete(
            ChatRequest(
                messages=(Message("user", SUPPORT_PROMPT.format(passages=joined, fact=fact)),),
                max_tokens=SUPPORT_MAX_TOKENS,
            )
        )
        graded.append((fact, parse_support(verdict.text)))
    return tuple(graded)


# ------------------------------------------------------------ a whole set


@dataclass(frozen=True, slots=True)
class TableRun:
    dataset: str
    kind: str
    rows: tuple[str, ...]
    outcomes: tuple[RowOutcome, ...]
    index: str
    ingest_seconds: float
    notes: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, Any]]:
        return summarise(self.outcomes, self.kind, self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "kind": self.kind,
            "metric": KIND_METRIC[self.kind],
            "rows": list(self.rows),
            "summary": self.summary(),
            "index": self.index,
            "ingest_seconds": round(self.ingest_seconds, 1),
            "notes": dict(self.notes),
            "questions": [_outcome_json(o) for o in self.outcomes],
        }


def _outcome_json(o: RowOutcome) -> dict[str, Any]:
    out = {name: getattr(o, name) for name in RowOutcome.__slots__}
    out["facts"] = [list(f) for f in o.facts]
    return out


def run_table(
    items: Sequence[EvalItem],
    dataset: str,
    kind: str,
    *,
    client,
    embedder,
    settings: Settings,
    model: ChatModel,
    model_name: str,
    cache: GenerationCache | None,
    index: str,
    rows: Sequence[str] = ROWS,
    options: FilterOptions = FilterOptions(answer=False),
    judge_top: int = JUDGE_TOP_WHEN_ASKED,
    row_limits: Mapping[str, int] | None = None,
    cuts: Sequence[float] = (),
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    parallel: int = 2,
    on_outcome: Callable[[RowOutcome], None] | None = None,
) -> TableRun:
    """Index the pools, retrieve each question once, answer it by every row
    (``row_limits``: a row answered on the first n questions only)."""
    ingest_seconds = index_pools(items, dataset, client=client, embedder=embedder, settings=settings, index=index)
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    variants = [row for row in rows if row in VARIANTS]
    prepared = [prepare(item, dataset, retriever, model, options, cuts, variants) for item in items]
    limits = dict(row_limits or {})
    # Question by question, every row: a run stopped early leaves whole
    # questions in the cache, and a re-run on that many answers from it.
    jobs = [(i, row) for i in range(len(prepared)) for row in rows if i < limits.get(row, len(prepared))]
    chat = MeteredChat(model, cache, model_name)

    def work(job: tuple[int, str]) -> tuple[int, int, RowOutcome]:
        i, row = job
        outcome = answer_row(
            prepared[i], row, kind, chat, options=options, judge_top=judge_top, context_tokens=context_tokens
        )
        if on_outcome:
            on_outcome(outcome)
        return rows.index(row), i, outcome

    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="table") as pool:
        done = list(pool.map(work, jobs))
    outcomes = tuple(o for _, _, o in sorted(done, key=lambda t: (t[0], t[1])))
    notes = {
        "questions": len(items),
        "row_limits": limits,
        "judge_top": judge_top,
        "cut": prepared[0].filtered["filter"].threshold.value
        if prepared and prepared[0].filtered["filter"].threshold
        else None,
        "context_tokens": context_tokens,
        "answer_max_tokens": BIO_MAX_TOKENS if kind == "bio" else ANSWER_MAX_TOKENS,
    }
    return TableRun(dataset, kind, tuple(rows), outcomes, index, ingest_seconds, notes)
