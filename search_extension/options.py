"""The filter's options, declared once.

The pydantic models here are the one declaration of every option a caller
can give the filter: its type, its bounds, its default and its one-line help.
They validate ``ext.chunkrag`` in a ``_search`` body and ``options`` of
``/v1/ask`` (the gateway serves their JSON schema in its OpenAPI document),
and :func:`add_arguments` makes the ``chunkrag ask`` / ``search`` / ``eval``
flags from them. :meth:`OptionsModel.resolve` turns a validated block into
the frozen values the library runs on (:class:`FilterOptions`,
:class:`ScoringOptions`, :class:`SegmentSettings`); the rules that tie one
option to another live there and nowhere else.

The defaults are the library's own (``FilterOptions()``, ``SegmentSettings()``),
read here rather than written twice. Nothing here imports the gateway, FastAPI,
the CLI or the workers.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from chunkrag_core.settings import DEFAULT_SCALES
from chunkrag_filter.pipeline import (
    FALLBACKS,
    JUDGE_TOP_WHEN_ASKED,
    RELEVANCE_SOURCES,
    RERANKERS,
    THRESHOLDS,
    FilterOptions,
)
from chunkrag_filter.processors.calibration import CONFIGURED
from chunkrag_filter.processors.gate import GATES
from chunkrag_filter.processors.relevance import CRITICS, MAX_LISTWISE_BATCH, METHODS, PASSAGE_FORMATS, ScoringOptions
from search_extension.ask import DEFAULT_CANDIDATES
from search_extension.post_search import DEFAULT_MAX_PASSAGES, EMPTY_HITS, POST_SEARCH_GATE, PostSearchOptions
from search_extension.queries import MODES
from search_extension.segments import SegmentError, SegmentSettings

# Longest judging budget a query may ask for (an hour): beyond it no caller
# waits, and larger values overflow the clock arithmetic (found by fuzzing).
MAX_BUDGET_S = 3600.0
# Largest stage weight: only their ratios matter, and huge ones overflow the sum.
MAX_WEIGHT = 1000.0
# Whether an answer is written when the caller does not say: it costs a model
# call, so a search client (which asked for hits) gets one only with
# ``answer: true``; /v1/ask and ``chunkrag ask`` exist to answer; ``eval``
# writes one only with --generate.
ANSWER_BY_DEFAULT = {"search": False, "ask": True, "eval": False}

_FILTER = FilterOptions()
_SEGMENTS = SegmentSettings()
# Where the passages come from: "auto" (a chunk index is searched for its
# chunks, any other index post-searched), "chunks" (a chunk index's own
# retrieval, with the configured retrieval mode), "post_search" (the
# caller's body as written, its hits' text fields split), or a retrieval
# mode of a chunk index (which implies "chunks").
TARGETS = ("auto", "chunks", "post_search")
# Most passages per hit a caller may ask for: beyond it a hit is a corpus.
MAX_PASSAGES_LIMIT = 1000
_FIELD_NAME = Annotated[str, Field(min_length=1, max_length=512)]


class OptionError(ValueError):
    """An option the filter cannot use; the message names it."""


# --- what the declaration carries besides pydantic's own metadata -------------


# ``Cli.set_to`` when the flag takes a value (``None`` is a value to set).
TAKES_VALUE = object()


@dataclass(frozen=True, slots=True)
class Cli:
    """The option as a flag of these commands. ``flag`` when it is not the
    option's name; ``values`` maps each choice to the option's value (e.g.
    ``--calibration default|off``); ``set_to`` makes a store-true flag that
    sets the option to this value (``--no-answer``). ``help`` replaces the
    option's description: one text, or one per command."""

    commands: tuple[str, ...]
    flag: str | None = None
    values: Mapping[str, Any] | None = None
    set_to: Any = TAKES_VALUE
    help: str | Mapping[str, str] | None = None

    @property
    def store_true(self) -> bool:
        return self.set_to is not TAKES_VALUE

    def help_for(self, command: str) -> str | None:
        return self.help.get(command) if isinstance(self.help, Mapping) else self.help


@dataclass(frozen=True, slots=True)
class Unknown:
    """A choice the library names in its refusal: "unknown <label> 'x'"."""

    label: str


@dataclass(frozen=True, slots=True)
class AtMost:
    """An upper bound known only when validating: a limit of the caller's."""

    limit: str
    why: str = ""


