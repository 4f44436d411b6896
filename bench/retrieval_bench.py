"""SciFact retrieval quality and latency for every retrieval mode.

    python -m bench.retrieval_bench [--runs 3] [--limit N]
    python -m bench.retrieval_bench --ensemble [--scales 128,512,2000]   # the ensembling row only
    python -m bench.retrieval_bench --index bench-scifact-title --variant headers_title   # a variant's rows

With ``--variant NAME`` every mode is measured on ``--index`` (ingested
with other chunking settings, e.g. by ``bench.ingest_bench --name ...``)
and the rows go under ``variants.NAME`` of the results file, beside the
baseline rows already there.

Needs the `bench-scifact` index that `bench.ingest_bench` leaves behind (or
builds it). The qrels judge documents, so each mode retrieves chunks
collapsed to the best chunk per document (top 100 documents) and documents
are ranked by that best chunk.

With ``--ensemble`` only the multi-scale ensembling row is measured and
added to the results file beside the rows already there: SciFact indexed
(in ``bench-scifact-ensemble``, built when missing) at the base scale and
at ``--scales``, each query one ensemble search (every scale in one
_msearch, min-max per scale, de-duplicated by span) for DEPTH spans, and
documents ranked by their first span.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict

from bench.common import SHARED, median, merge_result, parse_scale_weights, weights_suffix, write_result
from bench.metrics import ndcg_at_k, percentile, recall_at_k
from search_extension.queries import DEFAULT_TEXT_FIELDS

BEIR = SHARED / "eval" / "scifact" / "beir_derived"
INDEX = "bench-scifact"
ENSEMBLE_INDEX = "bench-scifact-ensemble"
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


def ensemble_main(args) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings, parse_scales
    from search_extension.retriever import HybridRetriever

    settings = Settings.from_env()
    scales = parse_scales(args.scales)
    client = make_backend(settings)
    embedder = make_embedder(settings.embedder)
    queries, qrels = load_queries(args.limit)
    ingest = None
    if not client.index_exists(args.ensemble_index):
        # A quick check still finds something: the queries' judged documents come along.
        wanted = {doc for qid in queries for doc in qrels[qid]}
        ingest = build_ensemble_index(
            client, embedder, settings, args.ensemble_index, scales, args.corpus_limit, wanted
        )
    retriever = HybridRetriever(client, embedder, args.ensemble_index, settings.retrieval)
    weights = parse_scale_weights(args.scale_weights)
    retriever.search_ensemble("warm up", scales=scales, size=10)
    per_run_p50, per_run_p95, embed_ms = [], [], []
    for run in range(args.runs):
        took, ndcgs, recalls = [], [], []
        for qid, text in queries.items():
            result = retriever.search_ensemble(text, scales=scales, size=DEPTH, weights=weights)
            took.append(result.took_ms)
            embed_ms.append(result.embed_ms)
            ranked = list(dict.fromkeys(chunk.doc_id for chunk in result.chunks))
            ndcgs.append(ndcg_at_k(ranked, qrels[qid], 10))
            recalls.append(recall_at_k(ranked, qrels[qid], DEPTH))
        per_run_p50.append(percentile(took, 0.5))
        per_run_p95.append(percentile(took, 0.95))
    row = {
        "ndcg_at_10": round(statistics.mean(ndcgs), 4),
        "recall_at_100": round(statistics.mean(recalls), 4),
        "p50_ms": median(per_run_p50),
        "p95_ms": median(per_run_p95),
        "fusion": "ensemble",
    }
    name = f"ensembling{weights_suffix(weights)}"
    print(
        f"{name}: nDCG@10 {row['ndcg_at_10']:.4f}  R@100 {row['recall_at_100']:.4f}  p50 {row['p50_ms']} ms  p95 "
        f"{row['p95_ms']} ms",
        file=sys.stderr,
    )
    print(
        merge_result(
            args.name,
            "bench.retrieval_bench",
            name,
            {
                "index": args.ensemble_index,
                "chunks_by_scale": chunks_by_scale(client, args.ensemble_index),
                "scales_tokens": list(scales),
                "scale_weights": weights or "1 each",
                "queries": len(queries),
                "runs": args.runs,
                "how": (
                    "one ensemble search per query: the base chunks and each scale, BM25 + kNN "
                    f"({settings.retrieval.mode}) per scale in one _msearch, min-max per scale, fused, de-duplicated "
                    f"by span; {DEPTH} spans, documents ranked by their first span (recall@100 over at most {DEPTH} "
                    "spans, so over fewer documents when one document holds several)"
                ),
                "latency_note": (
                    "p50/p95 of the engine part of one ensemble search (the one _msearch, fusion, de-duplication), "
                    "median over runs; query embedding excluded"
                ),
                "embed_p50_ms": round(percentile(embed_ms, 0.5), 2),
                "ingest": ingest,
            },
            "modes",
            {name: row},
        )
    )
    return 0


def build_ensemble_index(
    client, embedder, settings, index: str, scales, corpus_limit: int | None, wanted=frozenset()
) -> dict:
    """SciFact ingested at the base scale and at ``scales``; the ingest
    figures (this is the ensembling ingest-throughput measurement). With
    ``corpus_limit``, the first that many documents and those in ``wanted``."""
    import dataclasses

    from bench.ingest_bench import scifact_documents
    from ingest_pipeline.pipeline import ingest_documents

    scaled = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=scales))
    documents = scifact_documents(None)
    if corpus_limit is not None:
        documents = [d for i, d in enumerate(documents) if i < corpus_limit or d.doc_id in wanted]
    report = ingest_documents(documents, client=client, embedder=embedder, settings=scaled, index=index, progress=False)
    if not report.ok:
        raise RuntimeError(report.errors[:3])
    return {
        "documents": report.documents,
        "sentences": report.sentences,
        "chunks": report.chunks,
        "scaled_chunks": report.scaled_chunks,
        "seconds": report.seconds,
        "sentences_per_s": round(report.sentences / report.seconds, 1) if report.seconds else None,
    }


def chunks_by_scale(client, index: str) -> dict[str, int]:
    response = client.search(
        index, {"size": 0, "aggs": {"scales": {"terms": {"field": "scale", "missing": 0, "size": 32}}}}
    )
    return {str(b["key"]): b["doc_count"] for b in response["aggregations"]["scales"]["buckets"]}


def main(argv=None) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from search_extension.retriever import HybridRetriever

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--index", default=INDEX)
    parser.add_argument("--name", default="retrieval", help="results file name (bench/results/NAME.json)")
    parser.add_argument(
        "--limit",
        type=int,
        help="first N queries only (a quick check; with --name, so the results file is not overwritten)",
    )
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help="only the multi-scale ensembling row, added to the results file beside the rows already there",
    )
    parser.add_argument(
        "--scales", default="128,512,2000", help="with --ensemble: the scales indexed and ensembled, in tokens"
    )
    parser.add_argument(
        "--scale-weights",
        help=(
            "with --ensemble: per-scale weights after normalisation, e.g. 128:0.5,512:0.25,2000:0.25 (default 1 each; "
            "the row's name then says them)"
        ),
    )
    parser.add_argument(
        "--ensemble-index",
        default=ENSEMBLE_INDEX,
        help="with --ensemble: the index with the scales (built from SciFact when missing)",
    )
    parser.add_argument(
        "--text-fields", help="BM25 fields and boosts, e.g. text^1,title^0.5 (default: the retriever's own)"
    )
    parser.add_argument(
        "--variant",
        help="measure --index as this named variant: its rows go under variants.NAME beside the baseline rows",
    )
    parser.add_argument(
        "--corpus-limit",
        type=int,
        help="with --ensemble, when the index is built: the first N SciFact documents only (a quick check)",
    )
    args = parser.parse_args(argv)
    if args.ensemble:
        return ensemble_main(args)

    settings = Settings.from_env()
    client = make_backend(settings)
    if not client.index_exists(args.index):
        print(f"index {args.index!r} missing: run `python -m bench.ingest_bench` first", file=sys.stderr)
        return 1
    chunk_count = client.count(args.index)
    queries, qrels = load_queries(args.limit)
    retriever = HybridRetriever(client, make_embedder(settings.embedder), args.index, settings.retrieval)
    retriever.search("warm up", size=10)

    fields = {"text_fields": tuple(args.text_fields.split(","))} if args.text_fields else {}
    results = {}
    for mode in MODES:
        per_run_p50, per_run_p95, embed_ms = [], [], []
        ndcg = recall = 0.0
        for run in range(args.runs):
            took, ndcgs, recalls = [], [], []
            for qid, text in queries.items():
                result = retriever.search(text, mode=mode, size=DEPTH, collapse_field="doc_id", **fields)
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

    best_hybrid = max(("native_sum", "minmax", "rrf"), key=lambda m: results[m]["ndcg_at_10"])
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
        > max(results["bm25"]["ndcg_at_10"], results["knn"]["ndcg_at_10"]),
    }
    if args.variant:
        payload["chunking"] = index_chunking(client, args.index)
        payload["bm25_fields"] = list(fields.get("text_fields", DEFAULT_TEXT_FIELDS))
        print(
            merge_result(
                args.name,
                "bench.retrieval_bench",
                f"variant_{args.variant}",
                {k: v for k, v in payload.items() if k != "modes"},
                "variants",
                {args.variant: results},
            )
        )
        return 0
    print(write_result(args.name, "bench.retrieval_bench", payload))
    return 0


def index_chunking(client, index: str) -> dict:
    """How the index's chunks look: count, header share, median characters
    (from a sample), so a variant's row says what it measured."""
    total = client.count(index)
    with_header = client.client.count(index=index, query={"bool": {"filter": [{"exists": {"field": "header"}}]}})[
        "count"
    ]
    hits = client.client.search(
        index=index,
        size=2000,
        query={"function_score": {"random_score": {"seed": 7, "field": "_seq_no"}}},
        source=["text"],
    )["hits"]["hits"]
    lengths = sorted(len(h["_source"]["text"]) for h in hits)
    return {
        "chunks": total,
        "with_header": with_header,
        "sample_median_chars": lengths[len(lengths) // 2] if lengths else None,
    }


if __name__ == "__main__":
    sys.exit(main())
