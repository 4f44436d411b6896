"""Request and response models of ``/v1/ask``, for validation and the
OpenAPI document. The options are checked again, with the messages shared
with ``ext.chunkrag``, by :func:`dialect.parse_options`: unknown keys are let
through here so that check can name them and list the allowed ones."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from search_extension.chunk_filter import FALLBACKS, RERANKERS, THRESHOLDS
from search_extension.processors.relevance import CRITICS, MAX_LISTWISE_BATCH, METHODS, PASSAGE_FORMATS
from search_extension.queries import MODES


class ScoringModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    method: Optional[Literal[METHODS]] = Field(None, description="multistage: base score, self-reflection on borderline scores, critic; listwise: several passages per call")
    critic: Optional[Literal[CRITICS]] = None
    reflect_band: Optional[list[float]] = Field(None, min_length=2, max_length=2, description="[low, high]: self-reflect only on base scores inside")
    use_logprobs: Optional[bool] = Field(None, description="read P(Yes) from log-probabilities when the provider returns them")
    weights: Optional[list[float]] = Field(None, min_length=3, max_length=3, description="base, reflection, critic")
    listwise_batch: Optional[int] = Field(None, ge=1, le=MAX_LISTWISE_BATCH, description="listwise: passages judged in one call")
    orders: Optional[int] = Field(None, ge=1, le=2, description="listwise: 2 also asks each batch in reverse order and averages (removes position bias)")
    passages: Optional[Literal[PASSAGE_FORMATS]] = Field(None, description="listwise prompt layout: numbered, or quoted (each passage fenced as data; against planted instructions)")


class OptionsModel(BaseModel):
    """The keys of ``ext.chunkrag`` in a ``_search`` body."""

    model_config = ConfigDict(extra="allow", strict=True)

    query: Optional[str] = Field(None, description="text to retrieve and judge with, instead of the question")
    rewrite: Optional[bool] = Field(None, description="rewrite the query with the model before retrieval")
    candidates: Optional[int] = Field(None, ge=1, description="chunks retrieved and judged (at most the gateway's max_candidates)")
    mode: Optional[Literal[MODES]] = None
    stages: Optional[bool] = Field(None, description="false: hybrid retrieval only, no model call")
    redundancy_threshold: Optional[float] = Field(None, description="cosine above which a chunk repeats an earlier one; null skips the check")
    scoring: Optional[ScoringModel] = None
    threshold: Optional[Literal[THRESHOLDS]] = None
    fixed_threshold: Optional[float] = Field(None, ge=0, le=1)
    fallback: Optional[Literal[FALLBACKS]] = Field(None, description="when no chunk passes the threshold")
    fallback_k: Optional[int] = Field(None, ge=1)
    min_score: Optional[float] = Field(None, ge=0, le=1, description="a chunk scored below this never passes; when none clears it the outcome is 'nothing relevant'")
    prior_weight: Optional[float] = Field(None, ge=0, le=1, description="share of the final score taken from the retrieval score; 0: the LLM judgement alone")
    rerank: Optional[Literal[RERANKERS]] = None
    lost_in_the_middle: Optional[bool] = None
    answer: Optional[bool] = Field(None, description="write an answer from the kept chunks")
    include_dropped: Optional[bool] = Field(None, description="_search only: list the dropped chunks under chunkrag.dropped")
    budget_s: Optional[float] = Field(None, gt=0, le=3600, description="seconds for judging (at most an hour); chunks not judged in time are unscored")
    judge_top: Optional[int] = Field(None, ge=0, description="the best N candidates go to the LLM judge (default 0: none, the retrieval signals decide; giving `scoring` turns it on for 9)")
    calibrated: Optional[bool] = Field(None, description="score with the shipped logistic model over the retrieval signals (and the judge's share when it runs); default true")
    segments: Optional[Union[bool, SegmentsModel]] = Field(None, description="relevant segment extraction: true, or budgets; hits become segments")
    ensemble: Optional[Union[bool, list[int]]] = Field(None, description="multi-scale ensembling: true (the gateway's scales, CHUNKRAG_SCALES or 128,512,2000) or the scales in tokens; every scale in one _msearch, de-duplicated by span")


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: str = Field(min_length=1)
    question: str = Field(min_length=1)
    options: OptionsModel = Field(default_factory=OptionsModel)


class SegmentsModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    max_segment_chunks: Optional[int] = Field(None, ge=1, description="longest segment, in chunks (15)")
    max_total_chunks: Optional[int] = Field(None, ge=1, description="all segments together, in chunks (30)")
    max_total_chars: Optional[int] = Field(None, ge=1, description="all segments together, in characters (no limit)")
    min_segment_value: Optional[float] = Field(None, description="a segment worth less is not returned (0.5)")
    irrelevant_chunk_penalty: Optional[float] = Field(None, ge=0, description="subtracted per chunk; larger gives shorter segments (0.18)")
    decay_rate: Optional[float] = Field(None, gt=0, description="rank decay exp(-rank / decay_rate) (30)")


class AskSegment(BaseModel):
    id: str
    value: float
    chunk_ids: list[str]
    doc_id: str
    scale: int = Field(0, description="0: the semantic chunks; else the ensembling scale (tokens) of the segment's chunks")
    first_position: int
    last_position: int
    start: int
    end: int
    title: str
    header: str
    section: list[str]
    text: str


class ThresholdModel(BaseModel):
    value: float
    method: str
    mean: float
    std: float


class UsageModel(BaseModel):
    model_calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int


class AskChunk(BaseModel):
    id: str
    doc_id: str
    position: int
    scale: int = Field(0, description="0: a semantic chunk; else the ensembling scale (tokens); with ensembling, start..end may span several merged chunks")
    start: int
    end: int
    title: str
    section: list[str]
    sentence_count: int
    text: str
    metadata: dict
    retrieval_rank: Optional[int]
    retrieval_score: Optional[float]
    scores: dict[str, float] = Field(description="per-stage scores: base, reflection, critic, prior, combined, rerank")
    kept: bool
    reason: str = Field(description="above_threshold, below_threshold, redundant, unscored, fallback, or retrieved (no model stages)")


class AskResponse(BaseModel):
    index: str
    question: str
    rewritten_query: Optional[str]
    mode: str
    answer: Optional[str]
    found: Optional[bool]
    citations: list[str] = Field(description="chunk ids the answer cites")
    nothing_relevant: bool
    threshold: Optional[ThresholdModel]
    judged_by: Optional[str] = Field(None, description="where the candidates were judged: workers, gateway (the gateway's own threads), retrieval (the retrieval signals alone); null without judging")
    judged_by_reason: Optional[str] = Field(None, description="why judging fell back from where it was meant to run (null when it did not)")
    chunks: list[AskChunk] = Field(description="kept chunks in final order, then the dropped ones")
    segments: Optional[list[AskSegment]] = Field(None, description="with options.segments: the relevant segments, best first; the answer was written from them")
    usage: UsageModel
    timings_ms: dict[str, float]
