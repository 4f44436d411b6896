"""The ``ext.chunkrag`` search dialect, as pure functions: a search body in,
typed frozen options out; an :class:`AskResult` in, an Elasticsearch-shaped
response out. Nothing here does I/O, so every rule is unit-tested with
literal values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from chunkrag_core.chunk import BASE_SCALE, Chunk
from search_extension.ask import DEFAULT_CANDIDATES, AskResult
from search_extension.cost import check_work, estimate

# The options themselves are declared, validated and resolved there; this
# module reads the rest of the body (and re-exports them for its callers).
from search_extension.options import (  # noqa: F401
    OPTION_KEYS,
    SCORING_KEYS,
    SEGMENT_KEYS,
    ChunkragOptions,
    OptionError,
    ensemble_scales,
    parse_options,
)
from search_extension.routing import CHUNK_BODY_KEYS
from search_extension.segments import Segment

# With chunk retrieval the gateway, not Elasticsearch, answers: other body
# keys (aggs, sort, from, ...) would be silently ignored, so such a body is
# post-searched (``routing.decide``), or refused with a retrieval mode.
CHUNKRAG_BODY_KEYS = CHUNK_BODY_KEYS
TEXT_QUERIES = ("match", "match_phrase", "multi_match", "query_string", "simple_query_string")
DEFAULT_SIZE = 10  # Elasticsearch's own default
# Hits one post-search splits and scores at most: its cost grows with the
# hits (every text field chunked and embedded unless cached), so a body
# asking for more is refused rather than left to run for minutes.
MAX_POST_SEARCH_HITS = 100


@dataclass(frozen=True, slots=True)
class ChunkragSearch:
    """One ``_search`` with ``ext.chunkrag``, decoded."""

    text: str
    filters: tuple[Mapping[str, Any], ...]
    size: int  # kept hits returned at most
    candidates: int  # chunks retrieved (and judged)
    options: ChunkragOptions


def parse_search(
    body: Mapping[str, Any],
    *,
    max_candidates: int,
    max_query_chars: int | None = None,
    max_budget_s: float | None = None,
    max_work: int | None = None,
    default_gate: str | None = None,
) -> ChunkragSearch:
    for key in body:
        if key not in CHUNKRAG_BODY_KEYS:
            raise OptionError(
                f"a search with ext.chunkrag may hold only [{', '.join(CHUNKRAG_BODY_KEYS)}], got [{key}]; "
                'set ext.chunkrag "mode": "post_search" (or leave mode unset) to send the body to the cluster '
                "as written and filter the passages of its hits"
            )
    other_ext = [key for key in body["ext"] if key != "chunkrag"]
    if other_ext:
        raise OptionError(f"ext may hold only [chunkrag] when it is present, got [{other_ext[0]}]")
    size = body.get("size", DEFAULT_SIZE)
    if not _is_int(size) or size < 0:
        raise OptionError(f"[size] must be a non-negative integer, got {size!r}")
    # A search client asked for hits: no answer (a model call) unless it says so.
    options = search_options(body, max_candidates=max_candidates, max_budget_s=max_budget_s, default_gate=default_gate)
    query = body.get("query")
    text = _filter_text(options, query, missing="no query text", max_query_chars=max_query_chars)
    candidates = _candidates(options, size, max_candidates)
    check_work(estimate(text, candidates), max_work)
    return ChunkragSearch(text, query_filters(query), size, candidates, options)


@dataclass(frozen=True, slots=True)
class PostSearch:
    """One ``_search`` with ``ext.chunkrag`` in post-search mode, decoded:
    the caller's body without ``ext`` (sent to the cluster as written), the
    text the filter judges with, and the options."""

    text: str
    body: Mapping[str, Any]
    options: ChunkragOptions


def _filter_text(options: ChunkragOptions, query: Any, *, missing: str, max_query_chars: int | None) -> str:
    """The text the filter judges with: ``ext.chunkrag.query``, else the
    text of the caller's query; a 400 naming what to set when neither has any."""
    text = options.query or query_text(query)
    if not text or not text.strip():
        raise OptionError(
            f"{missing}: set ext.chunkrag.query, or search with a "
            + ", ".join(TEXT_QUERIES)
            + " query (alone or in bool.must/should)"
        )
    _check_length(text, max_query_chars)
    return text


