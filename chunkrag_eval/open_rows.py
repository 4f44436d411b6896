"""The rows of the open-corpus table and the pure rules that pick each
row's chunks from one question's N candidates, tested with literal numbers.

A row is data: a name, what it says in the table, how it chooses (``kind``)
and, for the filter, the ``ext.chunkrag`` options it overrides, so a new
filter option is one more line in :data:`ROWS`. A row whose options the
filter does not know (yet) is skipped with a note, not an error.

- ``all``: every candidate (the reference every row is tested against);
- ``top``: the best ``k`` by hybrid score (the retrieval order);
- ``same_chars``: the best by hybrid score, question by question, until they
  hold at least the characters row ``of`` kept there (the last one crosses
  it, so top-k never gets less text than the row it is compared with);
- ``cosine``: LangChain's ``EmbeddingsFilter`` with ``k=None``: every
  candidate whose query-chunk cosine is above ``t``, in retrieval order
  (its ``similarity > similarity_threshold``), ``t`` chosen by the shipped
  cut's rule (:func:`choose_cosine_threshold`);
- ``filter``: :func:`chunkrag_filter.pipeline.run_filter` with ``options``
  behind the gate the row declares (``gate``: one of the filter's gates, or
  :data:`DEFAULT_GATE`, whatever the filter ships); ``judge`` marks a row
  that calls the chat model to choose (the LLM judge), run on a subset only.

Every filter row declares its gate because the gate decides what a row
measures: behind a gate, a row's options act only on the questions the gate
passes. The rows that measure one option of the filter (the cross-encoder
judge, the LLM judge, a cut) run with the gate off, so the option is measured
alone and the row means what it meant before the gate existed; the gate rows
name theirs; ``filter`` is the shipped defaults, gate included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chunkrag_eval.answer_table import CutChoice, choose_cut, cut_holds, cut_row, discordant, mcnemar_exact
from chunkrag_filter.processors.gate import GATES

KINDS = ("all", "top", "same_chars", "cosine", "filter")
# The reference row: every candidate.
REFERENCE = "all"
# The N candidates retrieved from the whole index, each a table of its own.
SIZES = (10, 20, 40)
# The cosine thresholds the rule chooses among (written before the run,
# docs/evaluation.md "The open corpus"): MiniLM's query-sentence cosines
# fall between about 0 and 0.8, a relevant sentence mostly above 0.3.
COSINE_THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
# The N the threshold is chosen at (the regime the filter's default is chosen in).
THRESHOLD_CHOSEN_AT = 20
# Candidates the LLM judge sees in its row (the CLI's --judge-top default).
JUDGE_TOP = 9
# A filter row's gate: one of the filter's, or whichever the filter ships
# (the row then follows the default when it changes).
DEFAULT_GATE = "default"
ROW_GATES = (DEFAULT_GATE, *GATES)


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    label: str
    kind: str
    k: int | None = None  # top: how many
    of: str | None = None  # same_chars: whose characters
    options: Mapping[str, Any] = field(default_factory=dict)  # filter: ext.chunkrag overrides but the gate
    judge: bool = False  # calls the model to choose: a subset only
    gate: str | None = None  # filter: its gate, one of ROW_GATES (required)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown row kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.kind == "top" and not self.k:
            raise ValueError(f"row {self.name}: a top row needs k")
        if self.kind == "same_chars" and not self.of:
            raise ValueError(f"row {self.name}: a same_chars row needs the row whose characters it matches (of)")
        if self.kind == "filter" and self.gate not in ROW_GATES:
            raise ValueError(f"row {self.name}: a filter row declares its gate, one of {', '.join(ROW_GATES)}")
        if self.kind != "filter" and self.gate is not None:
            raise ValueError(f"row {self.name}: only a filter row has a gate")
        if "gate" in self.options:
            # One place says a row's gate, so no row can say two.
            raise ValueError(f"row {self.name}: the gate is declared by gate=, not in the options")

    @property
    def overrides(self) -> dict[str, Any]:
        """The ``ext.chunkrag`` options the row runs with: its options and its
        gate, unless it takes the filter's default gate."""
        if self.kind != "filter" or self.gate == DEFAULT_GATE:
            return dict(self.options)
        return {**self.options, "gate": self.gate}


ROWS: tuple[Row, ...] = (
    Row("all", "all N", "all"),
    Row("top5", "top-5 by hybrid score", "top", k=5),
    Row("topk_filter_chars", "top-k by hybrid score at the shipped filter's characters", "same_chars", of="filter"),
    Row("cosine", "cosine above t (LangChain EmbeddingsFilter)", "cosine"),
    Row("filter", "the filter as shipped (its defaults, gate included)", "filter", gate=DEFAULT_GATE),
    Row("filter_gate_off", "the filter at its defaults, gate off", "filter", gate="off"),
    Row(
        "filter_crossencoder",
        "the filter with the cross-encoder judge, gate off",
        "filter",
        options={"relevance": "crossencoder"},
        gate="off",
    ),
    Row(
        "llm_judge",
        f"the filter with the LLM judge (judge_top {JUDGE_TOP}), gate off",
        "filter",
        options={"judge_top": JUDGE_TOP},
        judge=True,
        gate="off",
    ),
    Row("gate", "the filter behind the retrieval gate", "filter", gate="retrieval"),
    Row("gate_crossencoder", "the filter behind the cross-encoder gate", "filter", gate="crossencoder"),
)
ROW_NAMES = tuple(r.name for r in ROWS)
# Rows named by a parameter: the filter's cut over the retrieval signals, the
# same with the cross-encoder (gate off, as the option rows above), a gate's
# cut, and top-k at another row's characters.
PARAMETRIC = (
    "cut=<c>",
    "notfound_cut=<c>",
    "crossencoder_cut=<c>",
    "gate=<c>",
    "gate_crossencoder=<c>",
    "relative=<s>",
    "crossencoder_relative=<s>",
    "topk_chars_of=<row>",
)

