"""The ChunkRAG filter over retrieved chunks, as one library call.

    redundancy -> relevance judging -> threshold -> fallback -> rerank -> order

Judging is the expensive part; it is injected as ``judge_many``
(``chunkrag_filter.judging``) so the same code runs in-process (threads)
or fanned out over Celery workers. The answer is written from the result by
the caller (``search_extension.ask``), not here.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatModel
from chunkrag_core.providers.local_relevance import BATCH_SIZE as RELEVANCE_BATCH
from chunkrag_filter import budget as budgets
from chunkrag_filter.budget import GATE, JUDGE, RELEVANCE, RERANK, Budget, RanOut, call_within, scored_within
from chunkrag_filter.judging import (
    BY_RETRIEVAL,
    LATE,
    JudgeMany,
    judge_candidates,
    judge_in_threads,
    scoring_batches,
    unscored,
)
from chunkrag_filter.processors.calibration import (
    CONFIGURED,
    DEFAULT_CUT,
    Calibrated,
    Configured,
    LogisticModel,
    chunk_features,
    load_calibration,
    relevance_logit,
)
from chunkrag_filter.processors.features import context_features
from chunkrag_filter.processors.gate import GATE_TOP, GATES, GateOutcome, gate_features
from chunkrag_filter.processors.ordering import lost_in_the_middle
from chunkrag_filter.processors.redundancy import Redundant, drop_redundant
from chunkrag_filter.processors.relevance import Judgement, ScoringOptions
from chunkrag_filter.processors.thresholds import (
    DEFAULT_VARIANCE_EPSILON,
    THRESHOLD_METHODS,
    CutInputs,
    Threshold,
    cut,
    passing,
)
from chunkrag_filter.relevance_places import RelevanceModel, Scored, ranked, score_relevance

THRESHOLDS = tuple(THRESHOLD_METHODS)
FALLBACKS = ("top_k", "not_found")
# "local": the project's relevance model (a MiniLM cross-encoder) orders the
# kept chunks; "cohere": Cohere's rerank API.
RERANKERS = ("score", "local", "cohere", "off")
# What scores a candidate when the LLM judge does not: the retrieval signals
# alone, or the project's relevance model beside them (calibrated together).
RELEVANCE_SOURCES = ("retrieval", "crossencoder")


# Candidates judged when a caller asks for the judge (a scoring method or
# option) without saying how many: one listwise batch, the best nine.
JUDGE_TOP_WHEN_ASKED = 9


@dataclass(frozen=True, slots=True)
class FilterOptions:
    redundancy_threshold: float | None = None
    # The default: no judge call; every candidate scored by the calibration
    # file's retrieval model (CHUNKRAG_CALIBRATION_FILE, else the shipped
    # chunkrag_filter/calibration/default.json, fitted across seven datasets
    # and chosen by leave-one-dataset-out: bench/REPORT.md, "A filter fitted
    # across datasets") and cut at the file's cut, chosen by the accuracy of
    # the answers written from what is kept (bench/REPORT.md, "The shipped
    # cut chosen by answer accuracy"): no cut matched all retrieved chunks on
    # every dev set, so the file ships the most permissive, dropping only
    # what is clearly irrelevant. No near-duplicate drop and no reordering:
    # with them the local model answered 1-2 points below all retrieved
    # chunks; with only the cut and the retrieval order it answered as all
    # retrieved on both dev sets (bench/REPORT.md, "Two order-keeping
    # variants"). The paper's filter (per-chunk multistage scoring,
    # Algorithm 1, redundancy, rerank) is `scoring=ScoringOptions(method=
    # "multistage"), threshold="dynamic", calibration=None, judge_top=None,
    # redundancy_threshold=0.9, rerank="score"`.
    scoring: ScoringOptions = ScoringOptions(method="listwise")
    threshold: str = "fixed"
    # The threshold for "fixed" (a calibrated probability); None: the
    # calibration file's cut (DEFAULT_CUT without calibration). For
    # "relative", the share of the best score (None: DEFAULT_CUT).
    fixed_threshold: float | None = None
    variance_epsilon: float = DEFAULT_VARIANCE_EPSILON
    # When no chunk passes: keep the top k unfiltered, or answer that nothing
    # relevant was found.
    fallback: str = "top_k"
    fallback_k: int = 3
    # Below this combined score a chunk never passes, whatever the threshold:
    # the judge gave it essentially nothing. When every chunk is below it
    # (a listwise judge answering "none", say) the outcome is "nothing
    # relevant" instead of Algorithm 1 keeping a pool of equal zeros.
    min_score: float = 0.01
    # Share of the final score taken from the retrieval score (see
    # with_retrieval_prior); 0 = the LLM judgement alone.
    prior_weight: float = 0.0
    rerank: str = "off"
    lost_in_the_middle: bool = False
    answer: bool = True
    # A cascade: only the best ``judge_top`` candidates in retrieval order go
    # to the model (None: all of them; 0: none, the cheap signals decide).
    judge_top: int | None = 0
    # When set, each candidate's combined score is this model's probability
    # of relevance from the judge's share and the retrieval signals
    # (processors/calibration.py); unjudged candidates are scored too.
    # CONFIGURED (a calibration file, read on first use) follows the judge:
    # the file's model for judging on or off (a LogisticModel is kept as is).
    calibration: LogisticModel | Configured | None = CONFIGURED
    # "crossencoder": every candidate is also read by the project's relevance
    # model (stage score "relevance"), and the calibration file's
    # "relevance" model turns it and the retrieval signals into the score.
    relevance: str = "retrieval"
    # Before any chunk is scored, is anything relevant at all (processors/
    # gate.py)? "retrieval": the calibration file's gate model over the
    # retrieval signals and the query's words and names; "crossencoder": its
    # gate_relevance model, with the relevance model reading the best
    # ``gate_top`` candidates; "off": no such decision. Below the cut
    # (``gate_cut``, else the file's) nothing is kept, whatever ``fallback``
    # says, and no model is called. The default is the one the rule that
    # loses no answers chose (docs/evaluation.md, "How the default gate is
    # chosen"; results/gate_choice.json): the cross-encoder gate at the
    # calibration file's cut (0.02), which turned away at most 0.8% of any
    # answerable set and none of the sample questions.
    gate: str = "crossencoder"
    gate_cut: float | None = None
    gate_top: int = GATE_TOP

    def __post_init__(self) -> None:
        if self.judge_top is not None and self.judge_top < 0:
            raise ValueError("judge_top must be 0 or more (or None for every candidate)")
        for name, value, allowed in (
            ("threshold", self.threshold, THRESHOLDS),
            ("fallback", self.fallback, FALLBACKS),
            ("rerank", self.rerank, RERANKERS),
            ("relevance", self.relevance, RELEVANCE_SOURCES),
            ("gate", self.gate, GATES),
        ):
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
        if not 0.0 <= self.prior_weight <= 1.0:
            raise ValueError("prior_weight must be between 0 and 1")
        if self.gate_cut is not None and not 0.0 <= self.gate_cut <= 1.0:
            raise ValueError("gate_cut must be a probability between 0 and 1")
        if self.gate_top < 1:
            raise ValueError("gate_top must be at least 1")


@dataclass(frozen=True, slots=True)
class Decision:
    chunk: Chunk
    kept: bool
    reason: str  # "above_threshold", "below_threshold", "redundant", "unscored", "fallback", "nothing_relevant"


@dataclass(frozen=True, slots=True)
class FilterResult:
    kept: tuple[Chunk, ...]  # final order, each with its stage scores
    decisions: tuple[Decision, ...]
    threshold: Threshold | None
    nothing_relevant: bool
    model_calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    # Where the candidates were judged ("workers", "gateway"; "retrieval":
    # by the retrieval signals alone; None: the injected judge did not say or
    # nothing was judged), and why not where meant to, when it fell back.
    judged_by: str | None = None
    judged_by_reason: str | None = None
    # Where the relevance model scored the candidates (relevance:
    # crossencoder) or the kept chunks (rerank: local): "workers", "gateway"
    # (None: it did not run, or did not say), and why not where meant to.
    relevance_by: str | None = None
    relevance_by_reason: str | None = None
    # The gate's reading of the candidates (None when the gate is off or
    # there were none); when it did not pass, nothing is kept.
    gate: GateOutcome | None = None
    # The stages the request's budget (budget_s) ran out in, first the one
    # it ran out in, and the budget's seconds; none when it lasted.
    ran_out: tuple[RanOut, ...] = ()
    budget_s: float | None = None

    @property
    def nothing_relevant_reason(self) -> str | None:
        """Why nothing relevant was found (None when something was): the gate's
        reading, or the best score against the threshold."""
        if not self.nothing_relevant:
            return None
        if self.gate is not None and not self.gate.passed:
            return self.gate.reason()
        scores = [d.chunk.stage_scores.get("combined") for d in self.decisions]
        best = max((s for s in scores if s is not None), default=None)
        if best is None:
            return "no candidate could be scored" if self.decisions else "no candidates"
        cut = f" {self.threshold.value:g}" if self.threshold is not None else ""
        return f"no candidate passed the threshold{cut} (best score {best:.3f})"

    def nothing_relevant_fields(self) -> dict[str, object]:
        """For a response: ``nothing_relevant``, and when true its reason; the
        gate's reading (probability, cut, features) when the gate ran."""
        out: dict[str, object] = {"nothing_relevant": self.nothing_relevant}
        if self.nothing_relevant:
            out["nothing_relevant_reason"] = self.nothing_relevant_reason
        if self.gate is not None:
            out["gate"] = self.gate.to_json()
        return out

    def budget_fields(self) -> dict[str, str | None]:
        """``budget_ran_out`` (the stage the budget ran out in) and its
        reason for a response; none when the budget lasted."""
        if not self.ran_out:
            return {}
        return {
            "budget_ran_out": self.ran_out[0].stage,
            "budget_ran_out_reason": budgets.ran_out_reason(self.budget_s, self.ran_out),
        }

    def relevance_fields(self) -> dict[str, str | None]:
        """``relevance_by`` and its reason for a response; none when the
        relevance model did not run (or did not say where)."""
        if self.relevance_by is None:
            return {}
        return {"relevance_by": self.relevance_by, "relevance_by_reason": self.relevance_by_reason}


