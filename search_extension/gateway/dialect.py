"""The ``ext.chunkrag`` search dialect, as pure functions: a search body in,
typed frozen options out; an :class:`AskResult` in, an Elasticsearch-shaped
response out. Nothing here does I/O, so every rule is unit-tested with
literal values."""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.settings import DEFAULT_SCALES
from search_extension.ask import DEFAULT_CANDIDATES, AskResult
from search_extension.chunk_filter import JUDGE_TOP_WHEN_ASKED, FilterOptions
from search_extension.processors.calibration import RETRIEVAL_MODEL
from search_extension.processors.redundancy import DEFAULT_REDUNDANCY_THRESHOLD
from search_extension.processors.relevance import MAX_LISTWISE_BATCH, ScoringOptions
from search_extension.queries import MODES
from search_extension.segments import Segment, SegmentError, SegmentSettings

OPTION_KEYS = (
    "query", "rewrite", "candidates", "mode", "stages", "redundancy_threshold", "scoring", "threshold", "fixed_threshold",
    "fallback", "fallback_k", "min_score", "prior_weight", "rerank", "lost_in_the_middle", "answer", "include_dropped", "budget_s", "segments",
    "judge_top", "calibrated", "ensemble",
)
SCORING_KEYS = ("method", "critic", "reflect_band", "use_logprobs", "weights", "listwise_batch", "orders", "passages")
# ext.chunkrag.segments: true (dsRAG's balanced preset) or an object of these.
SEGMENT_KEYS = ("max_segment_chunks", "max_total_chunks", "max_total_chars", "min_segment_value", "irrelevant_chunk_penalty", "decay_rate")
# With ext.chunkrag the gateway, not Elasticsearch, answers: other body keys
# (aggs, sort, from, ...) would be silently ignored, so they are refused.
CHUNKRAG_BODY_KEYS = ("query", "size", "ext")
TEXT_QUERIES = ("match", "match_phrase", "multi_match", "query_string", "simple_query_string")
DEFAULT_SIZE = 10  # Elasticsearch's own default
# Longest judging budget a query may ask for (an hour): beyond it no caller
# waits, and larger values overflow the clock arithmetic (found by fuzzing).
MAX_BUDGET_S = 3600.0
# Largest stage weight: only their ratios matter, and huge ones overflow the sum.
MAX_WEIGHT = 1000.0


class OptionError(ValueError):
    """A search body or option the gateway cannot use; the message names it."""


@dataclass(frozen=True, slots=True)
class ChunkragOptions:
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


@dataclass(frozen=True, slots=True)
class ChunkragSearch:
    """One ``_search`` with ``ext.chunkrag``, decoded."""

    text: str
    filters: tuple[Mapping[str, Any], ...]
    size: int  # kept hits returned at most
    candidates: int  # chunks retrieved (and judged)
    options: ChunkragOptions


def chunkrag_block(body: Any) -> Any | None:
    """``body.ext.chunkrag`` when present (any value, validated later), else None."""
    if not isinstance(body, Mapping):
        return None
    ext = body.get("ext")
    if not isinstance(ext, Mapping) or "chunkrag" not in ext:
        return None
    return ext["chunkrag"]


def parse_search(body: Mapping[str, Any], *, max_candidates: int, max_query_chars: int | None = None) -> ChunkragSearch:
    for key in body:
        if key not in CHUNKRAG_BODY_KEYS:
            raise OptionError(
                f"a search with ext.chunkrag may hold only [{', '.join(CHUNKRAG_BODY_KEYS)}], got [{key}]; "
                "without ext.chunkrag the body goes to Elasticsearch unchanged"
            )
    other_ext = [key for key in body["ext"] if key != "chunkrag"]
    if other_ext:
        raise OptionError(f"ext may hold only [chunkrag] when it is present, got [{other_ext[0]}]")
    size = body.get("size", DEFAULT_SIZE)
    if not _is_int(size) or size < 0:
        raise OptionError(f"[size] must be a non-negative integer, got {size!r}")
    options = parse_options(body["ext"]["chunkrag"], max_candidates=max_candidates)
    query = body.get("query")
    text = options.query or query_text(query)
    if not text or not text.strip():
        raise OptionError(
            "no query text: set ext.chunkrag.query, or search with a "
            + ", ".join(TEXT_QUERIES)
            + " query (alone or in bool.must/should)"
        )
    _check_length(text, max_query_chars)
    return ChunkragSearch(text, query_filters(query), size, _candidates(options, size, max_candidates), options)


