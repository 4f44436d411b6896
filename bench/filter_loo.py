"""The filter fitted and judged across datasets: leave one dataset out.

    python -m bench.filter_loo build            # index, retrieve, features (cached)
    python -m bench.filter_loo run              # fit, hold out each set, curves, results

``build`` indexes every labelled set of ``shared/eval`` (chunkrag_eval/
labelled.py) with the real ingest pipeline (one index per set,
``chunkrag-loo-<set>``), searches each question with the hybrid query
restricted to its pool (the best 64 candidates, as ``chunkrag eval``), drops
near-duplicates as the filter does, and records per candidate the signals
the filter has at query time (cosine, BM25 and kNN normalised over the
hits, hybrid rank, length: from the search, as the gateway gets them) and
the context features (chunkrag_filter/processors/features.py), with the
chunk's gold label. One JSON line per question under ``--cache``.

``run`` replays everything from the cache (no model call).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.common import SHARED

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "filter_loo"
# Questions per set (a fixed-seed sample; seed 7): the machine has two
# shared cores, so the big sets are subsampled. None: every question.
COUNTS = {
    "popqa": None,  # all 200
    "nq": 300,
    "squad": 300,  # and 150 unanswerable
    "scifact": None,  # the 188 claims with rationale sentences
    "wikiqa": None,  # all 126 (questions without a correct sentence included)
    "healthver": 250,
    "climate_fever": 300,
}
CANDIDATES = 64


def build(names: list[str], cache: Path) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.engines.schema import DOC_ID
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.labelled import read_labelled, unique_docs
    from chunkrag_filter.processors.redundancy import drop_redundant
    from ingest_pipeline.pipeline import ingest_documents
    from ingest_pipeline.sources import plain_document
    from search_extension.retriever import HybridRetriever

    settings = Settings.from_env()
    client = make_backend(settings)
    embedder = make_embedder(settings.embedder)
    cache.mkdir(parents=True, exist_ok=True)
    for name in names:
        started = time.perf_counter()
        queries = read_labelled(name, SHARED / "eval", COUNTS.get(name), seed=7)
        docs = unique_docs(queries)
        index = f"chunkrag-loo-{name}"
        report = ingest_documents(
            (plain_document(d.doc_id, d.text, f"{name}:{d.doc_id}", title=d.title) for d in docs),
            client=client,
            embedder=embedder,
            settings=settings,
            index=index,
            progress=False,
        )
        if not report.ok:
            raise RuntimeError(f"indexing {name} failed: {report.errors[:3]}")
        ingested = time.perf_counter() - started
        retriever = HybridRetriever(client, embedder, index, settings.retrieval)
        path = cache / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for query in queries:
                pool = [{"terms": {DOC_ID: [d.doc_id for d in query.docs]}}]
                found = retriever.search(query.question, size=CANDIDATES, filters=pool, include_vectors=True)
                kept, redundant = drop_redundant(list(found.chunks), 0.9)
                record = {
                    "dataset": name,
                    "query_id": query.query_id,
                    "question": query.question,
                    "answerable": query.answerable,
                    "rows": candidate_rows(query, kept),
                    "redundant": [{"chars": len(r.chunk.text), "gold": query.gold(r.chunk.text)} for r in redundant],
                }
                out.write(json.dumps(record) + "\n")
        print(
            f"{name}: {len(queries)} questions, {len(docs)} documents, {report.chunks} chunks; "
            f"indexed in {ingested:.0f} s, total {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
    return 0


def candidate_rows(query, chunks) -> list[dict]:
    """Per candidate (after redundancy, in retrieval order): every feature
    the filter can compute at query time, the text and the gold label."""
    from chunkrag_filter.processors.calibration import chunk_features
    from chunkrag_filter.processors.features import context_features

    base = chunk_features([c.stage_scores for c in chunks], [None] * len(chunks), [len(c.text) for c in chunks])
    context = context_features(
        query.question,
        [c.text for c in chunks],
        [c.header for c in chunks],
        [c.doc_id for c in chunks],
        [c.position for c in chunks],
        [c.lead for c in chunks],
        [c.stage_scores for c in chunks],
    )
    rows = []
    for rank, (chunk, b, x) in enumerate(zip(chunks, base, context)):
        rows.append(
            {
                "rank": rank,
                "doc_id": chunk.doc_id,
                "position": chunk.position,
                "chars": len(chunk.text),
                "text": chunk.text,
                "gold": query.gold(chunk.text),
                "knn": round(float(chunk.stage_scores.get("knn", 0.0)), 6),
                "retrieval": chunk.score,
                **{k: round(float(v), 6) for k, v in b.items() if k not in ("judge", "judged", "judge_top")},
                **{k: round(float(v), 6) for k, v in x.items()},
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.filter_loo")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("sets", nargs="*", default=list(COUNTS))
    b.add_argument("--cache", type=Path, default=CACHE)
    r = sub.add_parser("run")
    r.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args(argv)
    if args.command == "build":
        return build(args.sets, args.cache)
    from bench.filter_loo_run import run

    return run(args.cache)


if __name__ == "__main__":
    sys.exit(main())