# The --ensemble flag's help; each command adds where the scales come from.
_ENSEMBLE_HELP = (
    "retrieve the base chunks and every larger scale in one _msearch, fused per scale and de-duplicated by span"
)
_TEXT_SCHEMA = {"pattern": r"\S"}  # some non-blank text; blank text is "no query text"
_Unit = Annotated[float, Field(ge=0, le=1)]
_Scale = Annotated[int, Field(ge=1)]


def _without_null_defaults(schema: dict[str, Any], _model: type) -> None:
    # An option left unset has no default value of its type (the gateway
    # decides, e.g. the retrieval mode): its schema names no default.
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None and "anyOf" not in prop:
            del prop["default"]


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, json_schema_extra=_without_null_defaults)


class ScoringModel(_Options):
    """How the LLM judge scores a chunk; giving any of these turns the judge on."""

    method: Annotated[
        Literal[METHODS],
        Unknown("scoring method"),
        Cli(("ask", "eval"), help="turn the LLM judge on with this scoring"),
    ] = Field(
        _FILTER.scoring.method,
        description=f"listwise: up to {MAX_LISTWISE_BATCH} passages per call; multistage: the paper's base score, "
        "self-reflection on borderline scores and critic per chunk; yes_no; likert",
    )
    critic: Annotated[Literal[CRITICS], Unknown("critic")] = Field(
        _FILTER.scoring.critic, description="multistage critic: a rule check (no call), the model, or none"
    )
    reflect_band: list[_Unit] = Field(
        list(_FILTER.scoring.reflect_band),
        min_length=2,
        max_length=2,
        description="[low, high]: self-reflect only on base scores inside",
    )
    use_logprobs: bool = Field(
        _FILTER.scoring.use_logprobs, description="read P(Yes) from log-probabilities when the provider returns them"
    )
    weights: list[Annotated[float, Field(ge=0, le=MAX_WEIGHT)]] = Field(
        list(_FILTER.scoring.weights), min_length=3, max_length=3, description="weights of base, reflection, critic"
    )
    listwise_batch: int = Field(
        _FILTER.scoring.listwise_batch, ge=1, le=MAX_LISTWISE_BATCH, description="listwise: passages judged in one call"
    )
    orders: Annotated[int, Cli(("ask", "eval"))] = Field(
        _FILTER.scoring.orders,
        ge=1,
        le=2,
        description="listwise: 2 also asks each batch in reverse order and averages (removes position bias)",
    )
    passages: Annotated[Literal[PASSAGE_FORMATS], Unknown("passage format"), Cli(("ask", "eval"))] = Field(
        _FILTER.scoring.passages,
        description="listwise prompt layout: numbered, or quoted (each passage fenced as data; "
        "against planted instructions)",
    )

    def resolve(self, *, where: str) -> ScoringOptions:
        low, high = self.reflect_band
        if low > high:
            raise OptionError(f"{where}.reflect_band must be [low, high] with low <= high, got {self.reflect_band}")
        if sum(self.weights) <= 0:
            raise OptionError(f"{where}.weights must not all be 0")
        values = {**self.model_dump(), "reflect_band": tuple(self.reflect_band), "weights": tuple(self.weights)}
        try:
            # Fields the declaration leaves out (likert_threshold, max_chunk_chars) keep the filter's.
            return dataclasses.replace(_FILTER.scoring, **values)
        except ValueError as exc:
            raise OptionError(f"{where}: {exc}") from None


class SegmentsModel(_Options):
    """Budgets of relevant segment extraction (dsRAG's balanced preset by default)."""

    max_segment_chunks: int = Field(_SEGMENTS.max_segment_chunks, ge=1, description="longest segment, in chunks")
    max_total_chunks: int = Field(_SEGMENTS.max_total_chunks, ge=1, description="all segments together, in chunks")
    max_total_chars: Annotated[
        int,
        Cli(("ask",), flag="--segment-chars", help="character budget of all segments together (default: no limit)"),
    ] = Field(_SEGMENTS.max_total_chars, ge=1, description="all segments together, in characters (default: no limit)")
    min_segment_value: float = Field(_SEGMENTS.min_segment_value, description="a segment worth less is not returned")
    irrelevant_chunk_penalty: float = Field(
        _SEGMENTS.irrelevant_chunk_penalty, ge=0, description="subtracted per chunk; larger gives shorter segments"
    )
    # SegmentSettings refuses 0 with its own reason; the schema says so.
    decay_rate: float = Field(
        _SEGMENTS.decay_rate,
        ge=0,
        json_schema_extra={"exclusiveMinimum": 0},
        description="rank decay exp(-rank / decay_rate)",
    )


