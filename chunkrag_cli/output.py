"""How results are shown to a person: short, aligned, no surprises."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict
from typing import TextIO

from ingest_pipeline.pipeline import IngestReport
from ingest_pipeline.sync import SyncReport
from search_extension.retriever import RetrievalResult

_STAGES = ("base", "reflection", "critic", "combined")


def print_ingest_report(report: IngestReport, out: TextIO) -> None:
    lengths = report.chunk_lengths
    print(
        f"ingested {report.documents} documents into {report.index!r} in {report.seconds:.1f} s: "
        f"{report.sentences} sentences -> {report.chunks} chunks"
        + (f" (+ {report.scaled_chunks} at the ensembling scales)" if report.scaled_chunks else "")
        + (f", {report.unchanged} unchanged (skipped)" if report.unchanged else "")
        + (f", {report.deleted} stale chunks deleted" if report.deleted else ""),
        file=out,
    )
    if lengths.count:
        print(
            f"chunk length (chars): p10 {lengths.p10}, median {lengths.p50}, p90 {lengths.p90}, max {lengths.max}; "
            f"{lengths.sentences_per_chunk} sentences per chunk, {lengths.single_sentence_share:.0%} single-sentence",
            file=out,
        )
    if report.context_documents:
        per_document = report.context_seconds / report.context_documents
        print(
            f"document context: {report.context_calls} model calls for {report.context_documents} documents "
            f"({report.context_seconds:.1f} s, {per_document:.2f} s per document), "
            f"{report.context_cache_hits} answers from the cache, "
            f"{len(report.context_fallbacks)} fallbacks",
            file=out,
        )
    for fallback in report.context_fallbacks[:20]:
        print(f"fallback {fallback}", file=out)
    for skipped in report.skipped:
        print(f"skipped {skipped}", file=out)
    for error in report.errors[:20]:
        print(f"error {error}", file=out)
    if len(report.errors) > 20:
        print(f"… and {len(report.errors) - 20} more errors", file=out)


def ingest_report_json(report: IngestReport) -> str:
    data = asdict(report)
    data["skipped"] = [str(s) for s in report.skipped]
    return json.dumps(data, indent=2)


def print_sync_report(report: SyncReport, out: TextIO) -> None:
    how = "resumed pass" if report.resumed else "pass"
    print(
        f"synced {report.source!r} into {report.companion!r} ({how}, {report.seconds:.1f} s): "
        f"{report.read} documents read, {report.fields} text fields: {report.unchanged} unchanged, "
        f"{report.rechunked} chunked again; {report.deleted} removed; {len(report.errors)} errors",
        file=out,
        flush=True,
    )
    print(
        f"fields: {', '.join(report.text_fields)}; title: {report.title_field or '(none)'}",
        file=out,
        flush=True,
    )
    if report.restarted:
        print(f"note: {report.restarted}", file=out)
    if report.made_hidden:
        print(
            f"note: {report.companion!r} is now a hidden index: searches, counts and aggregations over a "
            "pattern no longer reach it; post-search still reads it by name",
            file=out,
        )
    for error in report.errors[:20]:
        print(f"error {error}", file=out)
    if len(report.errors) > 20:
        print(f"… and {len(report.errors) - 20} more errors", file=out)


def sync_report_json(report: SyncReport) -> str:
    return json.dumps(asdict(report))


def print_hits(query: str, result: RetrievalResult, out: TextIO, width: int = 100) -> None:
    print(f"\n> {query}   [{result.mode}, {result.fusion} fusion, {result.took_ms:.0f} ms]", file=out)
    if result.shards.failed:
        print(f"  ({shards_said(result)})", file=out)
    if not result.chunks:
        print("  (no hits)", file=out)
    for rank, chunk in enumerate(result.chunks, start=1):
        where = " > ".join(chunk.section) or chunk.title
        span = f"  chars {chunk.start}-{chunk.end}" if result.fusion == "ensemble" else ""
        print(f"  {rank:>2}. {chunk.score:8.4f}  {chunk.chunk_id}{span}  [{where}]", file=out)
        preview = textwrap.shorten(" ".join(chunk.text.split()), width=width - 8, placeholder=" …")
        print(f"      {preview}", file=out)


def print_post_search(payload: dict, out: TextIO, width: int = 100) -> None:
    """A post-search response: each hit of the search with its kept
    passages (field, offsets, score), then the answer when one was written."""
    section = payload["chunkrag"]
    counts, passages = section["hits"], section["passages"]
    print(
        f"\n> {section['query']['original']}   [post_search: {counts['returned']} hits, "
        f"{passages['kept']} of {passages['candidates']} passages kept, {passages['capped']} capped]",
        file=out,
    )
    for rank, hit in enumerate(payload["hits"]["hits"], start=1):
        marker = hit["_chunkrag"]
        score = hit.get("_score")
        shown = f"{score:8.4f}" if isinstance(score, (int, float)) else " " * 8
        note = "" if marker["kept"] else f"  ({marker.get('reason', '').replace('_', ' ')})"
        print(f"  {rank:>2}. {shown}  {hit['_index']}/{hit['_id']}{note}", file=out)
        for passage in marker["passages"]:
            preview = textwrap.shorten(" ".join(passage["text"].split()), width=width - 10, placeholder=" …")
            print(
                f"      [{passage['field']} {passage['start']}-{passage['end']}  {passage['score']:.3f}] {preview}",
                file=out,
            )
    answer = section.get("answer")
    if answer is not None:
        print(f"\n{answer['text']}", file=out)
        if answer["citations"]:
            print("  cited: " + ", ".join(answer["citations"]), file=out)


def shards_said(result: RetrievalResult) -> str:
    """A failed shard named in words: its hits are missing from the results."""
    tally = result.shards
    return (
        f"partial results: {tally.failed} of {tally.total} shards failed "
        "(a node lost with no replica?); their chunks are missing"
    )


def hits_json(result: RetrievalResult) -> str:
    return json.dumps(
        {
            "mode": result.mode,
            "fusion": result.fusion,
            "took_ms": result.took_ms,
            "_shards": result.shards.as_dict(),
            "hits": [
                {
                    "chunk_id": c.chunk_id,
                    "score": c.score,
                    "doc_id": c.doc_id,
                    "position": c.position,
                    "scale": c.scale,
                    "title": c.title,
                    "section": list(c.section),
                    "start": c.start,
                    "end": c.end,
                    "text": c.text,
                }
                for c in result.chunks
            ],
        },
        indent=2,
    )


def print_ask(result, out: TextIO, width: int = 100) -> None:
    """The filtered chunks with their per-stage scores and decisions, then the answer."""
    filtered = result.filtered
    threshold = filtered.threshold
    print(f"\n> {result.question}", file=out)
    print(
        f"  {len(result.retrieval.chunks)} retrieved ({result.retrieval.mode}), {len(filtered.kept)} kept; "
        + (
            f"threshold {threshold.value:.3f} ({threshold.method}: mean {threshold.mean:.3f}, std {threshold.std:.3f})"
            if threshold is not None
            else "no threshold"
        ),
        file=out,
    )
    if filtered.gate is not None and filtered.gate.passed:
        print(
            f"  gate ({filtered.gate.gate}): P(relevant) {filtered.gate.probability:.3f} >= {filtered.gate.cut:g}",
            file=out,
        )
    if filtered.nothing_relevant:
        print(f"  nothing relevant: {filtered.nothing_relevant_reason}", file=out)
    print(f"  {'decision':<16} " + " ".join(f"{s:>10}" for s in _STAGES) + "  chunk", file=out)
    for decision in filtered.decisions:
        scores = decision.chunk.stage_scores
        cells = " ".join(f"{scores[s]:>10.3f}" if s in scores else f"{'-':>10}" for s in _STAGES)
        mark = "kept" if decision.kept else "dropped"
        print(f"  {mark + ' ' + decision.reason:<16.16} {cells}  {decision.chunk.chunk_id}", file=out)
        print(
            f"      {textwrap.shorten(' '.join(decision.chunk.text.split()), width=width - 8, placeholder=' …')}",
            file=out,
        )
    for segment in getattr(result, "segments", None) or ():
        print(
            f"\n  segment {segment.doc_id} chunks {segment.first}..{segment.stop - 1} "
            f"(value {segment.value:.2f}, characters {segment.start}..{segment.end})",
            file=out,
        )
        print(textwrap.indent(textwrap.fill(" ".join(segment.text.split()), width=width - 6), "      "), file=out)
    if filtered.judged_by_reason:
        print(f"\n  judged by {filtered.judged_by}: {filtered.judged_by_reason}", file=out)
    if result.answer is not None:
        cited = ", ".join(result.answer.citations) or "none"
        print(f"\nanswer: {result.answer.text}\ncited: {cited}", file=out)
    usage = result.usage
    print(
        f"model calls {usage.model_calls} (+{usage.cached_calls} cached), prompt tokens {usage.prompt_tokens}; "
        + ", ".join(f"{k} {v:.0f} ms" for k, v in result.timings_ms.items()),
        file=out,
    )


def ask_json(result, index: str) -> str:
    """``chunkrag ask --json``: the gateway's ``/v1/ask`` response for the
    same result, so a script reads one shape from either: every retrieved
    chunk with its id, scores, decision and reason (kept first, in final
    order), the gate's reading when it ran, the threshold, the answer and
    the chunk ids it cites, nothing_relevant and why, usage and timings."""
    # Here, not at the top: the other commands print without the gateway's modules.
    from chunkrag_gateway.dialect import ask_response

    return json.dumps(ask_response(result, index=index), ensure_ascii=False, indent=2, default=_number)


def _number(value):
    # A model's scores can arrive as numpy scalars, which json cannot write;
    # the gateway's response model turns them into numbers the same way.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def print_gateway_search(question: str, response, out: TextIO, width: int = 100) -> None:
    """An Elasticsearch-shaped `_search` response with ext.chunkrag: the kept
    hits with their per-stage scores, the dropped ones, the answer."""
    report = response["chunkrag"]
    threshold = report.get("threshold") or {}
    print(f"\n> {question}", file=out)
    print(
        f"  {report['retrieval']['candidates']} candidates ({report['retrieval']['mode']}), "
        f"{response['hits']['total']['value']} kept; "
        + (f"threshold {threshold['value']:.3f} ({threshold['method']})" if threshold else "no threshold"),
        file=out,
    )
    if report.get("nothing_relevant"):
        print(f"  nothing relevant: {report.get('nothing_relevant_reason')}", file=out)
    print(f"  {'decision':<16} " + " ".join(f"{s:>10}" for s in _STAGES) + "  chunk", file=out)
    for hit in [*response["hits"]["hits"], *report.get("dropped", [])]:
        info = hit["_chunkrag"]
        cells = " ".join(f"{info['scores'][s]:>10.3f}" if s in info["scores"] else f"{'-':>10}" for s in _STAGES)
        mark = "kept" if info["kept"] else "dropped"
        print(f"  {mark + ' ' + info['reason']:<16.16} {cells}  {hit['_id']}", file=out)
        print(
            f"      {textwrap.shorten(' '.join(hit['_source']['text'].split()), width=width - 8, placeholder=' …')}",
            file=out,
        )
    if report.get("judged_by_reason"):
        print(f"\n  judged by {report['judged_by']}: {report['judged_by_reason']}", file=out)
    answer = report.get("answer")
    if answer:
        print(f"\nanswer: {answer['text']}\ncited: {', '.join(answer['citations']) or 'none'}", file=out)
    usage = report["usage"]
    print(
        f"model calls {usage['model_calls']} (+{usage['cached_calls']} cached), "
        f"prompt tokens {usage['prompt_tokens']}; took {response['took']} ms",
        file=out,
    )
