"""The open-corpus table: each question's N candidates retrieved from the
shared index (open_corpus.py), or from the view of it its kind asks of
(unanswerable.py), every row of open_rows.py chooses from them, and each row
is measured and paired with all N.

Without a model, every row, every question: on answerable questions,
answer-in-context (a gold answer as whole words of the kept text; PopQA's
substring rule beside it) and whether a kept chunk comes from the question's
own pool; on unanswerable ones, whether nothing was kept (the answer is
"not found" with no model call); on all, the characters kept and the seconds
the row took to choose (the relevance model's time for its candidates
included, whichever row read them first: :class:`RememberedRelevance`).
With the model, on the first ``generate_limits[set]`` questions of each set
and kind: the answer (PopQA, SQuAD) or verdict (PubHealth) written from the
row's chunks with ``chunkrag table``'s prompt and token cap, graded (PopQA: a gold answer as whole words of it; "NOT
FOUND" is never right), its prompt tokens and seconds; a row that kept
nothing is "not found" without a call. Each row is paired with all N on the
same questions (exact McNemar), and its risk-coverage curve (accuracy among
the questions answered against the share answered, the most confident
first) is drawn over every question of its N, answerable or not.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatModel
from chunkrag_eval.answer_table import (
    ANSWER_MAX_TOKENS,
    DEFAULT_CONTEXT_TOKENS,
    GenerationCache,
    MeteredChat,
    _answer,
    fit_context,
)
from chunkrag_eval.measures import answer_in_context, answer_in_words, risk_coverage
from chunkrag_eval.open_rows import (
    COSINE_THRESHOLDS,
    DEFAULT_CANDIDATES,
    DEFAULT_GATE,
    MAX_DROP,
    MIN_NOT_FOUND_SHARE,
    REFERENCE,
    SIZES,
    THRESHOLD_CHOSEN_AT,
    Row,
    choose_cosine_threshold,
    choose_default,
    paired_with_reference,
    rate,
    select_cosine,
    select_same_chars,
    select_top,
)
from chunkrag_eval.unanswerable import Asked
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import FilterOptions, run_filter, shipped_relevance_model
from chunkrag_filter.processors.answer import NOT_FOUND
from chunkrag_filter.processors.answer import context_chars as context_budget_chars
from chunkrag_filter.relevance_places import RelevanceModel
from search_extension.options import OptionError, parse_options
from search_extension.retriever import HybridRetriever


@dataclass(frozen=True, slots=True)
class Retrieved:
    """One question's N candidates from its view of the index, and their signals."""

    asked: Asked
    size: int
    candidates: tuple[Chunk, ...]
    scores: tuple[float, ...]  # hybrid, in retrieval order
    cosine: tuple[float, ...]  # query-chunk embedding cosine
    chars: tuple[int, ...]
    own: tuple[bool, ...]  # from the question's own pool
    seconds: float

    @property
    def dataset(self) -> str:
        return self.asked.dataset

    @property
    def item(self):
        return self.asked.item


@dataclass
class Outcome:
    """One row on one question at one N."""

    dataset: str
    item_id: str
    size: int
    row: str
    kept: tuple[int, ...]
    chars: int
    answer_in_context: bool | None  # whole words; None on an unanswerable question
    own_pool: bool
    seconds: float = 0.0  # choosing (retrieval aside)
    correct: bool | None = None
    prompt_tokens: int = 0
    judge_prompt_tokens: int = 0
    answer_seconds: float = 0.0
    answer: str | None = None
    kind: str = "answerable"
    answer_in_context_substring: bool | None = None  # PopQA's own rule, beside the whole-word one
    confidence: float = 0.0  # the best cosine among the kept chunks (0: none kept)
    found: bool | None = None  # with the model: it answered something other than NOT FOUND

    @property
    def group(self) -> str:
        """The table it belongs to: the set, and the kind when not answerable."""
        return self.dataset if self.kind == "answerable" else f"{self.dataset} {self.kind}"


@dataclass(frozen=True, slots=True)
class OpenRun:
    sizes: tuple[int, ...]
    rows: tuple[Row, ...]
    outcomes: tuple[Outcome, ...]
    cosine_threshold: Mapping[str, Any]
    skipped_rows: Mapping[str, str]
    notes: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        return summarise(self.outcomes, self.rows)

    def default_choice(self) -> dict[str, Any] | None:
        return default_choice(self.outcomes)

    def selective(self) -> dict[str, dict[str, Any]]:
        return selective_answering(self.outcomes, self.rows)


