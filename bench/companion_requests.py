"""Where the `passages` step of engine-scored post-search spends its time:
the two requests to the companion, each timed as sent by the gateway today
and as it was sent before (alternating on every query, so under the same
load), split into the engine's own `took`, the wall time of the request
and its answer's transfer, the answer's size and the JSON decoding.

    python -m bench.companion_requests [--queries 30] [--seed 7] [--out companion_requests]

Needs the index and companion `bench.post_search_bench --companion` made
(``bench-post-search-<seed>``, Elasticsearch). The requests are the
library's own bodies (`search_extension.companion_scoring`), sent raw over
HTTP so that bytes and decoding are counted apart from the client:

- signals, now: kNN + BM25 `match`, no stored field (ids made from doc values);
  before: the same with each hit's `_id` loaded (a stored field);
- candidates, now: each hit's 32 best, vectors as raw doc values
  (`docvalue_fields`, `format: binary`); before: vectors as floats in `_source`.

The candidates are those the library chooses from the signals' answer; the
vectors read both ways are compared (they must be the very same floats).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.common import write_result

HEADERS = {"Content-Type": "application/x-ndjson"}


def _ndjson(searches) -> bytes:
    import orjson

    return b"".join(orjson.dumps(item) + b"\n" for item in searches)


def timed_msearch(http, url: str, searches) -> tuple[dict, dict]:
    """(the answer, its figures): wall ms (request, engine, transfer), decode ms, bytes in and out, took."""
    import orjson

    body = _ndjson(searches)
    started = time.perf_counter()
    response = http.request("POST", f"{url}/_msearch", body=body, headers=HEADERS)
    raw = response.data
    arrived = time.perf_counter()
    answer = orjson.loads(raw)
    decoded = time.perf_counter()
    return answer, {
        "wall_ms": (arrived - started) * 1000,
        "decode_ms": (decoded - arrived) * 1000,
        "bytes_in": len(raw),
        "bytes_out": len(body),
        "took_ms": sum(item.get("took", 0) for item in answer["responses"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--hits", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="companion_requests")
    args = parser.parse_args()

    import numpy as np
    import urllib3

    from bench.post_search_bench import documents, queries
    from chunkrag_core.engines import schema
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from ingest_pipeline.source_fields import SourceField
    from ingest_pipeline.sync import companion_name
    from search_extension import companion_scoring as scoring
    from search_extension.post_search import DEFAULT_MAX_PASSAGES

    settings = Settings.from_env()
    embedder = make_embedder(settings.embedder)
    url = settings.es_nodes[0].rstrip("/")
    http = urllib3.PoolManager()
    index = f"bench-post-search-{args.seed}"
    companion = companion_name(index)
    weights = (settings.retrieval.bm25_weight, settings.retrieval.knn_weight)
    figures: dict[str, list[dict]] = {}
    different_vectors = compared_vectors = 0
    load_before = os.getloadavg()[0]
    for _, question, _, hits in queries(documents(args.seed), args.seed, args.hits, args.queries):
        fields = [SourceField(index, d["id"], "body", d["body"], title=d["title"]) for d in hits]
        doc_ids = [field.companion_id for field in fields]
        query_vector = embedder.embed([question])[0]
        now = scoring.signal_searches(companion, doc_ids, question, query_vector, scoring.MAX_SCORED_CHUNKS)
        # Before: each hit's `_id` loaded, the BM25 hits named by it.
        before = [
            {key: value for key, value in item.items() if key not in ("stored_fields", "docvalue_fields")}
            if "query" in item
            else {key: value for key, value in item.items() if key != "stored_fields"}
            for item in now
        ]
        answer, seen = timed_msearch(http, url, now)
        figures.setdefault("signals_now", []).append(seen)
        figures.setdefault("signals_before", []).append(timed_msearch(http, url, before)[1])
        rows = scoring.signals_of(answer["responses"])
        per_hit = [rows[d] for d in doc_ids]
        best, _ = scoring.choose_candidates(per_hit, [None] * len(doc_ids), weights, DEFAULT_MAX_PASSAGES)
        ids = [row.chunk_id for chosen in best for row, _ in chosen]
        body_now = scoring.candidates_body(ids, with_vectors=True)
        body_before = {
            **scoring.candidates_body(ids, with_vectors=False),
            "_source": {"excludes": [], "exclude_vectors": False},
        }
        fetched_now, seen = timed_msearch(http, url, [{"index": companion}, body_now])
        figures.setdefault("candidates_now", []).append({**seen, "candidates": len(ids)})
        fetched_before, seen = timed_msearch(http, url, [{"index": companion}, body_before])
        figures.setdefault("candidates_before", []).append({**seen, "candidates": len(ids)})
        vectors = {hit["_id"]: schema.hit_vector(hit) for hit in fetched_now["responses"][0]["hits"]["hits"]}
        for hit in fetched_before["responses"][0]["hits"]["hits"]:
            compared_vectors += 1
            different_vectors += not np.array_equal(
                np.asarray(vectors[hit["_id"]], dtype=np.float32),
                np.asarray(hit["_source"][schema.VECTOR], dtype=np.float32),
            )
    summary = {
        name: {
            key: round(statistics.median(row[key] for row in rows), 1)
            for key in rows[0]
            if isinstance(rows[0][key], (int, float))
        }
        for name, rows in figures.items()
    }
    summary["vectors_compared"] = compared_vectors
    summary["vectors_different"] = different_vectors
    summary["load_1m_before"] = round(load_before, 2)
    summary["load_1m_after"] = round(os.getloadavg()[0], 2)
    print(summary)
    write_result(args.out, "bench.companion_requests", {"queries": args.queries, "medians": summary})


if __name__ == "__main__":
    main()