def parse_ask(question: str, raw_options: Any, *, max_candidates: int, max_query_chars: int | None = None) -> ChunkragSearch:
    """A ``/v1/ask`` request: the question (or ``options.query``), every kept chunk."""
    options = parse_options(raw_options, max_candidates=max_candidates, where="options")
    text = options.query or question
    if not text.strip():
        raise OptionError("the question is empty")
    _check_length(text, max_query_chars)
    return ChunkragSearch(text, (), max_candidates, _candidates(options, DEFAULT_CANDIDATES, max_candidates), options)


def _check_length(text: str, max_chars: int | None) -> None:
    # The text goes to the embedder and into every judging prompt.
    if max_chars is not None and len(text) > max_chars:
        raise OptionError(f"the query text is {len(text)} characters long; the gateway's limit is {max_chars} (CHUNKRAG_GATEWAY_MAX_QUERY_CHARS)")
    if "\x00" in text:
        raise OptionError("the query text holds a NUL character")


def _candidates(options: ChunkragOptions, size: int, max_candidates: int) -> int:
    if options.candidates is not None:
        return options.candidates
    if options.stages:
        return min(DEFAULT_CANDIDATES, max_candidates)
    # Retrieval only: as many as the hits asked for.
    return min(max(size, 1), max_candidates)


def parse_options(raw: Any, *, max_candidates: int, where: str = "ext.chunkrag") -> ChunkragOptions:
    if not isinstance(raw, Mapping):
        raise OptionError(f"{where} must be an object, got {_json_kind(raw)}")
    _refuse_unknown(raw, OPTION_KEYS, where)
    checked = _Checker(raw, where)
    candidates = checked.integer("candidates", 1, max_candidates, why=" (the gateway's max_candidates)")
    mode = checked.choice("mode", MODES)
    redundancy = DEFAULT_REDUNDANCY_THRESHOLD
    if "redundancy_threshold" in raw:
        redundancy = None if raw["redundancy_threshold"] is None else checked.number("redundancy_threshold", -1.0, 1.0)
    filter_values: dict[str, Any] = {
        "redundancy_threshold": redundancy,
        "scoring": parse_scoring(raw.get("scoring", {}), where=f"{where}.scoring"),
        "threshold": checked.string("threshold"),
        "fixed_threshold": checked.number("fixed_threshold", 0.0, 1.0),
        "fallback": checked.string("fallback"),
        "fallback_k": checked.integer("fallback_k", 1, None),
        "min_score": checked.number("min_score", 0.0, 1.0),
        "prior_weight": checked.number("prior_weight", 0.0, 1.0),
        "rerank": checked.string("rerank"),
        "lost_in_the_middle": checked.boolean("lost_in_the_middle"),
        "answer": checked.boolean("answer"),
        "judge_top": checked.integer("judge_top", 0, max_candidates),
    }
    if filter_values["judge_top"] is None and "scoring" in raw:
        # Asking how to judge asks for the judge (off by default).
        filter_values["judge_top"] = JUDGE_TOP_WHEN_ASKED
    calibrated = checked.boolean("calibrated")
    if calibrated is not None:
        # The shipped model; FilterOptions picks the one fitted for judging on or off.
        filter_values["calibration"] = RETRIEVAL_MODEL if calibrated else None
    try:
        filter_options = FilterOptions(**{k: v for k, v in filter_values.items() if v is not None or k in ("redundancy_threshold", "calibration")})
    except ValueError as exc:
        raise OptionError(f"{where}: {exc}") from None
    budget = checked.number("budget_s", 0.0, MAX_BUDGET_S)
    if budget is not None and budget <= 0:
        raise OptionError(f"{where}.budget_s must be above 0, got {budget!r}")
    query = checked.string("query")
    return ChunkragOptions(
        query=query,
        rewrite=bool(checked.boolean("rewrite")),
        candidates=candidates,
        mode=mode,
        stages=checked.boolean("stages") is not False,
        include_dropped=bool(checked.boolean("include_dropped")),
        budget_s=budget,
        filter=filter_options,
        segments=parse_segments(raw.get("segments", False), where=f"{where}.segments"),
        ensemble=parse_ensemble(raw.get("ensemble", False), where=f"{where}.ensemble"),
    )