class OptionsModel(_Options):
    """The keys of ``ext.chunkrag`` in a ``_search`` body, and of ``options`` in ``/v1/ask``."""

    query: str = Field(
        None,
        json_schema_extra=_TEXT_SCHEMA,
        description="text to retrieve and judge with, instead of the body's query or the question",
    )
    rewrite: bool = Field(False, description="rewrite the query with the model before retrieval")
    candidates: Annotated[int, AtMost("max_candidates", " (the gateway's max_candidates)"), Cli(("ask",))] = Field(
        None,
        ge=1,
        description=f"chunks retrieved and judged (default {DEFAULT_CANDIDATES} with the model stages, else the hits "
        "asked for; at most the gateway's max_candidates, CHUNKRAG_GATEWAY_MAX_CANDIDATES)",
    )
    mode: Annotated[Literal[TARGETS + MODES], Cli(("search", "ask"))] = Field(
        None,
        description="auto (default): chunk retrieval when every index the path covers is a chunk index "
        "`chunkrag ingest` made and the body holds only query, size and ext, else post_search; post_search: "
        "the body as written, then the filter over its hits' passages; chunks, or a retrieval mode of a chunk "
        "index (default: CHUNKRAG_RETRIEVAL_MODE, else minmax: BM25 and kNN each normalised, 0.5/0.5)",
    )
    fields: list[_FIELD_NAME] = Field(
        None,
        min_length=1,
        description="post_search: the text fields split into passages (default: CHUNKRAG_POST_SEARCH_FIELDS for "
        "the index, else every text and match_only_text field of its mapping)",
    )
    title_field: Annotated[str, Cli(("search", "ask"))] = Field(
        None,
        min_length=1,
        max_length=512,
        description="post_search: the field whose value heads every passage (default: the first of title, name, "
        "subject, headline in the mapping)",
    )
    empty_hits: Annotated[Literal[EMPTY_HITS], Unknown("empty_hits"), Cli(("search",))] = Field(
        "keep",
        description="post_search: a hit without a kept passage is kept and marked (keep) or left out of "
        "hits.hits, hits.total unchanged (drop); a hit without text is always kept, marked",
    )
    max_passages: Annotated[int, Cli(("search", "ask"))] = Field(
        DEFAULT_MAX_PASSAGES,
        ge=1,
        le=MAX_PASSAGES_LIMIT,
        description="post_search: passages of one hit that go to the filter, the best by BM25 and cosine "
        "(the rest are counted as capped)",
    )
    stages: bool = Field(True, description="false: hybrid retrieval only, no model call")
    redundancy_threshold: Annotated[
        Optional[float],
        Cli(
            ("eval",),
            flag="--redundancy",
            help="drop a chunk whose cosine to an earlier kept one is above this (e.g. 0.9); off by default",
        ),
    ] = Field(
        _FILTER.redundancy_threshold,
        ge=-1,
        le=1,
        description="cosine above which a chunk repeats an earlier one; null skips the check",
    )
    scoring: ScoringModel = Field(
        ScoringModel(),
        description=f"how the LLM judge scores; giving it turns the judge on for the best {JUDGE_TOP_WHEN_ASKED} "
        "(see judge_top)",
    )
    threshold: Annotated[Literal[THRESHOLDS], Unknown("threshold"), Cli(("ask", "eval"))] = Field(
        _FILTER.threshold,
        description="where the kept chunks are cut: fixed (a calibrated probability), dynamic (the paper's), "
        "relative (a share of the best), llm",
    )
    fixed_threshold: Annotated[float, Cli(("ask", "eval"))] = Field(
        _FILTER.fixed_threshold,
        ge=0,
        le=1,
        description="the fixed threshold (default: the calibration file's cut), or the share of the best score "
        "for `relative` (default 0.4)",
    )
    fallback: Annotated[Literal[FALLBACKS], Unknown("fallback"), Cli(("ask",))] = Field(
        _FILTER.fallback,
        description="when no chunk passes the threshold: keep the top chunks, or answer that nothing was found",
    )
    fallback_k: int = Field(_FILTER.fallback_k, ge=1, description="chunks kept by the top_k fallback")
    min_score: float = Field(
        _FILTER.min_score,
        ge=0,
        le=1,
        description="a chunk scored below this never passes; when none clears it the outcome is 'nothing relevant'",
    )
    prior_weight: Annotated[float, Cli(("eval",))] = Field(
        _FILTER.prior_weight,
        ge=0,
        le=1,
        description="share of the final score taken from the retrieval score; 0: the judgement alone",
    )
    rerank: Annotated[Literal[RERANKERS], Unknown("rerank")] = Field(
        _FILTER.rerank,
        description="order of the kept chunks: by score, by the project's relevance model (local), "
        "by a Cohere reranker, or as retrieved",
    )
    relevance: Annotated[Literal[RELEVANCE_SOURCES], Unknown("relevance"), Cli(("ask", "eval"))] = Field(
        _FILTER.relevance,
        description="what scores the candidates besides the LLM judge: the retrieval signals alone, or the "
        "project's relevance model (a MiniLM cross-encoder, offline) calibrated with them",
    )
    gate: Annotated[Literal[GATES], Unknown("gate"), Cli(("ask", "eval"))] = Field(
        _FILTER.gate,
        description="first decide whether anything retrieved is relevant at all; when not, nothing is kept and the "
        "answer is 'not found' with no model call: from the retrieval signals and the query's words and names "
        "(retrieval), with the relevance model on the best few candidates too (crossencoder), or never (off); "
        "post-search over a cluster's hits gates each hit with retrieval unless this is given",
    )
    gate_cut: Annotated[float, Cli(("ask", "eval"))] = Field(
        _FILTER.gate_cut,
        ge=0,
        le=1,
        description="the gate's cut on P(some candidate is relevant) (default: the calibration file's)",
    )
    gate_top: int = Field(
        _FILTER.gate_top, ge=1, le=50, description="gate crossencoder: the best candidates the relevance model reads"
    )
    lost_in_the_middle: bool = Field(
        _FILTER.lost_in_the_middle, description="put the best kept chunks at both ends of the context"
    )
    answer: Annotated[
        bool, Cli(("ask",), flag="--no-answer", set_to=False, help="filter only; do not write an answer")
    ] = Field(
        None,
        description="write an answer from the kept chunks (one more model call; default: false in _search, "
        "true in /v1/ask and `chunkrag ask`)",
    )
    include_dropped: bool = Field(False, description="_search only: list the dropped chunks under chunkrag.dropped")
    budget_s: Annotated[
        float, AtMost("max_budget_s", " (the gateway's max_budget_s, CHUNKRAG_GATEWAY_MAX_BUDGET_S)")
    ] = Field(
        None,
        gt=0,
        le=MAX_BUDGET_S,
        description="seconds for every model stage of the search together: the relevance model, the "
        "cross-encoder gate, the LLM judge, reranking (default: the gateway's, CHUNKRAG_WORKER_QUERY_BUDGET_S; "
        "at most the gateway's max_budget_s, CHUNKRAG_GATEWAY_MAX_BUDGET_S, and never an hour); a stage stops "
        "between batches when it runs out and the answer is from what was decided (chunkrag.budget_ran_out "
        "names the stage): chunks not scored in time are unscored, the gate is the retrieval gate's, the "
        "order as retrieved; 504 when the relevance stage scored nothing",
    )
    segments: Annotated[
        Union[bool, SegmentsModel],
        Cli(
            ("ask", "eval"),
            set_to=True,
            help={
                "ask": "relevant segment extraction: answer from runs of neighbouring chunks around the relevant ones",
                "eval": "also measure relevant segments of the judged candidates within the characters the filter kept",
            },
        ),
    ] = Field(False, description="relevant segment extraction: true, or budgets; hits become segments")
    judge_top: Annotated[int, AtMost("max_candidates"), Cli(("ask", "eval"))] = Field(
        _FILTER.judge_top,
        ge=0,
        description="the best N candidates go to the LLM judge (0: none, the retrieval signals decide; "
        f"any scoring option makes it {JUDGE_TOP_WHEN_ASKED})",
    )
    calibrated: Annotated[bool, Cli(("ask", "eval"), flag="--calibration", values={"default": True, "off": False})] = (
        Field(
            _FILTER.calibration is not None,
            description="score with the calibration file's logistic model over the retrieval and context signals "
            "(and the judge's share when it runs)",
        )
    )
    ensemble: Annotated[
        Union[bool, Annotated[list[_Scale], Field(min_length=1)]],
        Cli(
            ("search", "ask", "eval"),
            set_to=True,
            help={
                "search": _ENSEMBLE_HELP + " (the index must have been ingested with --scales)",
                "ask": _ENSEMBLE_HELP + " (the index must have been ingested with --scales)",
                "eval": _ENSEMBLE_HELP + " (the pools are indexed at the scales)",
            },
        ),
    ] = Field(
        False,
        description="multi-scale ensembling: true (the gateway's scales, CHUNKRAG_SCALES or "
        f"{','.join(map(str, DEFAULT_SCALES))}) or the "
        "scales in tokens; every scale in one _msearch, de-duplicated by span",
    )

    def resolve(
        self,
        *,
        surface: str = "ask",
        max_candidates: int | None = None,
        max_budget_s: float | None = None,
        where: str = "ext.chunkrag",
        default_gate: str | None = None,
    ) -> ChunkragOptions:
        """The frozen values the library runs on. The rules tying options
        together live here: a scoring option turns the judge on for the best
        nine; ``calibrated`` means the shipped model (FilterOptions picks the
        one fitted for judging on or off); ``answer`` defaults by surface;
        ``default_gate`` (the gateway's CHUNKRAG_GATEWAY_GATE) stands for
        ``gate`` when the request names none, in chunk retrieval and for each
        hit post-searched alike."""
        given = self.model_fields_set
        if default_gate is not None and default_gate not in GATES:
            raise OptionError(f"the gateway's default gate must be one of {', '.join(GATES)}, got {default_gate!r}")
        gate = self.gate if "gate" in given or default_gate is None else default_gate
        limits = {"max_candidates": max_candidates, "max_budget_s": max_budget_s}
        for key in ("candidates", "judge_top", "budget_s"):
            field = type(self).model_fields[key]
            limit = limits[_marker(field, AtMost).limit]
            value = getattr(self, key)
            if limit is not None and value is not None and value > limit:
                shown = f"{value:g}" if isinstance(value, float) else repr(value)
                raise OptionError(f"{where}.{key} must be {_wanted(field, limits)}, got {shown}")
        judge_top = self.judge_top
        if "judge_top" not in given and "scoring" in given:
            # Asking how to judge asks for the judge (off by default).
            judge_top = JUDGE_TOP_WHEN_ASKED
        scoring = self.scoring.resolve(where=f"{where}.scoring")
        try:
            filter_options = FilterOptions(
                redundancy_threshold=self.redundancy_threshold,
                scoring=scoring,
                threshold=self.threshold,
                fixed_threshold=self.fixed_threshold,
                variance_epsilon=_FILTER.variance_epsilon,
                fallback=self.fallback,
                fallback_k=self.fallback_k,
                min_score=self.min_score,
                prior_weight=self.prior_weight,
                rerank=self.rerank,
                relevance=self.relevance,
                gate=gate,
                gate_cut=self.gate_cut,
                gate_top=self.gate_top,
                lost_in_the_middle=self.lost_in_the_middle,
                answer=ANSWER_BY_DEFAULT[surface] if self.answer is None else self.answer,
                judge_top=judge_top,
                calibration=CONFIGURED if self.calibrated else None,
            )
        except ValueError as exc:
            raise OptionError(f"{where}: {exc}") from None
        return ChunkragOptions(
            query=self.query,
            rewrite=self.rewrite,
            candidates=self.candidates,
            mode=None if self.mode in TARGETS else self.mode,
            target=self.mode if self.mode in TARGETS else "auto" if self.mode is None else "chunks",
            post_search=PostSearchOptions(
                fields=tuple(self.fields or ()),
                title_field=self.title_field,
                empty_hits=self.empty_hits,
                max_passages=self.max_passages,
                include_dropped=self.include_dropped,
                stages=self.stages,
                gate=None if "gate" in given else default_gate or POST_SEARCH_GATE,
            ),
            post_search_given=tuple(k for k in POST_SEARCH_KEYS if k in given),
            stages=self.stages,
            include_dropped=self.include_dropped,
            budget_s=self.budget_s,
            filter=filter_options,
            segments=_segments(self.segments, where=f"{where}.segments"),
            ensemble=_ensemble(self.ensemble),
        )


