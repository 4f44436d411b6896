"""Request and response models of the gateway, for validation and the
OpenAPI document. The filter's options (``ext.chunkrag``, ``options`` of
``/v1/ask``) are declared in :mod:`search_extension.options`; the app turns
pydantic's complaints about them into the same messages ``ext.chunkrag``
gets (:func:`options.error_message`)."""

from __future__ import annotations

from typing import Any, Optional

from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from chunkrag_gateway.dialect import TEXT_QUERIES
from search_extension.options import OptionsModel, ScoringModel, SegmentsModel  # noqa: F401 (the OpenAPI components)


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: str = Field(min_length=1)
    question: str = Field(
        min_length=1,
        json_schema_extra={"pattern": r"\S"},
        description="answered from the kept chunks (options.query, when given, is what is judged)",
    )
    options: OptionsModel = Field(default_factory=OptionsModel)


class AskSegment(BaseModel):
    id: str
    value: float
    chunk_ids: list[str]
    doc_id: str
    scale: int = Field(
        0, description="0: the semantic chunks; else the ensembling scale (tokens) of the segment's chunks"
    )
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


class GateModel(BaseModel):
    gate: str = Field(description="retrieval or crossencoder")
    probability: float = Field(description="P(some candidate is relevant)")
    cut: float
    passed: bool = Field(description="false: nothing was kept")
    features: dict[str, float] = Field(description="the signals it read (processors/gate.py)")


class UsageModel(BaseModel):
    model_calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int


class AskChunk(BaseModel):
    id: str
    doc_id: str
    position: int
    scale: int = Field(
        0,
        description=(
            "0: a semantic chunk; else the ensembling scale (tokens); "
            "with ensembling, start..end may span several merged chunks"
        ),
    )
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
    reason: str = Field(
        description="above_threshold, below_threshold, redundant, unscored, fallback, or retrieved (no model stages)"
    )


class ShardsModel(BaseModel):
    total: int
    successful: int
    skipped: int
    failed: int
    failures: list[dict[str, Any]] = Field(
        default_factory=list, description="the cluster's own entry for each failed shard copy (at most 10)"
    )


class AskResponse(BaseModel):
    index: str
    question: str
    rewritten_query: Optional[str]
    mode: str
    shards: ShardsModel = Field(
        description=(
            "the cluster's shard tally for the retrieval, the worst over its searches: a shard that failed "
            "(its node lost, no replica) held no candidate, so none of its chunks was judged or cited"
        )
    )
    answer: Optional[str]
    found: Optional[bool]
    citations: list[str] = Field(description="chunk ids the answer cites")
    nothing_relevant: bool
    nothing_relevant_reason: Optional[str] = Field(
        None,
        description="when nothing relevant was found, why: the gate's reading, or the best score against the "
        "threshold; the answer is then 'not found' with no model call",
    )
    gate: Optional[GateModel] = Field(None, description="with options.gate: the gate's reading of the candidates")
    threshold: Optional[ThresholdModel]
    judged_by: Optional[str] = Field(
        None,
        description=(
            "where the candidates were judged: workers, gateway (the gateway's own threads), "
            "retrieval (the retrieval signals alone); null without judging"
        ),
    )
    judged_by_reason: Optional[str] = Field(
        None, description="why judging fell back from where it was meant to run (null when it did not)"
    )
    relevance_by: Optional[str] = Field(
        None,
        description=(
            "where the project's relevance model scored the candidates (relevance: crossencoder, rerank: "
            "local): workers or gateway; absent when it did not run"
        ),
    )
    relevance_by_reason: Optional[str] = Field(
        None, description="why relevance scoring fell back from the workers to the gateway (null when it did not)"
    )
    budget_ran_out: Optional[str] = Field(
        None,
        description=(
            "the model stage the budget (budget_s) ran out in: relevance, gate, judge or rerank; the answer is "
            "then from what was decided by then; absent when the budget lasted"
        ),
    )
    budget_ran_out_reason: Optional[str] = Field(
        None, description="what each stage cut short had decided, and what stands instead (unscored chunks, ...)"
    )
    chunks: list[AskChunk] = Field(description="kept chunks in final order, then the dropped ones")
    segments: Optional[list[AskSegment]] = Field(
        None, description="with options.segments: the relevant segments, best first; the answer was written from them"
    )
    usage: UsageModel
    timings_ms: dict[str, float]