def parse_scoring(raw: Any, *, where: str) -> ScoringOptions:
    if not isinstance(raw, Mapping):
        raise OptionError(f"{where} must be an object, got {_json_kind(raw)}")
    _refuse_unknown(raw, SCORING_KEYS, where)
    checked = _Checker(raw, where)
    values: dict[str, Any] = {
        "method": checked.string("method"),
        "critic": checked.string("critic"),
        "use_logprobs": checked.boolean("use_logprobs"),
        "reflect_band": checked.numbers("reflect_band", 2, 0.0, 1.0),
        "weights": checked.numbers("weights", 3, 0.0, MAX_WEIGHT),
        "listwise_batch": checked.integer("listwise_batch", 1, MAX_LISTWISE_BATCH),
        "orders": checked.integer("orders", 1, 2),
        "passages": checked.string("passages"),
    }
    band = values["reflect_band"]
    if band is not None and band[0] > band[1]:
        raise OptionError(f"{where}.reflect_band must be [low, high] with low <= high, got {list(band)}")
    if values["weights"] is not None and sum(values["weights"]) <= 0:
        raise OptionError(f"{where}.weights must not all be 0")
    try:
        # Unset keys keep the filter's defaults (listwise), not ScoringOptions' own.
        return dataclasses.replace(FilterOptions().scoring, **{k: v for k, v in values.items() if v is not None})
    except ValueError as exc:
        raise OptionError(f"{where}: {exc}") from None


def parse_segments(raw: Any, *, where: str) -> SegmentSettings | None:
    if raw is False or raw is None:
        return None
    if raw is True:
        return SegmentSettings()
    if not isinstance(raw, Mapping):
        raise OptionError(f"{where} must be true, false or an object, got {_json_kind(raw)}")
    _refuse_unknown(raw, SEGMENT_KEYS, where)
    checked = _Checker(raw, where)
    values = {
        "max_segment_chunks": checked.integer("max_segment_chunks", 1, None),
        "max_total_chunks": checked.integer("max_total_chunks", 1, None),
        "max_total_chars": checked.integer("max_total_chars", 1, None),
        "min_segment_value": checked.number("min_segment_value", None, None),
        "irrelevant_chunk_penalty": checked.number("irrelevant_chunk_penalty", 0.0, None),
        "decay_rate": checked.number("decay_rate", 0.0, None),
    }
    try:
        return SegmentSettings(**{k: v for k, v in values.items() if v is not None})
    except SegmentError as exc:
        raise OptionError(f"{where}: {exc}") from None


def parse_ensemble(raw: Any, *, where: str) -> tuple[int, ...] | None:
    """``true`` (the gateway's scales), ``false``, or the scales themselves
    as a list of token counts."""
    if raw is False or raw is None:
        return None
    if raw is True:
        return ()
    if not isinstance(raw, list) or not raw or not all(_is_int(v) and v >= 1 for v in raw):
        raise OptionError(f"{where} must be true, false or a non-empty list of scales in tokens (integers >= 1), got {raw!r}")
    return tuple(sorted(set(raw)))


def ensemble_scales(requested: tuple[int, ...] | None, configured: Sequence[int]) -> tuple[int, ...] | None:
    """The scales to ensemble: None (off), those asked for, or for ``true``
    the gateway's configured ones (CHUNKRAG_SCALES), else the defaults."""
    if requested is None:
        return None
    return requested or tuple(configured) or DEFAULT_SCALES