def _segments(value: bool | SegmentsModel, *, where: str) -> SegmentSettings | None:
    if value is False:
        return None
    if value is True:
        return SegmentSettings()
    try:
        return SegmentSettings(**value.model_dump())
    except SegmentError as exc:
        raise OptionError(f"{where}: {exc}") from None


def _ensemble(value: bool | list[int]) -> tuple[int, ...] | None:
    """None (off), () for the gateway's scales, else the scales asked for."""
    if value is False:
        return None
    if value is True:
        return ()
    return tuple(sorted(set(value)))


@dataclass(frozen=True, slots=True)
class ChunkragOptions:
    """A validated ``ext.chunkrag`` block (or ``/v1/ask`` options), resolved."""

    query: str | None = None
    rewrite: bool = False
    # None: DEFAULT_CANDIDATES with the model stages, else the hits asked for.
    candidates: int | None = None
    mode: str | None = None
    # False: hybrid retrieval only, no model call.
    stages: bool = True
    include_dropped: bool = False
    # Judging budget; None: the gateway's setting.
    budget_s: float | None = None
    filter: FilterOptions = FilterOptions()
    # Relevant segment extraction; None: chunks, not segments, are returned.
    segments: SegmentSettings | None = None
    # Multi-scale ensembling: None off; () the gateway's scales
    # (CHUNKRAG_SCALES, else the defaults); else the scales asked for.
    ensemble: tuple[int, ...] | None = None
    # Where the passages come from (TARGETS): "chunks" when a retrieval mode was given.
    target: str = "auto"
    post_search: PostSearchOptions = PostSearchOptions(gate=POST_SEARCH_GATE)
    # The post-search options the caller gave (refused on a chunk index).
    post_search_given: tuple[str, ...] = ()