def filter_options_for(row: Row) -> FilterOptions:
    """The filter's options for a row: the eval surface's defaults with the
    row's ``ext.chunkrag`` overrides, its gate among them (an unknown option
    raises OptionError)."""
    return replace(parse_options(row.overrides, surface="eval").filter, answer=False)


def gate_run(row: Row) -> str | None:
    """The gate a filter row runs behind (for the default gate, the one the
    filter ships now); None for a row that is not the filter."""
    return filter_options_for(row).gate if row.kind == "filter" else None


def row_label(row: Row) -> str:
    """The row as the table names it; a row on the default gate says which
    gate that is, so a table read later names what ran."""
    if row.kind == "filter" and row.gate == DEFAULT_GATE:
        return f"{row.label}: gate {gate_run(row)}"
    return row.label


def row_json(row: Row) -> dict[str, Any]:
    """The result file's record of a row: what it is, its options and, for
    the filter, the gate it declares and the gate that ran."""
    out: dict[str, Any] = {"label": row_label(row), "kind": row.kind, "options": dict(row.options)}
    if row.kind == "filter":
        out.update(gate=row.gate, gate_run=gate_run(row))
    return out


def usable_rows(rows: Sequence[Row]) -> tuple[tuple[Row, ...], dict[str, str]]:
    """The rows whose options the filter takes, and a note for each skipped one."""
    kept, skipped = [], {}
    for row in rows:
        if row.kind == "filter":
            try:
                filter_options_for(row)
            except (OptionError, ValueError) as exc:
                skipped[row.name] = f"skipped: the filter does not take {row.overrides} here ({exc})"
                continue
        kept.append(row)
    names = {r.name for r in kept}
    for row in list(kept):
        if row.kind == "same_chars" and row.of not in names:
            kept.remove(row)
            skipped[row.name] = f"skipped: it matches the characters of row {row.of}, which was skipped"
    return tuple(kept), skipped


def retrieve(asked: Asked, retriever: HybridRetriever, size: int) -> Retrieved:
    started = time.perf_counter()
    result = retriever.search(asked.item.question, size=size, filters=asked.filters, include_vectors=True)
    seconds = time.perf_counter() - started
    candidates = tuple(result.chunks)
    query = np.asarray(result.query_vector, dtype=np.float32)
    cosine = tuple(float(np.dot(c.vector, query)) if c.vector is not None else -1.0 for c in candidates)
    return Retrieved(
        asked,
        size,
        candidates,
        tuple(float(c.score or 0.0) for c in candidates),
        cosine,
        tuple(len(c.text) for c in candidates),
        tuple(c.doc_id == asked.own_doc for c in candidates),
        round(seconds, 4),
    )


def _measure(r: Retrieved, row: str, kept: Sequence[int], seconds: float = 0.0) -> Outcome:
    kept = tuple(sorted(kept))
    text = " ".join(r.candidates[i].text for i in kept)
    answers = r.item.answers if r.asked.answerable else ()
    return Outcome(
        dataset=r.dataset,
        item_id=r.item.item_id,
        size=r.size,
        row=row,
        kept=kept,
        chars=sum(r.chars[i] for i in kept),
        answer_in_context=answer_in_words(text, answers) if answers else None,
        own_pool=any(r.own[i] for i in kept),
        seconds=round(seconds, 4),
        kind=r.asked.kind,
        answer_in_context_substring=answer_in_context(text, answers) if answers else None,
        confidence=round(max((r.cosine[i] for i in kept), default=0.0), 6),
    )