def with_retrieval_prior(
    judgements: Sequence[Judgement], retrieval_scores: Sequence[float | None], weight: float
) -> list[Judgement]:
    """Blend each combined LLM score with the chunk's retrieval score,
    min-max normalised over the candidates: ``(1 - weight) * llm + weight *
    prior``. The hybrid search already ranks well (it is the cosine baseline
    the benchmarks compare against); a small model's judgement is noisy, and
    the blend keeps what both agree on. Weight 0 is the paper's filter."""
    if weight <= 0:
        return list(judgements)
    blended = []
    for judgement, prior in zip(judgements, retrieval_priors(retrieval_scores)):
        if judgement.combined is None:
            blended.append(judgement)
        else:
            blended.append(
                dataclasses.replace(judgement, combined=(1 - weight) * judgement.combined + weight * prior, prior=prior)
            )
    return blended


def retrieval_priors(scores: Sequence[float | None]) -> list[float]:
    """Each retrieval score min-max normalised over the candidates; 0.5 for
    a chunk without one, or for all when they are equal (nothing tells them apart)."""
    known = [s for s in scores if s is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    return [0.5 if score is None or high == low else (score - low) / (high - low) for score in scores]


def resolve_calibration(options: FilterOptions) -> tuple[LogisticModel | None, float]:
    """The model the options score with and the cut they keep at: a
    calibration file's model for judging on or off and its cut, unless the
    options name a model or a threshold of their own."""
    calibration, cut_value = options.calibration, DEFAULT_CUT
    if isinstance(calibration, Configured):
        path = calibration.path if calibration.path is not None else configured_calibration_file()
        chosen = load_calibration(path or None).for_judging(options.judge_top != 0, options.relevance == "crossencoder")
        calibration = chosen.model
        if options.threshold == "fixed":
            cut_value = chosen.cut
    return calibration, options.fixed_threshold if options.fixed_threshold is not None else cut_value


def configured_calibration_file() -> str:
    """CHUNKRAG_CALIBRATION_FILE (declared in chunkrag_core.settings), read
    when a filter first needs it: "" for the shipped file."""
    from chunkrag_core.settings import calibration_file_from_env

    return calibration_file_from_env()


def candidate_features(
    query: str,
    candidates: Sequence[Chunk],
    judge_scores: Sequence[float | None],
    batches: Sequence[Sequence[int]],
    context: bool = True,
) -> list[dict[str, float]]:
    """Every feature a calibration may read, per candidate: the chunk's own
    signals (calibration.chunk_features) and, with ``context``, its context
    (features.py; skipped for a model that reads none: they cost text scans)."""
    rows = chunk_features(
        [c.stage_scores for c in candidates], list(judge_scores), [len(c.text) for c in candidates], batches
    )
    if not context:
        return rows
    context_rows = context_features(
        query,
        [c.text for c in candidates],
        [c.header for c in candidates],
        [c.doc_id for c in candidates],
        [c.position for c in candidates],
        [c.lead for c in candidates],
        [c.stage_scores for c in candidates],
    )
    return [{**row, **more} for row, more in zip(rows, context_rows)]


def calibrated(
    query: str,
    candidates: Sequence[Chunk],
    judgements: Sequence[Judgement],
    model: LogisticModel,
    scoring: ScoringOptions,
    judged: int,
) -> list[Judgement]:
    """Each candidate's combined score replaced by the calibrated probability
    of relevance. A chunk whose judging failed (unreadable answer, budget)
    keeps no score when the model needs the judge, so it is reported
    "unscored" rather than silently judged by the cheap signals alone."""
    batches = (
        scoring_batches(judged, scoring.listwise_batch)
        if scoring.method == "listwise"
        else [[i] for i in range(judged)]
    )
    rows = candidate_features(query, candidates, [j.base for j in judgements], batches, context=model.uses_context)
    out = []
    for i, (row, judgement) in enumerate(zip(rows, judgements)):
        if model.uses_judge and i < judged and judgement.base is None:
            out.append(judgement)
            continue
        probability = round(model.probability(row), 6)
        out.append(dataclasses.replace(judgement, calibrated=probability, combined=probability))
    return out


def run_filter(
    query: str,
    chunks: Sequence[Chunk],
    *,
    model: ChatModel,
    options: FilterOptions = FilterOptions(),
    judge_many: JudgeMany | None = None,
    reranker=None,
    relevance_model: RelevanceModel | None = None,
) -> FilterResult:
    """Redundancy, judging, threshold, fallback, rerank and order: the kept
    chunks in final order with every candidate's decision. No answer is
    written here (``options.answer`` is the caller's to honour).

    ``relevance_model`` scores the candidates with ``relevance:
    crossencoder`` (and orders the kept ones with ``rerank: local`` when no
    ``reranker`` is given); None: the shipped model, loaded on first use."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round((now - clock) * 1000, 1)
        clock = now

    redundant: list[Redundant] = []
    candidates = list(chunks)
    if options.redundancy_threshold is not None:
        candidates, redundant = drop_redundant(candidates, options.redundancy_threshold)
    lap("redundancy")

    if "crossencoder" in (options.relevance, options.gate) or (options.rerank == "local" and reranker is None):
        relevance_model = relevance_model or shipped_relevance_model()
    budget = budgets.current()
    ran_out: list[RanOut] = []
    relevance_runs: list[Scored] = []
    relevance_of: dict[str, float] = {}  # each candidate's relevance, for rerank: local to reuse
    if options.relevance == "crossencoder" and candidates:
        runs, scores = relevance_within(relevance_model, query, [c.text for c in candidates], budget)
        relevance_runs.extend(runs)
        relevance_of = {c.chunk_id: p for c, p in zip(candidates, scores)}
        if len(scores) < len(candidates):
            ran_out.append(RanOut(RELEVANCE, len(scores), len(candidates), "the rest are unscored"))
        scored_part = [c.with_score(relevance=round(p, 6)) for c, p in zip(candidates, scores)]
        candidates = scored_part + candidates[len(scores) :]
    lap("relevance")

    gate = None
    # The gate reads the candidates' raw cosine to the query; chunks that
    # were not retrieved (made by hand, none carrying one) are not gated.
    if options.gate != "off" and any("cosine" in c.stage_scores for c in candidates):
        gate = read_gate(query, candidates, options, relevance_model, relevance_runs, budget, ran_out)
        lap("gate")
        if not gate.passed:
            decisions = [Decision(r.chunk, False, "redundant") for r in redundant]
            decisions += [Decision(c, False, "nothing_relevant") for c in candidates]
            return FilterResult(
                kept=(),
                decisions=tuple(decisions),
                threshold=None,
                nothing_relevant=True,
                model_calls=0,
                cached_calls=0,
                prompt_tokens=0,
                completion_tokens=0,
                timings_ms=timings,
                gate=gate,
                ran_out=tuple(ran_out),
                budget_s=budget.seconds if budget is not None else None,
                **where_relevance_ran(relevance_runs),
            )

    judged = candidates if options.judge_top is None else candidates[: options.judge_top]
    judged_by = reason = None
    judgements: list[Judgement] = []
    if judged and budget is not None and budget.spent:
        # Nothing left for a model call: the judged candidates are unscored, as late ones are.
        judgements = [unscored(f"{LATE} budget (it ran out before judging)")] * len(judged)
        ran_out.append(RanOut(JUDGE, 0, len(judged), "not judged, unscored"))
    elif judged:
        outcome = judge_candidates(judge_many or judge_in_threads(model), query, judged, options.scoring)
        judged_by, reason, judgements = outcome.by, outcome.reason, list(outcome.judgements)
        late = sum(1 for j in judgements if j.base is None and j.notes and j.notes[0].startswith(LATE))
        if late:
            ran_out.append(RanOut(JUDGE, len(judged) - late, len(judged), "the rest are unscored"))
    if judged_by == BY_RETRIEVAL:
        # Nobody could judge: every candidate is scored as if the judge were
        # off (the shipped calibration for no judge, else the retrieval score),
        # and the model that could not be reached is not asked for a threshold.
        threshold_method = "dynamic" if options.threshold == "llm" else options.threshold
        options, judged = dataclasses.replace(options, judge_top=0, threshold=threshold_method), []
        judgements = retrieval_judgements(candidates, judgements, options.calibration is not None)
    else:
        skipped = unscored(f"not judged: ranked below judge_top={options.judge_top}")
        judgements = judgements + [skipped] * (len(candidates) - len(judged))
    calibration, cut_value = resolve_calibration(options)
    if calibration is not None:
        judgements = calibrated(query, candidates, judgements, calibration, options.scoring, len(judged))
        if calibration.uses_relevance:
            # A candidate the relevance model did not read in time has no score the cut may read.
            late = unscored(f"{LATE} budget (relevance stage)")
            judgements = [j if "relevance" in c.stage_scores else late for c, j in zip(candidates, judgements)]
    judgements = with_retrieval_prior(judgements, [c.score for c in candidates], options.prior_weight)
    scored = [c.with_score(**j.stage_scores()) for c, j in zip(candidates, judgements)]
    lap("scoring")

    usable = [(c, j.combined) for c, j in zip(scored, judgements) if j.combined is not None]
    scores = [s for _, s in usable]
    chosen = cut(options.threshold, scores, CutInputs(cut_value, options.variance_epsilon, query, model))
    threshold = chosen.threshold
    passed_ids = {usable[i][0].chunk_id for i in passing(scores, threshold) if scores[i] >= options.min_score}
    lap("threshold")

    decisions = [Decision(r.chunk, False, "redundant") for r in redundant]
    kept = [c for c, _ in usable if c.chunk_id in passed_ids]
    nothing_relevant = not kept
    fallback_ids: set[str] = set()
    if nothing_relevant and options.fallback == "top_k":
        kept = list(scored[: options.fallback_k])  # retrieval order: the best the search had
        fallback_ids = {c.chunk_id for c in kept}
    for chunk, judgement in zip(scored, judgements):
        if chunk.chunk_id in fallback_ids:
            decisions.append(Decision(chunk, True, "fallback"))
        elif judgement.combined is None:
            decisions.append(Decision(chunk, False, "unscored"))
        else:
            decisions.append(
                Decision(
                    chunk,
                    chunk.chunk_id in passed_ids,
                    "above_threshold" if chunk.chunk_id in passed_ids else "below_threshold",
                )
            )

    order, in_time = None, True
    if options.rerank == "local" and reranker is None and kept:
        order, runs = rerank_with_relevance(relevance_model, query, kept, relevance_of, budget)
        relevance_runs.extend(runs)
        in_time = order is not None
    elif options.rerank in ("cohere", "local") and reranker is not None and kept:
        # One call that cannot stop between batches: waited for while the budget lasts.
        in_time, order = call_within(budget, lambda: reranker.rerank(query, [c.text for c in kept]))
    if not in_time:
        order = None
        ran_out.append(RanOut(RERANK, 0, len(kept), "the kept chunks stay in retrieval order"))
    if order is not None:
        kept = [dataclasses.replace(kept[i], stage_scores={**kept[i].stage_scores, "rerank": s}) for i, s in order]
    elif options.rerank == "score":
        kept.sort(key=lambda c: -c.stage_scores.get("combined", 0.0))
    if options.lost_in_the_middle:
        kept = lost_in_the_middle(kept)
    lap("rerank")

    return FilterResult(
        kept=tuple(kept),
        decisions=tuple(decisions),
        threshold=threshold,
        nothing_relevant=nothing_relevant,
        model_calls=sum(j.calls for j in judgements) + chosen.calls,
        cached_calls=sum(j.cached_calls for j in judgements),
        prompt_tokens=sum(j.prompt_tokens for j in judgements) + chosen.prompt_tokens,
        completion_tokens=sum(j.completion_tokens for j in judgements),
        timings_ms=timings,
        judged_by=judged_by,
        judged_by_reason=reason,
        gate=gate,
        ran_out=tuple(ran_out),
        budget_s=budget.seconds if budget is not None else None,
        **where_relevance_ran(relevance_runs),
    )


def read_gate(
    query: str,
    candidates: Sequence[Chunk],
    options: FilterOptions,
    relevance_model: RelevanceModel | None,
    relevance_runs: list[Scored],
    budget: Budget | None = None,
    ran_out: list[RanOut] | None = None,
) -> GateOutcome:
    """The gate's reading of the candidates. With ``gate: crossencoder`` the
    relevance model's scores of the best ``gate_top`` candidates are reused
    when it scored every candidate already, else it reads those few (the run
    is appended to ``relevance_runs``, so the response says where it ran).
    When ``budget`` runs out before it has read them all, the retrieval gate
    decides instead (noted in ``ran_out``): a reading of fewer candidates
    than its model was fitted on would not mean what its cut assumes."""
    logits: list[float] = []
    if options.gate == "crossencoder":
        top = candidates[: options.gate_top]
        if all("relevance" in c.stage_scores for c in top):
            probabilities = [c.stage_scores["relevance"] for c in top]
        else:
            runs, probabilities = relevance_within(relevance_model, query, [c.text for c in top], budget)
            relevance_runs.extend(runs)
        logits = [relevance_logit(p) for p in probabilities]
        if len(probabilities) < len(top):
            (ran_out if ran_out is not None else []).append(
                RanOut(GATE, len(probabilities), len(top), "the retrieval gate decided")
            )
            options, logits = dataclasses.replace(options, gate="retrieval"), []
    chosen = gate_model(options)
    features = gate_features(query, [c.text for c in candidates], [c.stage_scores for c in candidates], logits)
    cut = options.gate_cut if options.gate_cut is not None else chosen.cut
    return GateOutcome(options.gate, round(chosen.model.probability(features), 6), cut, features)


def gate_model(options: FilterOptions) -> Calibrated:
    """The gate's model and cut: from the calibration file the options name
    (the configured one, else the shipped one), whether or not the chunks
    themselves are scored by a calibration."""
    calibration = options.calibration
    path = calibration.path if isinstance(calibration, Configured) else None
    return load_calibration(path if path is not None else (configured_calibration_file() or None)).for_gate(
        options.gate
    )


def rerank_with_relevance(
    model: RelevanceModel,
    query: str,
    kept: Sequence[Chunk],
    scored: Mapping[str, float],
    budget: Budget | None = None,
) -> tuple[list[tuple[int, float]] | None, list[Scored]]:
    """``kept`` best first by the relevance model (``rerank: local``), and
    the model's runs (none when none was needed). A chunk the relevance stage
    already scored (``scored``, by chunk id) keeps that score: a text's
    score does not depend on the texts scored beside it
    (``local_relevance``), so the model reads only the others instead of
    every kept chunk a second time. None for the order when ``budget`` ran
    out before every kept chunk had a score: an order of some of them would
    put the unread ones anywhere."""
    missing = [i for i, chunk in enumerate(kept) if chunk.chunk_id not in scored]
    runs, scores = relevance_within(model, query, [kept[i].text for i in missing], budget) if missing else ([], [])
    if len(scores) < len(missing):
        return None, runs
    fresh = dict(zip(missing, scores))
    return ranked([fresh[i] if i in fresh else scored[c.chunk_id] for i, c in enumerate(kept)]), runs


def relevance_within(
    model: RelevanceModel, query: str, texts: Sequence[str], budget: Budget | None
) -> tuple[list[Scored], list[float]]:
    """The relevance model's runs over ``texts`` and the scores of the first
    ones, in order: without a budget every text in one run; with one, a
    batch of the model's at a time while it lasts (asked before each
    batch), so a stage stops within one batch of it and, the candidates
    being in retrieval order, the best retrieved are the ones read."""
    if budget is None:
        run = score_relevance(model, query, texts) if texts else Scored(())
        return ([run] if texts else []), list(run.scores)
    runs: list[Scored] = []

    def score(start: int, stop: int) -> None:
        runs.append(score_relevance(model, query, texts[start:stop]))

    scored_within(budget, len(texts), RELEVANCE_BATCH, score)
    return runs, [p for run in runs for p in run.scores]


def recounted(ran_out: Sequence[RanOut], decisions: Sequence[Decision]) -> tuple[RanOut, ...]:
    """Several runs' reports (the hits of a post-search, merged per stage)
    with the relevance stage's counted over every run's candidates: the
    runs it finished in scored theirs too, and only ``decisions`` know."""
    read = [d for d in decisions if d.reason != "redundant"]
    scored = sum(1 for d in read if "relevance" in d.chunk.stage_scores)
    return tuple(dataclasses.replace(r, decided=scored, of=len(read)) if r.stage == RELEVANCE else r for r in ran_out)


def undecided(result: FilterResult) -> RanOut | None:
    """The relevance stage's report when the budget ran out before it
    scored any candidate of ``result``: nothing the caller asked the model
    for was decided (the request is then an error, not an answer)."""
    stage = next((r for r in result.ran_out if r.stage == RELEVANCE), None)
    if stage is None or any("relevance" in d.chunk.stage_scores for d in result.decisions):
        return None
    return stage


def where_relevance_ran(runs: Sequence[Scored]) -> dict[str, str | None]:
    """Where the relevance model ran for a query (it may run twice: on the
    candidates, then on the kept chunks): the place of a run that fell back
    if one did, with every reason, else the place it ran."""
    fell_back = [run for run in runs if run.reason]
    by = (fell_back or list(runs) or [Scored(())])[-1].by
    reasons = list(dict.fromkeys(run.reason for run in fell_back))
    return {"relevance_by": by, "relevance_by_reason": "; ".join(reasons) or None}


def shipped_relevance_model() -> RelevanceModel:
    """The project's relevance model, one per process, loaded on first use."""
    from chunkrag_core.providers.local_relevance import shared_relevance_model

    return shared_relevance_model()


def retrieval_judgements(
    candidates: Sequence[Chunk], unjudged: Sequence[Judgement], calibrating: bool
) -> list[Judgement]:
    """The candidates' judgements when no judge could run: unjudged (each
    noting why), to be calibrated from the retrieval signals; without a
    calibration model, the retrieval score min-max normalised over them."""
    note = unjudged[0].notes if unjudged else ()
    if calibrating:
        return [Judgement(None, None, None, None, notes=note) for _ in candidates]
    return [
        Judgement(None, None, None, prior, prior=prior, notes=note)
        for prior in retrieval_priors([c.score for c in candidates])
    ]