OPTION_KEYS = tuple(OptionsModel.model_fields)
# Options that only post-search reads.
POST_SEARCH_KEYS = ("fields", "title_field", "empty_hits", "max_passages")
SCORING_KEYS = tuple(ScoringModel.model_fields)
SEGMENT_KEYS = tuple(SegmentsModel.model_fields)


# --- validation with messages that name the option ---------------------------


def parse_options(
    raw: Any,
    *,
    max_candidates: int | None = None,
    max_budget_s: float | None = None,
    where: str = "ext.chunkrag",
    surface: str = "ask",
    default_gate: str | None = None,
) -> ChunkragOptions:
    """A JSON options object (or an already validated :class:`OptionsModel`),
    resolved; :class:`OptionError` names the first option it cannot use.
    ``max_candidates`` and ``max_budget_s``: the caller's limits (None: none
    but the declaration's)."""
    limits = {"max_candidates": max_candidates, "max_budget_s": max_budget_s}
    model = validate(raw, where=where, limits=limits)
    return model.resolve(
        surface=surface,
        max_candidates=max_candidates,
        max_budget_s=max_budget_s,
        where=where,
        default_gate=default_gate,
    )


def validate(raw: Any, *, where: str = "ext.chunkrag", limits: Mapping[str, Any] | None = None) -> OptionsModel:
    if isinstance(raw, OptionsModel):
        return raw
    if not isinstance(raw, Mapping):
        raise OptionError(f"{where} must be an object, got {json_kind(raw)}")
    try:
        return OptionsModel.model_validate(raw)
    except ValidationError as exc:
        raise OptionError(first_error(raw, exc.errors(), where=where, limits=limits)) from None


