"""SciFact retrieval quality and latency for every retrieval mode.

    python -m bench.retrieval_bench [--runs 3] [--limit N] [--index NAME --name NAME]
    python -m bench.retrieval_bench --name retrieval_rerank --rerank local --rerank-top 40

``--rerank local``: the default mode beside itself with its best ``--rerank-top``
chunks re-ordered by the relevance model (chunkrag_eval/reranked_retrieval.py).
``--index``: an index ingested with other chunking settings (``bench.ingest_bench
--name ... --index ...``), measured into a results file of its own (``--name``).

Needs the `bench-scifact` index that `bench.ingest_bench` leaves behind (or
builds it). The qrels judge documents, so each mode retrieves chunks
collapsed to the best chunk per document (top 100 documents) and documents
are ranked by that best chunk.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict

from bench.common import SHARED, kept_sections, median, write_result
from bench.metrics import ndcg_at_k, percentile, recall_at_k

BEIR = SHARED / "eval" / "scifact" / "beir_derived"
INDEX = "bench-scifact"
MODES = ("bm25", "knn", "native_sum", "minmax", "rrf")
DEPTH = 100


def load_queries(limit: int | None = None):
    queries = {}
    for line in (BEIR / "queries_validation.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        queries[record["_id"]] = record["text"]
    qrels = defaultdict(set)
    with (BEIR / "qrels_validation_cited.tsv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels[row["query-id"]].add(row["corpus-id"])
    judged = [(qid, text) for qid, text in queries.items() if qid in qrels]
    return dict(judged[:limit]), qrels


def main(argv=None) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from search_extension.retriever import HybridRetriever

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--index", default=INDEX)
    parser.add_argument("--name", default="retrieval", help="results file name (bench/results/NAME.json)")
    parser.add_argument("--limit", type=int, help="first N queries only (a quick check; with --name, not to overwrite)")
    parser.add_argument("--rerank", choices=["local"], help="also the default mode with the rerank stage on")
    parser.add_argument("--rerank-top", type=int, default=40, help="chunks the rerank stage reorders")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    client = make_backend(settings)
    if not client.index_exists(args.index):
        print(f"index {args.index!r} missing: run `python -m bench.ingest_bench` first", file=sys.stderr)
        return 1
    chunk_count = client.count(args.index)
    queries, qrels = load_queries(args.limit)
    retriever = HybridRetriever(client, make_embedder(settings.embedder), args.index, settings.retrieval)
    retriever.search("warm up", size=10)

    results, modes, embed_ms = {}, MODES, []
    if args.rerank:  # the default mode, plain and reranked, on the same index in the same run
        from chunkrag_core.providers.local_relevance import LocalRelevanceModel
        from chunkrag_eval.reranked_retrieval import reranked_search

        reranker, rerank_ms = LocalRelevanceModel().load(), []
        modes = (settings.retrieval.mode, f"{settings.retrieval.mode}_rerank_{args.rerank}")
    for mode in modes:
        per_run_p50, per_run_p95 = [], []
        ndcg = recall = 0.0
        for run in range(args.runs):
            took, ndcgs, recalls = [], [], []
            for qid, text in queries.items():
                if "_rerank_" in mode:
                    found = reranked_search(retriever, reranker, text, top=args.rerank_top, depth=DEPTH)
                    took.append(found.search_ms)
                    rerank_ms.append(found.rerank_ms)
                    ranked = found.documents
                else:
                    result = retriever.search(text, mode=mode, size=DEPTH, collapse_field="doc_id")
                    took.append(result.took_ms)
                    embed_ms.append(result.embed_ms)
                    ranked = [chunk.doc_id for chunk in result.chunks]
                ndcgs.append(ndcg_at_k(ranked, qrels[qid], 10))
                recalls.append(recall_at_k(ranked, qrels[qid], DEPTH))
            per_run_p50.append(percentile(took, 0.5))
            per_run_p95.append(percentile(took, 0.95))
            ndcg, recall = statistics.mean(ndcgs), statistics.mean(recalls)  # identical every run
        results[mode] = {
            "ndcg_at_10": round(ndcg, 4),
            "recall_at_100": round(recall, 4),
            "p50_ms": median(per_run_p50),
            "p95_ms": median(per_run_p95),
            "fusion": result.fusion,
        }
        print(
            f"{mode:>10}: nDCG@10 {ndcg:.4f}  R@100 {recall:.4f}  p50 {results[mode]['p50_ms']} ms  p95 "
            f"{results[mode]['p95_ms']} ms",
            file=sys.stderr,
        )
    if args.rerank:  # p50/p95_ms: the search for the chunks reranked; the relevance model's time apart
        rerank = {"rerank_top": args.rerank_top, "rerank_p50_ms": round(percentile(rerank_ms, 0.5), 1)}
        rerank["rerank_p95_ms"] = round(percentile(rerank_ms, 0.95), 1)
        results[modes[1]].update(rerank, fusion=f"{results[modes[0]]['fusion']}, then reranked")
        print(f"{modes[1]}: {rerank}", file=sys.stderr)

    hybrids = [m for m in ("native_sum", "minmax", "rrf") if m in results]
    best_hybrid = max(hybrids, key=lambda m: results[m]["ndcg_at_10"])
    payload = {
        "index": args.index,
        "chunks": chunk_count,
        "queries": len(queries),
        "runs": args.runs,
        "depth": DEPTH,
        "latency_note": (
            "p50/p95 of the Elasticsearch part of one search (request, response, client-side fusion), median over "
            "runs; query embedding excluded and reported as embed_p50_ms"
        ),
        "embed_p50_ms": round(percentile(embed_ms, 0.5), 2),
        "modes": results,
        "best_hybrid": best_hybrid,
        "best_hybrid_beats_both_single_modes": results[best_hybrid]["ndcg_at_10"]
        > max(results[m]["ndcg_at_10"] for m in ("bm25", "knn") if m in results)
        if not args.rerank
        else None,
    }
    # The rows of the chunking variants (variant_NAME: runs of an option since retired) stay beside the new ones.
    kept = kept_sections(args.name, lambda key: key == "variants" or key.startswith("variant_"))
    print(write_result(args.name, "bench.retrieval_bench", {**payload, **kept}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