def query_text(query: Any) -> str | None:
    """The text of a full-text query on any field: match, match_phrase,
    multi_match, query_string, simple_query_string, alone or as the first
    such clause of bool.must / bool.should."""
    if not isinstance(query, Mapping) or len(query) != 1:
        return None
    (kind, clause), = query.items()
    if not isinstance(clause, Mapping):
        return None
    if kind in ("multi_match", "query_string", "simple_query_string"):
        return _text(clause.get("query"))
    if kind in ("match", "match_phrase"):
        if len(clause) != 1:
            return None
        (_field, value), = clause.items()
        return _text(value.get("query") if isinstance(value, Mapping) else value)
    if kind == "bool":
        for occur in ("must", "should"):
            for sub in _as_list(clause.get(occur)):
                if (text := query_text(sub)) is not None:
                    return text
    return None


def query_filters(query: Any) -> tuple[Mapping[str, Any], ...]:
    """The clauses that restrict, without scoring, which chunks may come back:
    bool.filter, bool.must_not (kept as one must_not clause), and bool.must
    clauses other than the query text (required either way; the filter
    judges relevance, not Elasticsearch's score)."""
    if not isinstance(query, Mapping) or not isinstance(query.get("bool"), Mapping):
        return ()
    clause = query["bool"]
    filters = list(_as_list(clause.get("filter")))
    text_clause_seen = False
    for sub in _as_list(clause.get("must")):
        if not text_clause_seen and query_text(sub) is not None:
            text_clause_seen = True
            continue
        filters.append(sub)
    must_not = _as_list(clause.get("must_not"))
    if must_not:
        filters.append({"bool": {"must_not": list(must_not)}})
    return tuple(filters)


# --- responses -------------------------------------------------------------


def search_response(result: AskResult, *, index: str, size: int, include_dropped: bool, took_ms: float) -> dict[str, Any]:
    """The Elasticsearch ``_search`` response shape: ``hits.hits`` are the
    kept chunks in final order (at most ``size``); the filter's view of the
    query is under the top-level ``chunkrag`` key. With segments asked
    for, ``hits.hits`` are the segments instead, best first."""
    if result.segments is not None:
        return _segments_response(result, index=index, size=size, took_ms=took_ms)
    ranks = _retrieval_ranks(result)
    kept = _kept_with_reasons(result)
    hits = [_hit(chunk, index, ranks, kept=True, reason=reason, stages=result.filtered is not None) for chunk, reason in kept[:size]]
    scores = [hit["_score"] for hit in hits if hit["_score"] is not None]
    section = chunkrag_section(result)
    if include_dropped:
        section["dropped"] = [_hit(chunk, index, ranks, kept=False, reason=reason, stages=True) for chunk, reason in _dropped(result)]
    return {
        "took": int(round(took_ms)),
        "timed_out": False,
        # The retriever raises on a failed shard, so every shard it asked
        # answered; it does not surface counts, so one logical search is shown.
        "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
        "hits": {"total": {"value": len(kept), "relation": "eq"}, "max_score": max(scores) if scores else None, "hits": hits},
        "chunkrag": section,
    }


def _segments_response(result: AskResult, *, index: str, size: int, took_ms: float) -> dict[str, Any]:
    hits = [segment_hit(segment, index) for segment in result.segments[:size]]
    return {
        "took": int(round(took_ms)),
        "timed_out": False,
        "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
        "hits": {"total": {"value": len(result.segments), "relation": "eq"}, "max_score": hits[0]["_score"] if hits else None, "hits": hits},
        "chunkrag": chunkrag_section(result),
    }


def segment_hit(segment: Segment, index: str) -> dict[str, Any]:
    """A segment as a hit: ``_id`` names the document and the chunk range,
    ``_source.text`` is the document text it covers (``start``..``end``)."""
    return {
        "_index": index,
        "_id": segment_id(segment),
        "_score": segment.value,
        "_source": segment_source(segment),
        "_chunkrag": {"segment": True, "chunk_ids": list(segment.chunk_ids), "span": {"start": segment.start, "end": segment.end}, "value": segment.value},
    }