def search_options(
    body: Mapping[str, Any],
    *,
    max_candidates: int,
    max_budget_s: float | None = None,
    default_gate: str | None = None,
) -> ChunkragOptions:
    """``ext.chunkrag`` of a search body, validated and resolved
    (``default_gate``: the gateway's gate for a request naming none)."""
    return parse_options(
        body["ext"]["chunkrag"],
        max_candidates=max_candidates,
        max_budget_s=max_budget_s,
        surface="search",
        default_gate=default_gate,
    )


def parse_post_search(
    body: Mapping[str, Any],
    options: ChunkragOptions,
    *,
    max_query_chars: int | None = None,
    max_work: int | None = None,
) -> PostSearch:
    """Any search body: every key the cluster reads (aggs, highlight, sort,
    from, search_after, collapse, post_filter, _source...) goes to it; only
    ``ext`` is taken off, and it may hold only ``chunkrag``. Its work is
    estimated from the hits it asks for (``size``) and ``max_passages``."""
    other_ext = [key for key in body["ext"] if key != "chunkrag"]
    if other_ext:
        raise OptionError(f"ext may hold only [chunkrag] when it is present, got [{other_ext[0]}]")
    size = body.get("size", DEFAULT_SIZE)
    if _is_int(size) and size > MAX_POST_SEARCH_HITS:
        raise OptionError(
            f"post-search splits at most {MAX_POST_SEARCH_HITS} hits into passages, got [size] {size}; "
            "page with from/search_after instead"
        )
    text = _filter_text(
        options, body.get("query"), missing="no query text for the filter", max_query_chars=max_query_chars
    )
    hits = size if _is_int(size) and size >= 0 else DEFAULT_SIZE  # the cluster refuses another size
    check_work(estimate(text, hits, options.post_search.max_passages), max_work)
    return PostSearch(text, {key: value for key, value in body.items() if key != "ext"}, options)


def refuse_pit_with_index(body: Mapping[str, Any]) -> None:
    """A point in time names its indices itself: with an index in the path
    as well, the cluster would refuse the search; say where it goes."""
    if isinstance(body.get("pit"), Mapping):
        raise OptionError(
            "a search through a point in time names no index in the path (the PIT's id decides the indices): "
            "send it as POST /_search"
        )


def check_pit_search(body: Mapping[str, Any], options: ChunkragOptions) -> None:
    """A search with ``ext.chunkrag`` and no index in the path: it pages
    through a point in time (``pit``, whose id decides the indices), and is
    post-searched, the cluster paging its hits."""
    if not isinstance(body.get("pit"), Mapping):
        raise OptionError(
            "ext.chunkrag on a search without an index in the path needs a point in time (pit.id) to page "
            "through; name the index in the path (POST /<index>/_search) otherwise"
        )
    if options.target == "chunks":
        raise OptionError(
            "a search through a point in time is post-searched (the cluster pages its hits): "
            'set ext.chunkrag "mode": "post_search", or leave mode unset'
        )


def refuse_post_search_options(options: ChunkragOptions) -> None:
    """On a chunk index the post-search options mean nothing: refused, not ignored."""
    if options.post_search_given:
        raise OptionError(
            f"ext.chunkrag.{options.post_search_given[0]} applies to post-search only "
            '(an index that is not a chunk index, or "mode": "post_search")'
        )