class RememberedRelevance:
    """The relevance model with each (query, texts) call's scores kept: the
    rows that differ only in their cut score the same candidates, so a
    question's N are read by the model once, not once per row.

    Each call's seconds are kept with its scores, and every row that asks
    for them is charged them (:meth:`settle`): otherwise the model's time
    lands on whichever row read the candidates first, and the rows after it
    that differ only in their cut look tens of times cheaper than it. Loading the
    model is a one-off, charged to no row."""

    def __init__(
        self,
        model: RelevanceModel | None = None,
        *,
        load: Callable[[], RelevanceModel] = shipped_relevance_model,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self._model = model
        self._load = load
        self._clock = clock
        self._scores: dict[tuple[str, tuple[str, ...]], tuple[list[float], float]] = {}
        self._spent = 0.0  # seconds really spent here (loading, scoring) since the last settle
        self._charged = 0.0  # seconds the calls since the last settle cost when first computed

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        key = (query, tuple(texts))
        if key not in self._scores:
            started = self._clock()
            if self._model is None:
                self._model = self._load()
            loaded = self._clock()
            scores = list(self._model.score(query, texts))
            done = self._clock()
            self._scores[key] = (scores, done - loaded)
            self._spent += done - started
        scores, seconds = self._scores[key]
        self._charged += seconds
        return list(scores)

    def settle(self) -> float:
        """Seconds to add to the wall time of what ran since the last settle:
        the first-computed cost of every call answered from memory, less the
        loading it waited for. Resets."""
        adjustment = self._charged - self._spent
        self._spent = self._charged = 0.0
        return adjustment


def _filter_kept(
    r: Retrieved,
    options: FilterOptions,
    model: ChatModel,
    judge_many=None,
    relevance: RememberedRelevance | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[int], float]:
    """The candidates a filter row keeps, and the seconds it took to choose
    them, the relevance model's time for them included even when an earlier
    row read them."""
    if relevance is not None:
        relevance.settle()  # what ran before this row is not its cost
    started = clock()
    result = run_filter(
        r.item.question, r.candidates, model=model, options=options, judge_many=judge_many, relevance_model=relevance
    )
    seconds = clock() - started + (relevance.settle() if relevance is not None else 0.0)
    position = {c.chunk_id: i for i, c in enumerate(r.candidates)}
    return [position[c.chunk_id] for c in result.kept], seconds


def cosine_threshold_choice(
    retrieved: Sequence[Retrieved], fixed: float | None = None, at: int = THRESHOLD_CHOSEN_AT
) -> dict[str, Any]:
    """The cosine row's threshold: ``fixed``, else chosen by the shipped cut's
    rule on answer-in-context at N = ``at`` over the sets with answer strings."""
    if fixed is not None:
        return {"threshold": fixed, "rule": "given (--cosine-threshold)"}
    sets: dict[str, tuple[list[bool], dict[float, list[bool]]]] = {}
    for dataset in dict.fromkeys(r.dataset for r in retrieved):
        mine = [r for r in retrieved if r.dataset == dataset and r.size == at and r.asked.answerable and r.item.answers]
        if not mine:
            continue
        gold = [[answer_in_words(c.text, r.item.answers) for c in r.candidates] for r in mine]
        reference = [any(g) for g in gold]
        flags = {
            t: [any(g[i] for i in select_cosine(r.cosine, t)) for r, g in zip(mine, gold)] for t in COSINE_THRESHOLDS
        }
        sets[dataset] = (reference, flags)
    if not sets:
        return {"threshold": None, "rule": f"no set with answer strings at N = {at}: pass --cosine-threshold"}
    choice = choose_cosine_threshold(sets)
    return {
        "threshold": choice.cut,
        "held": choice.held,
        "holding": list(choice.holding),
        "chosen_on": {name: len(ref) for name, (ref, _) in sets.items()},
        "at_n": at,
        "candidates": list(COSINE_THRESHOLDS),
        "per_threshold": {
            name: {
                f"{t:g}": {"answer_in_context": rate(flags[t]), **paired_with_reference(flags[t], ref)}
                for t in COSINE_THRESHOLDS
            }
            | {"all": {"answer_in_context": rate(ref)}}
            for name, (ref, flags) in sets.items()
        },
        "rule": "the highest candidate within one point of all N's answer-in-context and not significantly "
        "below it (exact McNemar p >= 0.05) on every set with answer strings; none holding: the lowest",
    }


def run_open(
    asked: Sequence[Asked],
    *,
    retriever: HybridRetriever,
    model: ChatModel,
    rows: Sequence[Row],
    sizes: Sequence[int] = SIZES,
    model_name: str = "",
    cache: GenerationCache | None = None,
    generate_limits: Mapping[str, int] | None = None,
    generate_sizes: Sequence[int] | None = None,
    generate_rows: Sequence[str] | None = None,
    judge_limits: Mapping[str, int] | None = None,
    cosine_threshold: float | None = None,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    parallel: int = 1,
    on_progress: Callable[[str], None] | None = None,
) -> OpenRun:
    """Retrieve every question at every N from its view, choose by every
    row, measure; with ``generate_limits`` ({set: n}), answer the first n
    questions of each set and kind by every row (or by ``generate_rows``
    only) at ``generate_sizes`` (default: every N). A row that calls the
    model to choose (the LLM judge) runs on the first ``judge_limits[set]``
    questions of each set and kind only."""
    say = on_progress or (lambda _: None)
    generate_limits, judge_limits = dict(generate_limits or {}), dict(judge_limits or {})
    usable, skipped = usable_rows(rows)
    if not any(judge_limits.values()):
        for row in [r for r in usable if r.judge]:
            usable = tuple(r for r in usable if r is not row)
            skipped[row.name] = "not run: it calls the model to choose (give a judge limit to run it on a subset)"
    options = {r.name: filter_options_for(r) for r in usable if r.kind == "filter"}
    retrieved: list[Retrieved] = []
    groups: dict[tuple[str, str], list[Asked]] = {}
    for question in asked:
        groups.setdefault((question.dataset, question.kind), []).append(question)
    for (dataset, kind), members in groups.items():
        for size in sizes:
            started = time.perf_counter()
            retrieved.extend(retrieve(question, retriever, size) for question in members)
            say(
                f"{dataset} {kind} N={size}: {len(members)} questions retrieved in "
                f"{time.perf_counter() - started:.0f} s"
            )
    at = THRESHOLD_CHOSEN_AT if THRESHOLD_CHOSEN_AT in sizes else max(sizes)
    threshold = cosine_threshold_choice(retrieved, cosine_threshold, at)
    if threshold["threshold"] is None and any(r.kind == "cosine" for r in usable):
        usable = tuple(r for r in usable if r.kind != "cosine")
        skipped["cosine"] = "skipped: " + threshold["rule"]
    chat = MeteredChat(model, cache, model_name)
    relevance = RememberedRelevance()  # loaded on first use: only the cross-encoder rows need it
    order = {
        (dataset, kind, q.item.item_id): i for (dataset, kind), members in groups.items() for i, q in enumerate(members)
    }
    outcomes: list[Outcome] = []
    for r in retrieved:
        mine: dict[str, Outcome] = {}
        for row in sorted(usable, key=lambda x: x.kind == "same_chars"):  # what same_chars matches first
            if row.kind in ("all", "top", "cosine", "same_chars"):
                started = time.perf_counter()
                if row.kind == "all":
                    kept = list(range(len(r.candidates)))
                elif row.kind == "top":
                    kept = select_top(len(r.candidates), row.k or 0)
                elif row.kind == "cosine":
                    kept = select_cosine(r.cosine, threshold["threshold"])
                else:
                    kept = select_same_chars(r.chars, r.scores, mine[row.of].chars)
                mine[row.name] = _measure(r, row.name, kept, time.perf_counter() - started)
            elif row.judge:
                if order[(r.dataset, r.asked.kind, r.item.item_id)] >= judge_limits.get(r.dataset, 0):
                    continue
                judge_chat = chat.fresh()
                kept, seconds = _filter_kept(
                    r,
                    options[row.name],
                    judge_chat,
                    judge_in_threads(judge_chat, threads=max(1, parallel)),
                    relevance=relevance,
                )
                outcome = _measure(r, row.name, kept, seconds)
                outcome.judge_prompt_tokens = judge_chat.prompt_tokens
                mine[row.name] = outcome
            else:
                kept, seconds = _filter_kept(r, options[row.name], model, relevance=relevance)
                mine[row.name] = _measure(r, row.name, kept, seconds)
        outcomes.extend(mine[row.name] for row in usable if row.name in mine)
    say(f"rows chosen: {len(outcomes)} outcomes")
    if any(generate_limits.values()):
        answered_rows = set(generate_rows) if generate_rows else {r.name for r in usable}
        _generate(
            [o for o in outcomes if o.row in answered_rows],
            retrieved,
            order,
            chat,
            generate_limits,
            set(generate_sizes or sizes),
            context_tokens,
            parallel,
            say,
        )
    notes = {
        "questions": {f"{dataset} {kind}": len(members) for (dataset, kind), members in groups.items()},
        "generate_limits": generate_limits,
        "generate_sizes": list(generate_sizes or sizes) if any(generate_limits.values()) else [],
        "generate_rows": list(generate_rows) if generate_rows else "every row",
        "judge_limits": judge_limits,
        "context_tokens": context_tokens,
        "answer_max_tokens": ANSWER_MAX_TOKENS,
        "retrieval_seconds_per_question": round(sum(r.seconds for r in retrieved) / len(retrieved), 4)
        if retrieved
        else None,
    }
    return OpenRun(tuple(sizes), tuple(usable), tuple(outcomes), threshold, skipped, notes)


def answer_limit_key(dataset: str, kind: str) -> str:
    """The key of ``generate_limits`` for a set's questions of a kind: the
    set's name for its answerable ones, "set:kind" for the others."""
    return dataset if kind == "answerable" else f"{dataset}:{kind}"


def _generate(
    outcomes: list[Outcome],
    retrieved: Sequence[Retrieved],
    order: Mapping[tuple[str, str, str], int],
    chat: MeteredChat,
    limits: Mapping[str, int],
    sizes: set[int],
    context_tokens: int,
    parallel: int,
    say: Callable[[str], None],
) -> None:
    """Answer, by each outcome's row, the first ``limits[set]`` answerable
    questions of each set and the first ``limits["set:kind"]`` of each
    unanswerable kind (none unless named). A row that kept nothing says "not
    found" without a call. A PubHealth claim off topic is not answered: its
    verdict prompt has no "not found" to say."""
    by_key = {(r.dataset, r.asked.kind, r.item.item_id, r.size): r for r in retrieved}
    jobs = [
        o
        for o in outcomes
        if o.size in sizes
        and order[(o.dataset, o.kind, o.item_id)] < limits.get(answer_limit_key(o.dataset, o.kind), 0)
        and not (o.dataset == "pubhealth" and o.kind != "answerable")
    ]
    budget = context_budget_chars(context_tokens, ANSWER_MAX_TOKENS)

    def work(o: Outcome) -> None:
        r = by_key[(o.dataset, o.kind, o.item_id, o.size)]
        if not o.kept:
            o.answer, o.found, o.prompt_tokens, o.answer_seconds = NOT_FOUND, False, 0, 0.0
            o.correct = False if o.kind == "answerable" else None
            return
        context, _ = fit_context([r.candidates[i] for i in o.kept], budget)
        answer_chat = chat.fresh()
        text, correct = _answer(r.item, context, o.dataset, answer_chat, ANSWER_MAX_TOKENS, no_retrieval=False)
        o.answer = text
        o.found = NOT_FOUND not in text.upper()
        if o.kind != "answerable":
            o.correct = None
        elif o.dataset == "pubhealth":
            o.correct = bool(correct)
        else:
            o.correct = bool(o.found and answer_in_words(text, r.item.answers))
        o.prompt_tokens, o.answer_seconds = answer_chat.prompt_tokens, round(answer_chat.seconds, 3)
        said = "right" if o.correct else "wrong" if o.correct is not None else ("answered" if o.found else "not found")
        say(f"[{o.group} {o.item_id} N={o.size}] {o.row}: {o.prompt_tokens} tokens, {said}")

    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="open") as pool:
        list(pool.map(work, jobs))


