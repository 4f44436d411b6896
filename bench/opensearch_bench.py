"""SciFact on OpenSearch beside Elasticsearch, from one run on one machine.

    python -m bench.opensearch_bench [--runs 3] [--write-runs 2]

The corpus is chunked and embedded ONCE (the real chunker, the packaged
MiniLM; about 7.5 minutes of both cores, cached under CHUNKRAG_HOME so a
second run skips it), and the same chunks with the same vectors are written
to both engines through the backend seam. So quality differences come from
the engines alone (BM25 scoring, HNSW graphs) and write throughput is the
engines' own (bulk writes with refresh paused, as the ingest pipeline does,
ending with a refresh; the embedding, identical for both, is left out).

Latency runs interleave the engines (mode by mode, engine order alternating
per run) so a slow spell of the shared machine hits both alike. Quality and
latency follow bench.retrieval_bench: 300 validation queries, chunks
collapsed to the best chunk per document, nDCG@10 and recall@100 over
documents, p50/p95 of the engine part of one search (request, response,
client-side fusion; the query embedding is done once per query up front).
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import statistics
import sys
import time
from pathlib import Path

from bench.common import median, write_result
from bench.ingest_bench import CORPUS, scifact_documents
from bench.metrics import ndcg_at_k, percentile, recall_at_k
from bench.retrieval_bench import DEPTH, MODES, load_queries
from chunkrag_core.engines import ENGINES

INDEX = "bench-scifact-engines"
# Goals set before the run (bench/REPORT.md): the same quality, p50 within 1.25x, writes within 10%.
NDCG_TOLERANCE = 0.005
P50_RATIO_GOAL = 1.25
WRITE_RATIO_GOAL = 0.9


class MemoEmbedder:
    """Embeds each query once; the timed searches then cost no embedding."""

    def __init__(self, inner):
        self.inner, self.cache = inner, {}

    def embed(self, texts):
        missing = [t for t in texts if t not in self.cache]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing)):
                self.cache[text] = vector
        return [self.cache[t] for t in texts]


def embedded_corpus(settings, cache: Path, limit: int | None = None):
    """SciFact as (chunk id, _source without the vector, vector) for every
    chunk the real chunker makes, embedded once and cached."""
    import numpy as np

    from chunkrag_core.engines import schema
    from chunkrag_core.providers import make_embedder
    from ingest_pipeline.chunker import chunk_documents

    if cache.is_file():
        with cache.open("rb") as handle:
            return pickle.load(handle), None
    documents = scifact_documents(limit)
    shaping = f"{settings.chunking}|{settings.embedder.provider}:{settings.embedder.model}"
    began = time.perf_counter()
    chunked = chunk_documents(documents, make_embedder(settings.embedder), settings.chunking, shaping)
    seconds = round(time.perf_counter() - began, 1)
    rows = []
    for item in chunked:
        for chunk in item.chunks:
            source = schema.chunk_to_source(chunk, fingerprint=item.fingerprint, doc_chunk_count=len(item.chunks))
            vector = np.asarray(source.pop(schema.VECTOR), dtype=np.float32)
            rows.append((chunk.chunk_id, source, vector))
    chunked = rows
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial")
    with partial.open("wb") as handle:
        pickle.dump(chunked, handle, protocol=pickle.HIGHEST_PROTOCOL)
    partial.replace(cache)  # a killed run never leaves a truncated cache
    return chunked, seconds


def write_all(backend, chunked, settings, index: str) -> dict:
    """A fresh index holding every chunk, written as the pipeline writes."""
    from ingest_pipeline.writer import bulk_write, ensure_index

    backend.delete_index(index)
    ensure_index(
        backend, index, dims=settings.embedder.dims, vectors=settings.vector_index, capabilities=backend.capabilities()
    )
    began = time.perf_counter()
    backend.set_refresh_interval(index, "-1")
    # What document_actions yields for a document not yet stored.
    actions = (
        {"_op_type": "index", "_index": index, "_id": chunk_id, "_source": {**source, "vector": vector.tolist()}}
        for chunk_id, source, vector in chunked
    )
    outcome = bulk_write(backend, actions)
    backend.set_refresh_interval(index, None)
    backend.refresh(index)
    seconds = time.perf_counter() - began
    if outcome.errors:
        raise RuntimeError(f"{backend.engine}: {len(outcome.errors)} write errors, first: {outcome.errors[0]}")
    return {
        "chunks": outcome.indexed,
        "seconds": round(seconds, 2),
        "chunks_per_s": round(outcome.indexed / seconds, 1),
    }


def main(argv=None) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings, state_home
    from search_extension.retriever import HybridRetriever

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3, help="latency runs over all queries and modes")
    parser.add_argument("--write-runs", type=int, default=2, help="full write runs per engine")
    parser.add_argument("--index", default=INDEX)
    parser.add_argument("--name", default="retrieval_opensearch")
    parser.add_argument("--limit", type=int, help="first N documents only (a quick look; results named accordingly)")
    args = parser.parse_args(argv)
    if args.limit:
        args.name, args.index = f"{args.name}_first_{args.limit}", f"{args.index}-first-{args.limit}"

    settings = Settings.from_env()
    backends = {engine: make_backend(dataclasses.replace(settings, search_backend=engine)) for engine in ENGINES}
    for backend in backends.values():
        backend.health()

    cache = state_home() / "bench-cache" / f"scifact-chunks{'-first-%d' % args.limit if args.limit else ''}.pkl"
    chunked, embed_seconds = embedded_corpus(settings, cache, args.limit)
    chunk_count = len(chunked)
    print(
        f"{len({source['doc_id'] for _, source, _ in chunked})} documents, {chunk_count} chunks"
        + (f" (embedded in {embed_seconds} s)" if embed_seconds else " (from cache)"),
        file=sys.stderr,
    )

    writes = {engine: [] for engine in ENGINES}
    for run in range(args.write_runs):
        for engine in ENGINES if run % 2 == 0 else reversed(ENGINES):
            writes[engine].append(write_all(backends[engine], chunked, settings, args.index))
            print(f"write run {run + 1} {engine}: {writes[engine][-1]}", file=sys.stderr)
    for engine, backend in backends.items():
        assert backend.count(args.index) == chunk_count, engine

    queries, qrels = load_queries()
    embedder = MemoEmbedder(make_embedder(settings.embedder))
    embedder.embed(list(queries.values()))
    retrievers = {
        engine: HybridRetriever(backend, embedder, args.index, settings.retrieval)
        for engine, backend in backends.items()
    }
    for retriever in retrievers.values():
        for text in list(queries.values())[:30]:  # warm caches alike
            retriever.search(text, size=10)

    took = {(engine, mode): [] for engine in ENGINES for mode in MODES}
    quality, fusion = {}, {}
    for run in range(args.runs):
        for mode in MODES:
            for engine in ENGINES if run % 2 == 0 else reversed(ENGINES):
                times, ndcgs, recalls = [], [], []
                for qid, text in queries.items():
                    result = retrievers[engine].search(text, mode=mode, size=DEPTH, collapse_field="doc_id")
                    times.append(result.took_ms)
                    ranked = [chunk.doc_id for chunk in result.chunks]
                    ndcgs.append(ndcg_at_k(ranked, qrels[qid], 10))
                    recalls.append(recall_at_k(ranked, qrels[qid], DEPTH))
                took[engine, mode].append((percentile(times, 0.5), percentile(times, 0.95)))
                quality[engine, mode] = (statistics.mean(ndcgs), statistics.mean(recalls))
                fusion[engine, mode] = result.fusion
        print(f"latency run {run + 1} done", file=sys.stderr)

    modes = {}
    for mode in MODES:
        row = {}
        for engine in ENGINES:
            ndcg, recall = quality[engine, mode]
            row[engine] = {
                "ndcg_at_10": round(ndcg, 4),
                "recall_at_100": round(recall, 4),
                "p50_ms": median([p50 for p50, _ in took[engine, mode]]),
                "p95_ms": median([p95 for _, p95 in took[engine, mode]]),
                "fusion": fusion[engine, mode],
            }
        os_row, es_row = row["opensearch"], row["elasticsearch"]
        row["ndcg_difference"] = round(os_row["ndcg_at_10"] - es_row["ndcg_at_10"], 4)
        row["p50_ratio"] = round(os_row["p50_ms"] / es_row["p50_ms"], 3)
        row["meets_goals"] = abs(row["ndcg_difference"]) <= NDCG_TOLERANCE and row["p50_ratio"] <= P50_RATIO_GOAL
        modes[mode] = row
        print(
            f"{mode:>10}: ES nDCG {es_row['ndcg_at_10']:.4f} p50 {es_row['p50_ms']} | OS nDCG "
            f"{os_row['ndcg_at_10']:.4f} p50 {os_row['p50_ms']}",
            file=sys.stderr,
        )

    write_rates = {engine: median([w["chunks_per_s"] for w in writes[engine]]) for engine in ENGINES}
    payload = {
        "corpus": str(CORPUS.name),
        "index": args.index,
        "chunks": chunk_count,
        "queries": len(queries),
        "runs": args.runs,
        "depth": DEPTH,
        "engines": {
            engine: {"version": backends[engine].capabilities().version, "url": backends[engine].display_url}
            for engine in ENGINES
        },
        "embedded_once_seconds": embed_seconds,
        "latency_note": (
            "p50/p95 of the engine part of one search (request, response, client-side fusion), median over runs "
            "interleaved by mode and engine; queries embedded once up front"
        ),
        "modes": modes,
        "writes": {
            "note": (
                "the same pre-embedded chunks bulk-written into a fresh index with refresh paused, then one refresh "
                "(the ingest pipeline's write path without the embedding, which is identical on both)"
            ),
            "chunks_per_s": write_rates,
            "opensearch_over_elasticsearch": round(write_rates["opensearch"] / write_rates["elasticsearch"], 3),
            "per_run": writes,
        },
        "goals": {
            "ndcg_within": NDCG_TOLERANCE,
            "p50_ratio_at_most": P50_RATIO_GOAL,
            "write_ratio_at_least": WRITE_RATIO_GOAL,
            "all_modes_meet_quality_and_latency": all(row["meets_goals"] for row in modes.values()),
            "writes_meet": write_rates["opensearch"] / write_rates["elasticsearch"] >= WRITE_RATIO_GOAL,
        },
    }
    print(write_result(args.name, "bench.opensearch_bench", payload))
    for backend in backends.values():
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