def parse_ask(
    question: str,
    raw_options: Any,
    *,
    max_candidates: int,
    max_query_chars: int | None = None,
    max_budget_s: float | None = None,
    max_work: int | None = None,
    default_gate: str | None = None,
) -> ChunkragSearch:
    """A ``/v1/ask`` request: the question (or ``options.query``), every kept
    chunk. ``raw_options``: a JSON object, or the validated OptionsModel."""
    options = parse_options(
        raw_options,
        max_candidates=max_candidates,
        max_budget_s=max_budget_s,
        where="options",
        surface="ask",
        default_gate=default_gate,
    )
    if options.target == "post_search" or options.post_search_given:
        given = "mode post_search" if options.target == "post_search" else options.post_search_given[0]
        raise OptionError(
            f"options.{given}: /v1/ask searches a chunk index; post-search runs on a _search body "
            "(POST /<index>/_search with ext.chunkrag)"
        )
    text = options.query or question
    if not text.strip():
        raise OptionError("the question is empty")
    _check_length(text, max_query_chars)
    candidates = _candidates(options, DEFAULT_CANDIDATES, max_candidates)
    check_work(estimate(text, candidates), max_work)
    return ChunkragSearch(text, (), max_candidates, candidates, options)


def _check_length(text: str, max_chars: int | None) -> None:
    # The text goes to the embedder and into every judging prompt.
    if max_chars is not None and len(text) > max_chars:
        raise OptionError(
            f"the query text is {len(text)} characters long; "
            f"the gateway's limit is {max_chars} (CHUNKRAG_GATEWAY_MAX_QUERY_CHARS)"
        )
    if "\x00" in text:
        raise OptionError("the query text holds a NUL character")


def _candidates(options: ChunkragOptions, size: int, max_candidates: int) -> int:
    if options.candidates is not None:
        return options.candidates
    if options.stages:
        return min(DEFAULT_CANDIDATES, max_candidates)
    # Retrieval only: as many as the hits asked for.
    return min(max(size, 1), max_candidates)


def query_text(query: Any) -> str | None:
    """The text of a full-text query on any field: match, match_phrase,
    multi_match, query_string, simple_query_string, alone or as the first
    such clause of bool.must / bool.should, and inside the wrappers that
    keep a query's relevance (function_score's query, boosting's positive,
    dis_max's queries), as existing search bodies write them."""
    if not isinstance(query, Mapping) or len(query) != 1:
        return None
    ((kind, clause),) = query.items()
    if not isinstance(clause, Mapping):
        return None
    if kind in ("multi_match", "query_string", "simple_query_string"):
        return _text(clause.get("query"))
    if kind in ("match", "match_phrase"):
        if len(clause) != 1:
            return None
        ((_field, value),) = clause.items()
        return _text(value.get("query") if isinstance(value, Mapping) else value)
    if kind == "function_score":
        return query_text(clause.get("query"))
    if kind == "boosting":
        return query_text(clause.get("positive"))
    if kind == "dis_max":
        return next((text for sub in _as_list(clause.get("queries")) if (text := query_text(sub)) is not None), None)
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


def search_response(
    result: AskResult, *, index: str, size: int, include_dropped: bool, took_ms: float
) -> dict[str, Any]:
    """The Elasticsearch ``_search`` response shape: ``hits.hits`` are the
    kept chunks in final order (at most ``size``); the filter's view of the
    query is under the top-level ``chunkrag`` key. With segments asked
    for, ``hits.hits`` are the segments instead, best first."""
    if result.segments is not None:
        return _segments_response(result, index=index, size=size, took_ms=took_ms)
    ranks = _retrieval_ranks(result)
    kept = _kept_with_reasons(result)
    hits = [
        _hit(chunk, index, ranks, kept=True, reason=reason, stages=result.filtered is not None)
        for chunk, reason in kept[:size]
    ]
    scores = [hit["_score"] for hit in hits if hit["_score"] is not None]
    section = chunkrag_section(result)
    if include_dropped:
        section["dropped"] = [
            _hit(chunk, index, ranks, kept=False, reason=reason, stages=True) for chunk, reason in _dropped(result)
        ]
    return {
        "took": int(round(took_ms)),
        # The cluster's own tally, the worst over the searches the filter
        # made: a shard lost with its node shows here, as a direct search
        # would show it, and the hits are what the other shards held.
        "timed_out": result.retrieval.shards.timed_out,
        "_shards": result.retrieval.shards.as_dict(),
        "hits": {
            "total": {"value": len(kept), "relation": "eq"},
            "max_score": max(scores) if scores else None,
            "hits": hits,
        },
        "chunkrag": section,
    }