def first_error(
    raw: Mapping[str, Any], errors: Sequence[Mapping[str, Any]], *, where: str, limits: Mapping[str, Any] | None = None
) -> str:
    """The refusal of the first option pydantic complained about, in the
    order the options are read (see :func:`error_message`)."""
    first = min(errors, key=lambda e: _error_order(OptionsModel, e))
    return error_message(OptionsModel, raw, first, where=where, limits=limits)


def _error_order(model: type[BaseModel], error: Mapping[str, Any]) -> tuple[int, int, int, int]:
    # As the options are read: unknown keys first, then field by field, the
    # deepest complaint first (a union reports every member it tried).
    loc, extra = error["loc"], error["type"] == "extra_forbidden"
    names = list(model.model_fields)
    position = names.index(loc[0]) if loc and loc[0] in names else -1
    return (0 if extra and len(loc) == 1 else 1, position, 0 if extra else 1, -len(loc))


def error_message(
    model: type[BaseModel], raw: Any, error: Mapping[str, Any], *, where: str, limits: Mapping[str, Any] | None = None
) -> str:
    """One pydantic error as the option's own refusal: the option's path,
    what it must be (from its declaration) and the value given."""
    loc = list(error["loc"])
    while loc and isinstance(raw, Mapping):
        key = loc.pop(0)
        if key not in model.model_fields:
            return f"unknown option [{key}] in {where}; allowed: {', '.join(model.model_fields)}"
        field, value = model.model_fields[key], raw.get(key)
        nested = _nested_model(field.annotation)
        if nested is not None and isinstance(value, Mapping) and loc:
            if loc[0] == nested.__name__:  # the union member pydantic tried
                loc.pop(0)
            elif loc[0] not in nested.model_fields and _is_union(field.annotation):
                loc = []  # another member of the union: the value as a whole
            if loc:
                model, raw, where = nested, value, f"{where}.{key}"
                continue
        return _refusal(field, key, value, where, limits or {})
    return f"{where} must be an object, got {json_kind(raw)}"