def segment_id(segment: Segment) -> str:
    """``<doc_id>:<first>-<last>``, and ``@<scale>`` for a larger scale's
    chunks (ensembling), as chunk ids do."""
    suffix = f"@{segment.scale}" if segment.scale != BASE_SCALE else ""
    return f"{segment.doc_id}:{segment.first}-{segment.stop - 1}{suffix}"


def segment_source(segment: Segment) -> dict[str, Any]:
    return {
        "doc_id": segment.doc_id,
        "scale": segment.scale,
        "first_position": segment.first,
        "last_position": segment.stop - 1,
        "start": segment.start,
        "end": segment.end,
        "title": segment.title,
        "header": segment.header,
        "section": list(segment.chunks[0].section) if segment.chunks else [],
        "text": segment.text,
    }


def chunkrag_section(result: AskResult) -> dict[str, Any]:
    filtered = result.filtered
    answer = result.answer
    return {
        "query": {"original": result.question, "rewritten": result.rewrite.query if result.rewrite is not None and result.rewrite.used else None},
        "retrieval": {"mode": result.retrieval.mode, "fusion": result.retrieval.fusion, "candidates": len(result.retrieval.chunks)},
        "stages": filtered is not None,
        "threshold": threshold_dict(result),
        "nothing_relevant": filtered.nothing_relevant if filtered is not None else False,
        # Where the candidates were judged, and why not where meant to.
        "judged_by": filtered.judged_by if filtered is not None else None,
        "judged_by_reason": filtered.judged_by_reason if filtered is not None else None,
        "answer": None if answer is None else {"text": answer.text, "found": answer.found, "citations": list(answer.citations)},
        "timings_ms": dict(result.timings_ms),
        "usage": usage_dict(result),
    }


def ask_response(result: AskResult, *, index: str) -> dict[str, Any]:
    """The ``/v1/ask`` response: every retrieved chunk with its decision,
    kept ones first in final order."""
    ranks = _retrieval_ranks(result)
    chunks = [_ask_chunk(chunk, ranks, True, reason) for chunk, reason in _kept_with_reasons(result)]
    chunks += [_ask_chunk(chunk, ranks, False, reason) for chunk, reason in _dropped(result)]
    answer = result.answer
    section = chunkrag_section(result)
    return {
        "index": index,
        "question": result.question,
        "rewritten_query": section["query"]["rewritten"],
        "mode": result.retrieval.mode,
        "answer": answer.text if answer is not None else None,
        "found": answer.found if answer is not None else None,
        "citations": list(answer.citations) if answer is not None else [],
        "nothing_relevant": section["nothing_relevant"],
        "threshold": section["threshold"],
        "judged_by": section["judged_by"],
        "judged_by_reason": section["judged_by_reason"],
        "chunks": chunks,
        "segments": None if result.segments is None else [{"id": segment_id(s), "value": s.value, "chunk_ids": list(s.chunk_ids), **segment_source(s)} for s in result.segments],
        "usage": section["usage"],
        "timings_ms": section["timings_ms"],
    }


def threshold_dict(result: AskResult) -> dict[str, Any] | None:
    threshold = result.filtered.threshold if result.filtered is not None else None
    if threshold is None:
        return None
    return {"value": threshold.value, "method": threshold.method, "mean": threshold.mean, "std": threshold.std}