# ---------------------------------------------------------------- the default


def default_choice(outcomes: Sequence[Outcome], at: int = THRESHOLD_CHOSEN_AT) -> dict[str, Any] | None:
    """The filter's default chosen by :func:`open_rows.choose_default` at N =
    ``at``: on each answerable set, every candidate row answered by the model
    on the same questions as all N; on the unanswerable questions (every set
    and kind together), how often each kept nothing. None when no candidate
    was answered on an answerable set."""
    answerable: dict[str, dict[str, tuple[list[bool], float]]] = {}
    questions: dict[str, int] = {}
    here = [o for o in outcomes if o.size == at]
    for dataset in dict.fromkeys(o.dataset for o in here if o.kind == "answerable"):
        by_row: dict[str, dict[str, Outcome]] = {}
        for o in here:
            if o.dataset == dataset and o.kind == "answerable" and o.correct is not None:
                by_row.setdefault(o.row, {})[o.item_id] = o
        reference = by_row.get(REFERENCE, {})
        rows = {c: by_row[c] for c in DEFAULT_CANDIDATES if c in by_row}
        if not reference or not rows:
            continue
        ids = [i for i in reference if all(i in r for r in rows.values())]
        answerable[dataset] = {
            name: ([bool(r[i].correct) for i in ids], sum(r[i].prompt_tokens for i in ids) / max(1, len(ids)))
            for name, r in {REFERENCE: reference, **rows}.items()
        }
        questions[dataset] = len(ids)
    if not answerable:
        return None
    not_found: dict[str, tuple[int, int]] = {}
    unanswerable = [o for o in here if o.kind != "answerable" and o.row in DEFAULT_CANDIDATES]
    for row in dict.fromkeys(o.row for o in unanswerable):
        mine = [o for o in unanswerable if o.row == row]
        not_found[row] = (sum(not o.kept for o in mine), len(mine))
    kinds = {o.group: 0 for o in here if o.kind != "answerable" and o.row == REFERENCE}
    for o in here:
        if o.kind != "answerable" and o.row == REFERENCE:
            kinds[o.group] += 1
    choice = choose_default(answerable, not_found)
    return {
        "row": choice.row,
        "held": choice.held,
        "holding": list(choice.holding),
        "at_n": at,
        "answerable_questions": questions,
        "unanswerable_questions": kinds,
        "candidates": [c for c in DEFAULT_CANDIDATES if c in choice.tokens],
        "prompt_tokens_per_answer": {c: round(t, 1) for c, t in choice.tokens.items()},
        "not_found_without_a_call": {c: round(v, 4) for c, v in choice.not_found.items()},
        "rule": f"among the candidates written first, those whose accuracy is within {MAX_DROP * 100:g} points of "
        "all N and not significantly below it (exact McNemar p >= 0.05) on every answerable set; of those, the one "
        'keeping nothing ("not found" with no model call) for the most unanswerable questions, then the fewest '
        f"prompt tokens per answer; it must do so for more than {MIN_NOT_FOUND_SHARE:.0%} of them, else the "
        "shipped default stays",
    }