# ---------------------------------------------------------------- the default
# The filter's default is chosen on both halves at N = 20 with the local
# model answering (rule written 2026-12-04, before its run; docs/
# evaluation.md, "How the filter's default is chosen"): among these, the
# candidates whose accuracy on every answerable set is within two points of
# all N and not significantly below it (exact McNemar); of those, the one
# that says "not found" without a model call (keeps nothing) on the most
# unanswerable questions of every kind together; ties to fewer prompt
# tokens on the answerable sets. None doing so on more than a tenth of the
# unanswerable questions: the shipped default stays. The gates' cuts are
# probabilities of "some candidate is relevant"; the file's own cut is the
# row without one.
DEFAULT_CANDIDATES = (
    "filter",
    "gate",
    "gate=0.05",
    "gate=0.1",
    "gate=0.2",
    "gate=0.3",
    "gate=0.5",
    "gate_crossencoder",
    "gate_crossencoder=0.05",
    "gate_crossencoder=0.1",
    "gate_crossencoder=0.2",
    "gate_crossencoder=0.3",
    "gate_crossencoder=0.5",
    "notfound_cut=0.05",
    "notfound_cut=0.1",
    "notfound_cut=0.2",
)
# What stays when no candidate qualifies: the shipped default.
DEFAULT_FALLBACK = "filter"
# Accuracy a candidate may lose against all N on an answerable set.
MAX_DROP = 0.02
# Share of the unanswerable questions the chosen one must turn away without a
# model call; below it the default stays.
MIN_NOT_FOUND_SHARE = 0.1


