"""The post-search response: the cluster's own ``_search`` response with the
kept passages added to each hit, as pure functions (literal responses in,
literal responses out).

Everything the cluster said stays as it said it: ``took``, ``timed_out``,
``_shards``, ``hits.total``, ``hits.max_score``, ``aggregations``,
``suggest``, ``pit_id``, ``_scroll_id``, and in each hit ``_index``, ``_id``,
``_score``, ``_source`` (as the caller asked for it), ``fields``, ``sort``,
``inner_hits``... Added: ``_chunkrag`` and the kept passages in ``highlight``
of each hit, and the top-level ``chunkrag`` section.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from chunkrag_core.chunk import Chunk
from search_extension.post_search import HitPassages, PostSearchOptions, PostSearchResult, hits_of, score_spread


def passage_entry(chunk: Chunk, *, kept: bool, reason: str | None = None) -> dict[str, Any]:
    entry = {
        "field": chunk.metadata.get("source_field"),
        "start": chunk.start,
        "end": chunk.end,
        "text": chunk.text,
        "score": chunk.stage_scores.get("combined", chunk.score),
        "scores": dict(chunk.stage_scores),
        "kept": kept,
    }
    if reason is not None:
        entry["reason"] = reason
    return entry


def merged_highlight(cluster: Any, kept: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """An Elasticsearch ``highlight`` entry holding the kept passages. For a
    field with kept passages they come first, followed by the cluster's own
    fragments of that field (the caller's ``highlight`` request) that are
    not already among them; the cluster's other fields stay as they are."""
    merged: dict[str, list[str]] = {}
    if isinstance(cluster, Mapping):
        merged = {name: list(fragments) for name, fragments in cluster.items() if isinstance(fragments, list)}
    for name, passages in kept.items():
        if not passages:
            continue
        own = list(passages)
        merged[name] = own + [f for f in merged.get(name, []) if f not in own]
    return merged


def hit_with_passages(hit: Mapping[str, Any], found: HitPassages, include_dropped: bool) -> dict[str, Any]:
    """The cluster's hit, unchanged, plus ``_chunkrag`` and ``highlight``."""
    marker: dict[str, Any] = {
        "text": found.has_text,
        "fields": list(found.fields),
        "kept": bool(found.kept),
        "passages": [passage_entry(c, kept=True) for c in found.kept],
        "capped": found.capped,
    }
    if not found.has_text:
        marker["reason"] = "no_text"
    elif not found.kept:
        marker["reason"] = "no_kept_passage"
    if found.not_prose:
        marker["not_prose"] = dict(found.not_prose)
    if found.doc_cosine is not None:
        marker["doc_cosine"] = found.doc_cosine
    if found.threshold is not None:  # the cut this hit's own passages were filtered at
        marker["threshold"] = found.threshold.value
    if include_dropped:
        marker["dropped"] = [passage_entry(c, kept=False, reason=r) for c, r in found.dropped]
    shown = {**hit, "_chunkrag": marker}
    by_field: dict[str, list[str]] = {}
    for chunk in found.kept:
        by_field.setdefault(str(chunk.metadata.get("source_field")), []).append(chunk.text)
    highlight = merged_highlight(hit.get("highlight"), by_field)
    if highlight or "highlight" in hit:
        shown["highlight"] = highlight
    return shown


def post_search_response(
    response: Mapping[str, Any], result: PostSearchResult, options: PostSearchOptions
) -> dict[str, Any]:
    """``response`` (the cluster's) with each hit's passages, in the
    cluster's order. With ``empty_hits="drop"`` a hit that had text but no
    kept passage is left out (``hits.total`` stays the cluster's; the count
    is under ``chunkrag.hits.dropped``); a hit without text always stays,
    marked: the filter never read it."""
    raw = hits_of(response)
    shown, dropped = [], 0
    for hit, found in zip(raw, result.hits):
        if options.empty_hits == "drop" and found.has_text and not found.kept:
            dropped += 1
            continue
        shown.append(hit_with_passages(hit, found, options.include_dropped))
    hits_section = response.get("hits") if isinstance(response.get("hits"), Mapping) else {}
    return {
        **response,
        "hits": {**hits_section, "hits": shown},
        "chunkrag": chunkrag_section(result, options, dropped_hits=dropped),
    }


def chunkrag_section(result: PostSearchResult, options: PostSearchOptions, *, dropped_hits: int) -> dict[str, Any]:
    filtered, answer = result.filtered, result.answer
    kept = sum(len(h.kept) for h in result.hits)
    calls = (filtered.model_calls if filtered else 0) + (answer.calls if answer else 0)
    return {
        "mode": "post_search",
        "query": {"original": result.query},
        "stages": filtered is not None,
        "fields": {index: chosen.describe() for index, chosen in result.fields.items()},
        "hits": {
            "returned": len(result.hits),
            "without_text": sum(1 for h in result.hits if not h.has_text),
            "without_kept_passage": sum(1 for h in result.hits if h.has_text and not h.kept),
            "dropped": dropped_hits,
            "empty_hits": options.empty_hits,
        },
        "passages": {
            "candidates": result.candidates,
            "kept": kept,
            "capped": result.capped,
            "max_per_hit": options.max_passages,
        },
        "threshold": threshold_section(result),
        **(filtered.nothing_relevant_fields() if filtered is not None else {"nothing_relevant": False}),
        "judged_by": filtered.judged_by if filtered is not None else None,
        "judged_by_reason": filtered.judged_by_reason if filtered is not None else None,
        # Where the relevance model scored the passages, when it ran.
        **(filtered.relevance_fields() if filtered is not None else {}),
        # The stage the model-stage budget (budget_s) ran out in, and what stands instead, when it did.
        **(filtered.budget_fields() if filtered is not None else {}),
        "answer": None if answer is None else answer_section(answer, result),
        "timings_ms": dict(result.timings_ms),
        "usage": {
            "model_calls": calls,
            "cached_calls": filtered.cached_calls if filtered else 0,
            "prompt_tokens": (filtered.prompt_tokens if filtered else 0) + (answer.prompt_tokens if answer else 0),
            "completion_tokens": (filtered.completion_tokens if filtered else 0)
            + (answer.completion_tokens if answer else 0),
        },
    }


def threshold_section(result: PostSearchResult) -> dict[str, Any] | None:
    """The cut the hits were filtered at (each hit on its own): its value
    when every hit's is the same, else null (each hit's is its
    ``_chunkrag.threshold``); the method; the mean and spread of every
    hit's scores. None when no hit was filtered."""
    filtered = result.filtered
    cuts = [h.threshold for h in result.hits if h.threshold is not None]
    if filtered is None or not cuts:
        return None
    shared = filtered.threshold
    mean, variance = (shared.mean, shared.variance) if shared is not None else score_spread(filtered.decisions)
    return {
        "value": shared.value if shared is not None else None,
        "method": ",".join(sorted({cut.method for cut in cuts})),
        "mean": mean,
        "std": variance**0.5,
    }


def answer_section(answer, result: PostSearchResult) -> dict[str, Any]:
    """The answer, its citations as ``<index>/<_id>`` (in order of first
    citation) and each cited passage with its field and offsets."""
    where: dict[str, tuple[HitPassages, Chunk]] = {}
    for hit in result.hits:
        for chunk in hit.kept:
            where[chunk.chunk_id] = (hit, chunk)
    cited = [where[c] for c in answer.citations if c in where]
    return {
        "text": answer.text,
        "found": answer.found,
        "citations": list(dict.fromkeys(hit.ref for hit, _ in cited)),
        "passages": [
            {
                "_index": hit.index,
                "_id": hit.doc_id,
                "field": chunk.metadata.get("source_field"),
                "start": chunk.start,
                "end": chunk.end,
            }
            for hit, chunk in cited
        ],
    }