def _refusal(field, key: str, value: Any, where: str, limits: Mapping[str, Any]) -> str:
    unknown = _marker(field, Unknown)
    if unknown is not None and isinstance(value, str):
        choices = ", ".join(get_args(_bare(field.annotation)))
        return f"{where}: unknown {unknown.label} {value!r}; choose one of {choices}"
    shown = json_kind(value) if _nested_model(field.annotation) is not None else repr(value)
    return f"{where}.{key} must be {_wanted(field, limits)}, got {shown}"


def _wanted(field, limits: Mapping[str, Any]) -> str:
    """What a declared option must be, in words."""
    annotation = _bare(field.annotation)
    bounds = _bounds(field.metadata)
    at_most = _marker(field, AtMost)
    if at_most is not None and limits.get(at_most.limit) is not None:
        bounds["le"] = limits[at_most.limit]
    why = at_most.why if at_most is not None and limits.get(at_most.limit) is not None else ""
    return _words(annotation, bounds, field.metadata) + why


def _words(annotation: Any, bounds: Mapping[str, float], metadata: Sequence[Any]) -> str:
    origin = get_origin(annotation)
    if origin is Union:
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _words(members[0], bounds, metadata) + " or null"
        rest = [
            _words(_bare(a), _bounds(_annotated_metadata(a)), _annotated_metadata(a)) for a in members if a is not bool
        ]
        return "true, false or " + " or ".join(rest)
    if origin is Literal:
        return f"one of [{', '.join(get_args(annotation))}]"
    if origin is list:
        (item,) = get_args(annotation)
        items = _words(_bare(item), _bounds(_annotated_metadata(item)), ())
        items = items.replace("an integer", "integers").replace("a number", "numbers").replace("a string", "strings")
        length = _bounds(metadata)
        if length.get("min_length") == length.get("max_length") is not None:
            return f"a list of {length['min_length']} {items}"
        return f"a non-empty list of {items}"
    if annotation is bool:
        return "true or false"
    if annotation is str:
        return "a string"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "an object"
    kind = "an integer" if annotation is int else "a number"
    return _range(kind, bounds)


def _range(kind: str, bounds: Mapping[str, float]) -> str:
    low, high, above = bounds.get("ge"), bounds.get("le"), bounds.get("gt")
    if above is not None:
        return f"above {above:g}" + (f" and at most {high:g}" if high is not None else "") + f" ({kind})"
    if low is not None and high is not None:
        return f"{kind} from {low:g} to {high:g}"
    if low is not None:
        return f"{kind} of at least {low:g}"
    return kind


