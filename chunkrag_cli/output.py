"""How results are shown to a person: short, aligned, no surprises."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict
from typing import TextIO

from ingest_pipeline.pipeline import IngestReport
from search_extension.retriever import RetrievalResult


def print_ingest_report(report: IngestReport, out: TextIO) -> None:
    lengths = report.chunk_lengths
    print(
        f"ingested {report.documents} documents into {report.index!r} in {report.seconds:.1f} s: "
        f"{report.sentences} sentences -> {report.chunks} chunks"
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


def print_hits(query: str, result: RetrievalResult, out: TextIO, width: int = 100) -> None:
    print(f"\n> {query}   [{result.mode}, {result.fusion} fusion, {result.took_ms:.0f} ms]", file=out)
    if not result.chunks:
        print("  (no hits)", file=out)
    for rank, chunk in enumerate(result.chunks, start=1):
        where = " > ".join(chunk.section) or chunk.title
        print(f"  {rank:>2}. {chunk.score:8.4f}  {chunk.chunk_id}  [{where}]", file=out)
        preview = textwrap.shorten(" ".join(chunk.text.split()), width=width - 8, placeholder=" …")
        print(f"      {preview}", file=out)


def hits_json(result: RetrievalResult) -> str:
    return json.dumps(
        {
            "mode": result.mode,
            "fusion": result.fusion,
            "took_ms": result.took_ms,
            "hits": [
                {
                    "chunk_id": c.chunk_id,
                    "score": c.score,
                    "doc_id": c.doc_id,
                    "position": c.position,
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