def _cut_value(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"row {name}: the cut must be a number, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"row {name}: the cut is a probability between 0 and 1, not {value:g}")
    return value


def row_for(name: str) -> Row:
    """The declared row called ``name``, or the parametric one it names."""
    for row in ROWS:
        if row.name == name:
            return row
    kind, sep, value = name.partition("=")
    if sep and kind == "cut":
        c = _cut_value(name, value)
        return Row(name, f"the filter cut at {c:g}, gate off", "filter", options={"fixed_threshold": c}, gate="off")
    if sep and kind == "notfound_cut":
        c = _cut_value(name, value)
        return Row(
            name,
            f"the filter cut at {c:g}, 'not found' when nothing passes, gate off",
            "filter",
            options={"fixed_threshold": c, "fallback": "not_found"},
            gate="off",
        )
    if sep and kind in ("gate", "gate_crossencoder"):
        c = _cut_value(name, value)
        gate = "retrieval" if kind == "gate" else "crossencoder"
        return Row(name, f"the filter behind the {gate} gate at {c:g}", "filter", options={"gate_cut": c}, gate=gate)
    if sep and kind == "crossencoder_cut":
        c = _cut_value(name, value)
        return Row(
            name,
            f"the filter with the cross-encoder, cut at {c:g}, gate off",
            "filter",
            options={"relevance": "crossencoder", "fixed_threshold": c},
            gate="off",
        )
    if sep and kind in ("relative", "crossencoder_relative"):
        # Per chunk: what comes within a share of the question's best chunk.
        c = _cut_value(name, value)
        judged = {"relevance": "crossencoder"} if kind == "crossencoder_relative" else {}
        return Row(
            name,
            f"the filter{' with the cross-encoder' if judged else ''} keeping chunks at {c:g} of the best, gate off",
            "filter",
            options={**judged, "threshold": "relative", "fixed_threshold": c},
            gate="off",
        )
    if sep and kind == "topk_chars_of" and value:
        of = row_for(value)
        if of.kind == "same_chars":
            raise ValueError(f"row {name}: top-k matches a row that chooses by itself, not {value}")
        return Row(name, f"top-k by hybrid score at the characters of {of.name}", "same_chars", of=of.name)
    raise ValueError(
        f"unknown open-corpus row {name!r}; choose among {', '.join(ROW_NAMES)} or {', '.join(PARAMETRIC)}"
    )


def rows_named(names: Sequence[str] | None) -> tuple[Row, ...]:
    """The rows of ``names`` (all declared ones for None): the reference
    first, then in the order given, each row a same_chars row matches
    before it."""
    if names is None:
        return ROWS
    out: dict[str, Row] = {REFERENCE: row_for(REFERENCE)}

    def add(name: str) -> None:
        row = row_for(name)
        if row.of and row.of not in out:
            add(row.of)
        out.setdefault(row.name, row)

    for name in names:
        add(name)
    return tuple(out.values())


@dataclass(frozen=True, slots=True)
class DefaultChoice:
    row: str
    held: bool  # False: no candidate qualified; the shipped default stays
    holding: tuple[str, ...]  # within MAX_DROP of all N on every answerable set
    tokens: Mapping[str, float]  # each candidate's prompt tokens per answer, averaged over the answerable sets
    not_found: Mapping[str, float]  # each candidate's share of unanswerable questions kept empty


def choose_default(
    answerable: Mapping[str, Mapping[str, tuple[Sequence[bool], float]]],
    not_found: Mapping[str, tuple[int, int]],
    candidates: Sequence[str] = DEFAULT_CANDIDATES,
    reference: str = REFERENCE,
) -> DefaultChoice:
    """The filter's default from both halves. ``answerable[set][row]``: a
    row's per-question right/wrong (paired with the reference's on the same
    questions) and its prompt tokens per answer; ``not_found[row]``: (the
    unanswerable questions it kept nothing for, those asked). A candidate
    holds when, on every answerable set, its accuracy is within
    :data:`MAX_DROP` of all N and not significantly below it
    (:func:`answer_table.cut_holds`); among those, the most unanswerable
    questions turned away without a model call, then the fewest tokens, then
    the earlier candidate. The winner must turn away more than
    :data:`MIN_NOT_FOUND_SHARE` of them, else :data:`DEFAULT_FALLBACK` stays."""
    present = [c for c in candidates if c in not_found and all(c in rows for rows in answerable.values())]
    tokens = (
        {c: sum(rows[c][1] for rows in answerable.values()) / len(answerable) for c in present} if answerable else {}
    )
    shares = {c: not_found[c][0] / not_found[c][1] if not_found[c][1] else 0.0 for c in present}
    holding = tuple(
        c
        for c in present
        if all(cut_holds(rows[reference][0], rows[c][0], max_drop=MAX_DROP) for rows in answerable.values())
    )
    if holding:
        best = min(holding, key=lambda c: (-not_found[c][0], tokens[c], present.index(c)))
        if shares[best] > MIN_NOT_FOUND_SHARE:
            return DefaultChoice(best, True, holding, tokens, shares)
    return DefaultChoice(DEFAULT_FALLBACK, False, holding, tokens, shares)


# ---------------------------------------------------------------- choosing


def select_top(count: int, k: int) -> list[int]:
    """The first ``k`` of ``count`` candidates in retrieval (hybrid score) order."""
    return list(range(min(k, count)))


def select_same_chars(chars: Sequence[int], scores: Sequence[float], budget_chars: int) -> list[int]:
    """The best candidates by hybrid score until they hold at least
    ``budget_chars`` (the last one taken crosses it), in retrieval order:
    top-k is given at least the characters of the row it is compared with."""
    taken, used = [], 0
    for i in sorted(range(len(chars)), key=lambda i: -scores[i]):
        if used >= budget_chars:
            break
        taken.append(i)
        used += chars[i]
    return sorted(taken)


def select_cosine(cosine: Sequence[float], threshold: float) -> list[int]:
    """EmbeddingsFilter's rule: the candidates whose cosine is above ``threshold``, in order."""
    return [i for i, value in enumerate(cosine) if value > threshold]


def kept_flags(kept: Sequence[Sequence[int]], per_candidate: Sequence[Sequence[bool]]) -> list[bool]:
    """Per question: does a kept candidate have the property (a gold answer, its own pool)."""
    return [any(flags[i] for i in k) for k, flags in zip(kept, per_candidate)]


def choose_cosine_threshold(
    sets: Mapping[str, tuple[Sequence[bool], Mapping[float, Sequence[bool]]]],
    thresholds: Sequence[float] = COSINE_THRESHOLDS,
) -> CutChoice:
    """The shipped cut's rule (bench/REPORT.md, "The shipped cut chosen by
    answer accuracy") for a cosine threshold: ``sets[name]`` holds all N's
    per-question outcomes and each threshold's; a threshold holds on a set
    when it is within one point of all N and not significantly below it
    (exact McNemar, p >= 0.05); the highest threshold that holds on every
    set is chosen, and when none holds, the lowest ("drop only what is
    clearly irrelevant"), ``held`` False."""
    rows = {
        name: {REFERENCE: list(reference), **{cut_row(t): list(flags[t]) for t in thresholds}}
        for name, (reference, flags) in sets.items()
    }
    return choose_cut(rows, thresholds, REFERENCE)


# ---------------------------------------------------------------- measures


def paired_with_reference(flags: Sequence[bool], reference: Sequence[bool]) -> dict[str, Any]:
    """[right only with the row, right only with all N] and the exact McNemar p."""
    only_row, only_all = discordant(flags, reference)
    # Three significant digits, so a tiny p is not printed as 0.
    return {"discordant": [only_row, only_all], "p_vs_all": float(f"{mcnemar_exact(only_row, only_all):.3g}")}


def rate(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None