def _bounds(metadata: Sequence[Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in metadata:
        for name in ("ge", "le", "gt", "min_length", "max_length"):
            if getattr(item, name, None) is not None:
                out[name] = getattr(item, name)
        if isinstance(item, FieldInfo):
            out.update(_bounds(item.metadata))
    return out


def _annotated_metadata(annotation: Any) -> tuple[Any, ...]:
    return tuple(get_args(annotation)[1:]) if get_origin(annotation) is Annotated else ()


def _bare(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _marker(field, kind: type) -> Any:
    return next((item for item in field.metadata if isinstance(item, kind)), None)


def _is_union(annotation: Any) -> bool:
    return get_origin(_bare(annotation)) is Union


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    annotation = _bare(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for member in get_args(annotation) if get_origin(annotation) is Union else ():
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def json_kind(value: Any) -> str:
    kinds = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return kinds.get(type(value), type(value).__name__)


# --- command-line flags ------------------------------------------------------


def _cli_fields(command: str) -> list[tuple[tuple[str, ...], str, Any, Cli]]:
    """(path, name, field, Cli) of every option offered as a flag of ``command``."""
    found = []
    for path, model in (((), OptionsModel), (("scoring",), ScoringModel), (("segments",), SegmentsModel)):
        for name, field in model.model_fields.items():
            cli = _marker(field, Cli)
            if cli is not None and command in cli.commands:
                found.append((path, name, field, cli))
    return found


def _flag(name: str, cli: Cli) -> tuple[str, str]:
    """The flag and its argparse destination (``--no-answer``: ``no_answer``)."""
    flag = cli.flag or "--" + name.replace("_", "-")
    return flag, flag.lstrip("-").replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The filter-option flags of ``command`` (ask, search, eval), each with
    the option's help; an unset flag keeps the declaration's default."""
    for _path, name, field, cli in _cli_fields(command):
        flag, dest = _flag(name, cli)
        help_text = cli.help_for(command) or field.description
        if cli.values is not None:
            default = next(choice for choice, value in cli.values.items() if value == field.default)
            parser.add_argument(flag, dest=dest, choices=list(cli.values), help=f"{help_text} (default: {default})")
        elif cli.store_true:
            parser.add_argument(flag, dest=dest, action="store_true", help=help_text)
        else:
            annotation = _bare(field.annotation)
            choices = list(get_args(annotation)) if get_origin(annotation) is Literal else None
            bounds = _bounds(field.metadata)
            if _is_union(annotation):  # Optional[float]: a value given on the command line is the float
                (annotation,) = [member for member in get_args(annotation) if member is not type(None)]
            kind = str if choices else annotation
            # A short range of integers (--orders 1|2) reads best as choices.
            if kind is int and None not in (bounds.get("ge"), bounds.get("le")) and bounds["le"] - bounds["ge"] < 10:
                choices = list(range(int(bounds["ge"]), int(bounds["le"]) + 1))
            default = "" if field.default is None else f" (default: {field.default})"
            parser.add_argument(flag, dest=dest, type=kind, choices=choices, help=help_text + default)


def from_arguments(args: argparse.Namespace, command: str) -> OptionsModel:
    """The options the flags of ``command`` set (unset flags keep the
    declaration's defaults), validated like a request's. A flag of a nested
    option (``--segment-chars``) gives its object, which turns it on."""
    raw: dict[str, Any] = {}
    for path, name, _field, cli in _cli_fields(command):
        value = getattr(args, _flag(name, cli)[1], None)
        if value is None or (cli.store_true and value is False):
            continue
        if cli.values is not None:
            value = cli.values[value]
        elif cli.store_true:
            value = cli.set_to
        target = raw
        for part in path:
            if not isinstance(target.get(part), dict):
                target[part] = {}
            target = target[part]
        if not isinstance(target.get(name), dict):  # an object given by a nested flag stays
            target[name] = value
    return validate(raw, where="options")


def ensemble_scales(requested: tuple[int, ...] | None, configured: Sequence[int]) -> tuple[int, ...] | None:
    """The scales to ensemble for a resolved ``ensemble``: None (off), those
    asked for, or for ``true`` the configured ones (CHUNKRAG_SCALES), else
    the defaults."""
    if requested is None:
        return None
    return requested or tuple(configured) or DEFAULT_SCALES


# --- documentation -----------------------------------------------------------


def reference() -> str:
    """A Markdown table of every option (ext.chunkrag, /v1/ask options, the
    flags), from the declaration: for the docs, so they cannot drift."""
    flags_by_option: dict[str, list[str]] = {}
    for command in ("ask", "search", "eval"):
        for path, name, _field, cli in _cli_fields(command):
            flag, key = _flag(name, cli)[0], ".".join((*path, name))
            flags_by_option.setdefault(key, [])
            if flag not in flags_by_option[key]:
                flags_by_option[key].append(flag)
    rows = ["| option | value | default | flag | what it does |", "|---|---|---|---|---|"]
    for prefix, model in (("", OptionsModel), ("scoring.", ScoringModel), ("segments.", SegmentsModel)):
        for name, field in model.model_fields.items():
            default = "unset" if field.default is None else f"`{_json_default(field.default)}`"
            flags = ", ".join(f"`{flag}`" for flag in flags_by_option.get(prefix + name, ()))
            rows.append(f"| `{prefix}{name}` | {_wanted(field, {})} | {default} | {flags} | {field.description} |")
    return "\n".join(rows) + "\n"


def _json_default(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return "{}"
    return str(value)


if __name__ == "__main__":
    print(reference(), end="")