# ---------------------------------------------------------------- summary


def summarise(outcomes: Sequence[Outcome], rows: Sequence[Row]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per set and kind ("popqa", "popqa absent", ...), per N, per row: the
    no-model measures over every question the row ran on, the model's over
    those answered, each paired with all N on the same questions."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    keys = dict.fromkeys((o.group, o.size) for o in outcomes)
    for group, size in keys:
        here = [o for o in outcomes if o.group == group and o.size == size]
        reference = {o.item_id: o for o in here if o.row == REFERENCE}
        table: dict[str, Any] = {}
        for row in rows:
            mine = [o for o in here if o.row == row.name]
            if not mine:
                continue
            refs = [reference[o.item_id] for o in mine]
            entry: dict[str, Any] = {
                "n": len(mine),
                "chars_per_question": round(sum(o.chars for o in mine) / len(mine), 1),
                "chars_share_of_all": round(sum(o.chars for o in mine) / max(1, sum(o.chars for o in refs)), 4),
                "chunks_per_question": round(sum(len(o.kept) for o in mine) / len(mine), 2),
                "chunks_median": float(statistics.median(len(o.kept) for o in mine)),
                "nothing_kept": rate([not o.kept for o in mine]),
                "choose_ms_per_question": round(1000 * sum(o.seconds for o in mine) / len(mine), 2),
            }
            if mine[0].kind == "answerable":
                entry["own_pool_in_context"] = rate([o.own_pool for o in mine])
                entry["own_pool_paired"] = paired_with_reference([o.own_pool for o in mine], [o.own_pool for o in refs])
            if mine[0].answer_in_context is not None:
                flags = [bool(o.answer_in_context) for o in mine]
                entry["answer_in_context"] = rate(flags)
                entry["answer_in_context_substring"] = rate([bool(o.answer_in_context_substring) for o in mine])
                entry.update(paired_with_reference(flags, [bool(o.answer_in_context) for o in refs]))
                # The questions all N can answer from: what a per-chunk choice can keep or lose.
                held = [o for o, ref in zip(mine, refs) if ref.answer_in_context]
                if held:
                    entry["where_all_hold"] = {
                        "n": len(held),
                        "answer_kept": sum(bool(o.answer_in_context) for o in held),
                        "chunks_median": float(statistics.median(len(o.kept) for o in held)),
                    }
                matched = {o.item_id: o for o in here if o.row == row.of} if row.kind == "same_chars" else {}
                if matched and all(o.item_id in matched for o in mine):
                    # top-k against the row whose characters it was given, question by question
                    test = paired_with_reference(flags, [bool(matched[o.item_id].answer_in_context) for o in mine])
                    entry["against_matched_row"] = {"discordant": test["discordant"], "p": test["p_vs_all"]}
            if row.judge:
                entry["judge_prompt_tokens_per_question"] = round(
                    sum(o.judge_prompt_tokens for o in mine) / len(mine), 1
                )
            answered = [o for o in mine if o.found is not None]
            if answered:
                model: dict[str, Any] = {
                    "n": len(answered),
                    "prompt_tokens_per_question": round(sum(o.prompt_tokens for o in answered) / len(answered), 1),
                    "seconds_per_answer": round(sum(o.answer_seconds for o in answered) / len(answered), 2),
                    "said_not_found": rate([not o.found for o in answered]),
                }
                if answered[0].kind == "answerable":
                    paired_refs = [reference[o.item_id] for o in answered]
                    model["accuracy"] = rate([bool(o.correct) for o in answered])
                    if all(p.correct is not None for p in paired_refs):
                        test = paired_with_reference(
                            [bool(o.correct) for o in answered], [bool(p.correct) for p in paired_refs]
                        )
                        model.update(discordant=test["discordant"], p_vs_all=test["p_vs_all"])
                else:
                    model["made_up"] = rate([bool(o.found) for o in answered])
                entry["model"] = model
            table[row.name] = entry
        out.setdefault(group, {})[str(size)] = table
    return out


def selective_answering(outcomes: Sequence[Outcome], rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
    """Per N and row, over every question of that N (answerable or not): the
    risk-coverage curve (:func:`measures.risk_coverage`), the confidence
    being the best cosine among the kept chunks. "model": answered = the
    model said something other than NOT FOUND, right = graded right (an
    unanswerable question answered is wrong), over the questions the model
    answered for that row; "in_context": answered = something kept, right =
    an answer in the kept text, over every question."""
    out: dict[str, dict[str, Any]] = {}
    for size in sorted({o.size for o in outcomes}):
        for row in rows:
            mine = [o for o in outcomes if o.size == size and o.row == row.name and o.dataset != "pubhealth"]
            if not mine:
                continue
            entry = {
                "in_context": risk_coverage([(o.confidence, bool(o.kept), bool(o.answer_in_context)) for o in mine]),
            }
            answered = [o for o in mine if o.found is not None]
            if answered:
                entry["model"] = risk_coverage([(o.confidence, bool(o.found), bool(o.correct)) for o in answered])
            out.setdefault(str(size), {})[row.name] = entry
    return out


def table_markdown(run: OpenRun) -> str:
    """One table per set and kind: a line per N and row."""
    summary = run.summary()
    labels = {r.name: row_label(r) for r in run.rows}
    lines = []
    for group, by_size in summary.items():
        answerable = " " not in group
        has_aic = any("answer_in_context" in e for t in by_size.values() for e in t.values())
        lines += [f"### {group}", ""]
        head = ["N", "row", "n", "nothing kept"]
        head += ["answer in context", "(substring)", "p vs all"] if has_aic else []
        head += ["own pool kept"] if answerable else []
        head += ["chars / question", "share of all N", "ms to choose", "model n"]
        head += ["accuracy", "p vs all (model)"] if answerable else ["made up"]
        head += ["said not found", "tokens / question", "s / answer"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for size, table in by_size.items():
            for name, e in table.items():
                label = labels.get(name, name)
                if name == "cosine" and run.cosine_threshold.get("threshold") is not None:
                    label += f", t = {run.cosine_threshold['threshold']:g}"
                cells = [size, label, str(e["n"]), f"{e['nothing_kept']:.3f}"]
                if has_aic:
                    aic = e.get("answer_in_context")
                    cells += [
                        "–" if aic is None else f"{aic:.3f}",
                        "–" if aic is None else f"{e['answer_in_context_substring']:.3f}",
                        "–" if name == REFERENCE or aic is None else f"{e['p_vs_all']:.3g}",
                    ]
                if answerable:
                    cells.append(f"{e['own_pool_in_context']:.3f}")
                cells += [
                    f"{e['chars_per_question']:,.0f}",
                    f"{100 * e['chars_share_of_all']:.0f}%",
                    f"{e['choose_ms_per_question']:.1f}",
                ]
                m = e.get("model")
                if m:
                    cells.append(str(m["n"]))
                    if answerable:
                        cells += [
                            f"{m['accuracy']:.3f}",
                            "–" if name == REFERENCE or "p_vs_all" not in m else f"{m['p_vs_all']:.3g}",
                        ]
                    else:
                        cells.append(f"{m['made_up']:.3f}")
                    cells += [
                        f"{m['said_not_found']:.3f}",
                        f"{m['prompt_tokens_per_question']:.0f}",
                        f"{m['seconds_per_answer']:.1f}",
                    ]
                else:
                    cells += ["–"] * (len(head) - len(cells))
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    curves = run.selective()
    if curves:
        lines += ["### selective answering (every question of the N, answerable or not)", ""]
        lines += [
            "| N | row | coverage | accuracy answered | area | coverage (model) | accuracy answered (model) "
            "| area (model) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for size, by_row in curves.items():
            for name, entry in by_row.items():
                cells = [size, labels.get(name, name)]
                for key in ("in_context", "model"):
                    c = entry.get(key)
                    if c and c.get("questions"):
                        accuracy = c["accuracy_answered"]
                        cells += [
                            f"{c['coverage']:.3f}",
                            "–" if accuracy is None else f"{accuracy:.3f}",
                            f"{c['area']:.3f}",
                        ]
                    else:
                        cells += ["–"] * 3
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    choice = run.cosine_threshold
    if choice.get("threshold") is not None:
        how = choice["rule"]
        if "held" in choice:
            how = (
                f"chosen at N = {choice['at_n']} on {', '.join(choice['chosen_on'])} by the shipped cut's rule; "
                + ("it held" if choice["held"] else "no candidate held, so the lowest")
                + f" (holding: {', '.join(f'{t:g}' for t in choice['holding']) or 'none'})"
            )
        lines.append(f"- cosine threshold t = {choice['threshold']:g}: {how}")
    for name, note in run.skipped_rows.items():
        lines.append(f"- {name}: {note}")
    chosen = run.default_choice()
    if chosen:
        asked = ", ".join(f"{name} {n}" for name, n in chosen["answerable_questions"].items())
        lines.append(
            f"- the filter's default by the rule (N = {chosen['at_n']}, answered on {asked}): {chosen['row']}"
            + (
                f" (holding: {', '.join(chosen['holding'])})"
                if chosen["held"]
                else " (no candidate qualified: the shipped default stays)"
            )
        )
    return "\n".join(lines) + "\n"


def outcome_json(o: Outcome) -> dict[str, Any]:
    """One outcome; ``kept`` (candidate positions) is left out for all N, which keeps every one."""
    out: dict[str, Any] = {"set": o.dataset, "kind": o.kind, "id": o.item_id, "n": o.size, "row": o.row}
    if o.row != REFERENCE:
        out["kept"] = list(o.kept)
    out.update(chars=o.chars, own=o.own_pool, s=o.seconds, conf=o.confidence)
    if o.answer_in_context is not None:
        out.update(aic=o.answer_in_context, aic_substring=o.answer_in_context_substring)
    if o.found is not None:
        out.update(found=o.found, tokens=o.prompt_tokens, answer_s=o.answer_seconds, answer=o.answer)
        if o.correct is not None:
            out["correct"] = o.correct
    if o.judge_prompt_tokens:
        out["judge_tokens"] = o.judge_prompt_tokens
    return out


def result_text(payload: Mapping[str, Any]) -> str:
    """The result file: indented, with each per-question outcome on one line."""
    head = {k: v for k, v in payload.items() if k != "questions"}
    text = json.dumps(head, indent=1)
    lines = ",\n".join("  " + json.dumps(q, separators=(",", ":")) for q in payload.get("questions", ()))
    return text[:-2] + ',\n "questions": [\n' + lines + "\n ]\n}\n"


def machine() -> dict[str, Any]:
    """The machine a result was measured on (the benches record the same)."""
    cpu = "unknown"
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def run_context(command: Sequence[str]) -> dict[str, Any]:
    """What a result file records of its run: the command, the machine, its
    load, the date and the checkout's commit."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {
        "command": " ".join(command),
        "machine": machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "git_dirty": dirty,
    }