def usage_dict(result: AskResult) -> dict[str, int]:
    usage = result.usage
    return {"model_calls": usage.model_calls, "cached_calls": usage.cached_calls, "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}


def source_of(chunk: Chunk) -> dict[str, Any]:
    """A chunk's stored fields, without the vector (large and rarely wanted)."""
    return {
        "doc_id": chunk.doc_id,
        "position": chunk.position,
        "scale": chunk.scale,
        "start": chunk.start,
        "end": chunk.end,
        "title": chunk.title,
        "section": list(chunk.section),
        "sentence_count": chunk.sentence_count,
        "text": chunk.text,
        "metadata": dict(chunk.metadata),
    }


def _hit(chunk: Chunk, index: str, ranks: Mapping[str, int], *, kept: bool, reason: str, stages: bool) -> dict[str, Any]:
    score = chunk.stage_scores.get("combined") if stages else chunk.score
    return {
        "_index": index,
        "_id": chunk.chunk_id,
        "_score": score,
        "_source": source_of(chunk),
        "_chunkrag": {
            "retrieval_rank": ranks.get(chunk.chunk_id),
            "retrieval_score": chunk.score,
            "scores": dict(chunk.stage_scores),
            "kept": kept,
            "reason": reason,
        },
    }


def _ask_chunk(chunk: Chunk, ranks: Mapping[str, int], kept: bool, reason: str) -> dict[str, Any]:
    return {
        "id": chunk.chunk_id,
        **source_of(chunk),
        "retrieval_rank": ranks.get(chunk.chunk_id),
        "retrieval_score": chunk.score,
        "scores": dict(chunk.stage_scores),
        "kept": kept,
        "reason": reason,
    }


def _retrieval_ranks(result: AskResult) -> dict[str, int]:
    return {chunk.chunk_id: rank for rank, chunk in enumerate(result.retrieval.chunks, start=1)}


def _kept_with_reasons(result: AskResult) -> list[tuple[Chunk, str]]:
    if result.filtered is None:
        return [(chunk, "retrieved") for chunk in result.retrieval.chunks]
    reasons = {d.chunk.chunk_id: d.reason for d in result.filtered.decisions if d.kept}
    return [(chunk, reasons.get(chunk.chunk_id, "above_threshold")) for chunk in result.filtered.kept]


def _dropped(result: AskResult) -> list[tuple[Chunk, str]]:
    if result.filtered is None:
        return []
    return [(d.chunk, d.reason) for d in result.filtered.decisions if not d.kept]


# --- validation helpers ------------------------------------------------------


class _Checker:
    """Reads one option of an object, typed strictly (JSON true is not 1)."""

    def __init__(self, raw: Mapping[str, Any], where: str):
        self.raw, self.where = raw, where

    def _fail(self, key: str, wanted: str) -> OptionError:
        return OptionError(f"{self.where}.{key} must be {wanted}, got {self.raw[key]!r}")

    def boolean(self, key: str) -> bool | None:
        if key not in self.raw:
            return None
        if not isinstance(self.raw[key], bool):
            raise self._fail(key, "true or false")
        return self.raw[key]

    def string(self, key: str) -> str | None:
        if key not in self.raw:
            return None
        if not isinstance(self.raw[key], str):
            raise self._fail(key, "a string")
        return self.raw[key]

    def choice(self, key: str, allowed: Sequence[str]) -> str | None:
        value = self.string(key)
        if value is not None and value not in allowed:
            raise self._fail(key, f"one of [{', '.join(allowed)}]")
        return value

    def number(self, key: str, low: float | None, high: float | None) -> float | None:
        if key not in self.raw:
            return None
        value = self.raw[key]
        if not _is_number(value) or (low is not None and value < low) or (high is not None and value > high):
            raise self._fail(key, _range("a number", low, high))
        return float(value)

    def integer(self, key: str, low: int | None, high: int | None, why: str = "") -> int | None:
        if key not in self.raw:
            return None
        value = self.raw[key]
        if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            raise self._fail(key, _range("an integer", low, high) + why)
        return value

    def numbers(self, key: str, count: int, low: float | None, high: float | None) -> tuple[float, ...] | None:
        if key not in self.raw:
            return None
        value = self.raw[key]
        if not isinstance(value, list) or len(value) != count or not all(_is_number(v) and (low is None or v >= low) and (high is None or v <= high) for v in value):
            raise self._fail(key, f"a list of {count} " + _range("numbers", low, high))
        return tuple(float(v) for v in value)


def _refuse_unknown(raw: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise OptionError(f"unknown option [{key}] in {where}; allowed: {', '.join(allowed)}")


def _range(kind: str, low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"{kind} from {low:g} to {high:g}"
    if low is not None:
        return f"{kind} of at least {low:g}"
    return kind


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)