# --- errors ------------------------------------------------------------------


class ErrorCause(BaseModel):
    type: str
    reason: str


class ErrorDetail(BaseModel):
    root_cause: list[ErrorCause]
    type: str = Field(description="illegal_argument_exception, parse_exception, security_exception, ...")
    reason: str


class ElasticsearchError(BaseModel):
    """Elasticsearch's error shape: the official clients raise their usual
    exceptions on it. Errors of Elasticsearch itself pass through as they are."""

    error: ErrorDetail
    status: int


# Every status the gateway answers itself, and when. 401/403/429 come from
# the guard (not on the public paths), 408/413 from the body limit, 431 from
# the HTTP server (headers too large), the rest from the routes.
_WHY = {
    400: "an invalid body, option or header (the reason names it)",
    401: "service mode: no valid gateway API key",
    403: "an endpoint or index the caller may not reach",
    404: "no such index",
    408: "the request body did not arrive in time (CHUNKRAG_GATEWAY_BODY_TIMEOUT_S)",
    413: "the request body is over the limit (CHUNKRAG_GATEWAY_MAX_BODY_BYTES)",
    429: "the caller's rate limit, or the queue of filtered queries, is full (see Retry-After)",
    431: "the request headers are too large",
    502: "the model or embedding provider refused the call",
    503: "Elasticsearch, Redis, the model provider or the workers are unavailable",
    504: "the request did not finish within its deadline, or budget_s ran out before a stage it needs decided",
}
FILTERED_STATUSES = (400, 401, 403, 404, 408, 413, 429, 431, 502, 503, 504)
PUBLIC_STATUSES = (400, 413, 431, 503)


def error_responses(statuses: tuple[int, ...]) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ElasticsearchError, "description": _WHY[status]} for status in statuses}


# --- the body of a filtered _search --------------------------------------------

_TEXT = {"type": "string", "pattern": r"\S"}  # blank text is "no query text"


def _only(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": [key], "additionalProperties": False, "properties": {key: schema}}


def _text_query() -> dict[str, Any]:
    """The full-text queries the query text is read from (dialect.query_text)."""
    with_query = {"type": "object", "required": ["query"], "properties": {"query": _TEXT}}
    by_field = {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": {"anyOf": [_TEXT, with_query]},
    }
    return {
        "anyOf": [_only(kind, by_field if kind in ("match", "match_phrase") else with_query) for kind in TEXT_QUERIES]
    }


def search_body_schema() -> dict[str, Any]:
    """A ``_search`` body with ``ext.chunkrag``: the query text is required,
    given as ``ext.chunkrag.query`` or as a full-text query (alone or as
    ``bool.must``, with ``bool.filter`` clauses restricting both sides of the
    hybrid search). Without ext.chunkrag any Elasticsearch body passes through."""
    text = _text_query()
    boolean = _only(
        "bool",
        {
            "type": "object",
            "required": ["must"],
            "properties": {"must": text, "filter": {"type": "array", "items": {"type": "object", "minProperties": 1}}},
        },
    )
    options = {"$ref": "#/components/schemas/OptionsModel"}
    return {
        "type": "object",
        "required": ["ext"],
        "additionalProperties": False,
        "properties": {
            "query": {
                "anyOf": [*text["anyOf"], boolean],
                "description": "where the query text comes from, unless ext.chunkrag.query is given",
            },
            "size": {"type": "integer", "minimum": 0, "description": "kept hits returned at most (10)"},
            "ext": _only("chunkrag", options),
        },
        "anyOf": [
            {"required": ["query"]},
            {"properties": {"ext": _only("chunkrag", {"allOf": [options, {"required": ["query"]}]})}},
        ],
    }


def search_openapi() -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": search_body_schema()}}}}


def gateway_openapi(app) -> dict[str, Any]:
    """FastAPI's document without its 422 (the gateway answers 400 in
    Elasticsearch's shape instead)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        components = schema.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
    return app.openapi_schema