def _segments_response(result: AskResult, *, index: str, size: int, took_ms: float) -> dict[str, Any]:
    hits = [segment_hit(segment, index) for segment in result.segments[:size]]
    return {
        "took": int(round(took_ms)),
        "timed_out": result.retrieval.shards.timed_out,
        "_shards": result.retrieval.shards.as_dict(),
        "hits": {
            "total": {"value": len(result.segments), "relation": "eq"},
            "max_score": hits[0]["_score"] if hits else None,
            "hits": hits,
        },
        "chunkrag": chunkrag_section(result),
    }


def segment_hit(segment: Segment, index: str) -> dict[str, Any]:
    """A segment as a hit: ``_id`` names the document and the chunk range,
    ``_source.text`` is the document text it covers (``start``..``end``);
    ``_index`` is the concrete index its chunks came from (``index`` when
    they do not say)."""
    return {
        "_index": next((c.index for c in segment.chunks if c.index), index),
        "_id": segment_id(segment),
        "_score": segment.value,
        "_source": segment_source(segment),
        "_chunkrag": {
            "segment": True,
            "chunk_ids": list(segment.chunk_ids),
            "span": {"start": segment.start, "end": segment.end},
            "value": segment.value,
        },
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
        "query": {
            "original": result.question,
            "rewritten": result.rewrite.query if result.rewrite is not None and result.rewrite.used else None,
        },
        "retrieval": {
            "mode": result.retrieval.mode,
            "fusion": result.retrieval.fusion,
            "candidates": len(result.retrieval.chunks),
        },
        "stages": filtered is not None,
        "threshold": threshold_dict(result),
        # Whether nothing relevant was found, why, and the gate's reading when it ran.
        **(filtered.nothing_relevant_fields() if filtered is not None else {"nothing_relevant": False}),
        # Where the candidates were judged, and why not where meant to.
        "judged_by": filtered.judged_by if filtered is not None else None,
        "judged_by_reason": filtered.judged_by_reason if filtered is not None else None,
        # Where the relevance model scored the candidates, when it ran.
        **(filtered.relevance_fields() if filtered is not None else {}),
        # The stage the model-stage budget (budget_s) ran out in, and what stands instead, when it did.
        **(filtered.budget_fields() if filtered is not None else {}),
        "answer": None
        if answer is None
        else {"text": answer.text, "found": answer.found, "citations": list(answer.citations)},
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
        # As `_shards` in a search response: a shard that failed held no
        # candidate, so none of its chunks was judged or cited.
        "shards": result.retrieval.shards.as_dict(),
        "answer": answer.text if answer is not None else None,
        "found": answer.found if answer is not None else None,
        "citations": list(answer.citations) if answer is not None else [],
        **{key: section[key] for key in ("nothing_relevant", "nothing_relevant_reason", "gate") if key in section},
        "threshold": section["threshold"],
        "judged_by": section["judged_by"],
        "judged_by_reason": section["judged_by_reason"],
        **{key: section[key] for key in ("relevance_by", "relevance_by_reason") if key in section},
        **{key: section[key] for key in ("budget_ran_out", "budget_ran_out_reason") if key in section},
        "chunks": chunks,
        "segments": None
        if result.segments is None
        else [
            {"id": segment_id(s), "value": s.value, "chunk_ids": list(s.chunk_ids), **segment_source(s)}
            for s in result.segments
        ],
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
    return {
        "model_calls": usage.model_calls,
        "cached_calls": usage.cached_calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
    }


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


def _hit(
    chunk: Chunk, index: str, ranks: Mapping[str, int], *, kept: bool, reason: str, stages: bool
) -> dict[str, Any]:
    score = chunk.stage_scores.get("combined") if stages else chunk.score
    return {
        # The concrete index the cluster answered the chunk from (the path may
        # name an expression); ``index`` for a chunk that does not say.
        "_index": chunk.index or index,
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
