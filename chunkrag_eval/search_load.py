"""Search latency, kNN recall and closed-loop throughput of an index, as the
cost-curve benchmark measures them (``python -m bench.scale_bench``):
percentiles of each run and their median over runs."""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

# The retriever's search modes, each timed.
MODES = ("bm25", "knn", "minmax")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation between ranks); 0.0 for none."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 3)


def percentiles(values) -> dict:
    return {f"p{int(q * 100)}": round(percentile(values, q), 2) for q in (0.5, 0.95, 0.99)}


def median_of_runs(runs: list[dict]) -> dict:
    return {key: median([run[key] for run in runs]) for key in runs[0]}


# Untimed searches per mode before the timed runs (caches, JIT).
WARMUP_QUERIES = 50


def measure_latency(retriever, queries: list[str], runs: int, candidates: int) -> dict:
    """Per mode, p50/p95/p99 of took_ms per run, median over runs (after an
    untimed warm-up); then the default filter."""
    from chunkrag_core.providers import make_chat
    from chunkrag_core.settings import Settings
    from chunkrag_filter.pipeline import FilterOptions, run_filter

    rows = {}
    for mode in MODES:
        for text in queries[:WARMUP_QUERIES]:
            retriever.search(text, mode=mode, size=candidates)
        per_run = []
        for _ in range(runs):
            per_run.append(percentiles([retriever.search(t, mode=mode, size=candidates).took_ms for t in queries]))
        rows[mode] = {**median_of_runs(per_run), "runs": per_run}
    # The default filter never calls the model (judge_top=0); the client is
    # made for the signature only and opens no connection.
    model = make_chat(Settings.from_env().chat)
    options = FilterOptions()
    retrieval_runs, filter_runs, kept = [], [], []
    for _ in range(runs):
        took, filtered = [], []
        for text in queries:
            result = retriever.search(text, mode="minmax", size=candidates, include_vectors=True)
            took.append(result.took_ms)
            started = time.perf_counter()
            outcome = run_filter(text, result.chunks, model=model, options=options)
            filtered.append((time.perf_counter() - started) * 1000)
            kept.append(len(outcome.kept))
        retrieval_runs.append(percentiles(took))
        filter_runs.append(percentiles(filtered))
    rows["minmax_with_vectors"] = {**median_of_runs(retrieval_runs), "runs": retrieval_runs}
    rows["filter"] = {
        **median_of_runs(filter_runs),
        "runs": filter_runs,
        "mean_kept": round(float(np.mean(kept)), 2),
    }
    return rows


def exact_neighbours(query_vectors: np.ndarray, chunked: Iterable, k: int) -> dict:
    """Each query's k nearest chunk ids by exact cosine over the chunk
    vectors (brute force in numpy, block by block so a million vectors never
    sit in memory at once), and the k-th one's cosine."""
    queries = len(query_vectors)
    best_scores = np.full((queries, 0), -np.inf, dtype=np.float32)
    best_ids: np.ndarray = np.zeros((queries, 0), dtype=object)
    ids, block = [], []

    def merge(ids, block, best_scores, best_ids):
        scores = query_vectors @ np.asarray(block, dtype=np.float32).T
        scores = np.concatenate([best_scores, scores], axis=1)
        names = np.concatenate([best_ids, np.broadcast_to(np.asarray(ids, dtype=object), (queries, len(ids)))], 1)
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        return np.take_along_axis(scores, top, 1), np.take_along_axis(names, top, 1)

    for item in chunked:
        for chunk in item.chunks:
            ids.append(chunk.chunk_id)
            block.append(chunk.vector)
        if len(ids) >= RECALL_BLOCK:
            best_scores, best_ids = merge(ids, block, best_scores, best_ids)
            ids, block = [], []
    if ids:
        best_scores, best_ids = merge(ids, block, best_scores, best_ids)
    return {"ids": [list(row) for row in best_ids], "kth": [float(row.min()) for row in best_scores]}


# A hit whose cosine is within this of the exact k-th one's is as near as
# the exact neighbours: float32 rounding of the same sum, or a tie. Corpora
# recombined from a pool of sentences hold many chunks with the same vector,
# and which of those tied chunks make the exact top k is arbitrary.
TIE_TOLERANCE = 1e-4


def knn_recall(
    retriever, queries: list[str], chunked: Callable[[], Iterable], k: int, exact_cache: Path | None = None
) -> dict:
    """Recall@k of the index's approximate kNN against exact cosine search
    over the same chunk vectors (``chunked()``: the corpus's chunked
    documents), for the queries: by id (the exact top k's ids found), and
    by distance (hits at least as near as the exact k-th neighbour, ties
    included). The exact neighbours depend on the corpus
    alone (not the engine or vector type): with ``exact_cache`` they are
    computed once per corpus size and read back."""
    query_vectors = np.asarray(retriever.embedder.embed(queries), dtype=np.float32)
    cached = json.loads(exact_cache.read_text(encoding="utf-8")) if exact_cache and exact_cache.exists() else None
    if isinstance(cached, dict):
        exact = cached
    else:
        exact = exact_neighbours(query_vectors, chunked(), k)
        if exact_cache is not None:
            exact_cache.write_text(json.dumps(exact), encoding="utf-8")
    by_id, by_distance = [], []
    for text, query, nearest, kth in zip(queries, query_vectors, exact["ids"], exact["kth"]):
        hits = retriever.search(text, mode="knn", size=k, include_vectors=True).chunks
        by_id.append(len({hit.chunk_id for hit in hits} & set(nearest)) / k)
        cosines = [float(query @ (hit.vector / np.linalg.norm(hit.vector))) for hit in hits]
        by_distance.append(sum(cosine >= kth - TIE_TOLERANCE for cosine in cosines) / k)
    return {
        "k": k,
        "num_candidates": retriever.settings.num_candidates,
        "recall": round(float(np.mean(by_id)), 4),
        "recall_by_distance": round(float(np.mean(by_distance)), 4),
        "against": "exact cosine over the chunk vectors; by distance: hits at least as near as the exact k-th",
    }


# Chunk vectors scored at once in the exact search.
RECALL_BLOCK = 50_000


# Closed-loop load for `throughput`: seconds of untimed searches first at
# each concurrency (connections opened, caches warm), then the timed window.
THROUGHPUT_WARMUP_S = 5.0
THROUGHPUT_WINDOW_S = 30.0


def throughput_summary(latencies_ms: list[float], window_s: float) -> dict:
    """Searches answered per second in the window, and each one's wall-clock
    latency (what a caller waits, queueing included)."""
    return {
        "searches": len(latencies_ms),
        "per_s": round(len(latencies_ms) / window_s, 2),
        **(percentiles(latencies_ms) if latencies_ms else {}),
    }


def closed_loop(
    search, queries: list[str], concurrency: int, warmup_s: float, window_s: float, clock=time.perf_counter
) -> dict:
    """``concurrency`` callers, each sending its next query as soon as the
    last was answered; only searches that start and end inside the window
    count. ``clock``: seconds, read by every caller (a test's own clock)."""
    import threading

    start = clock() + warmup_s
    end = start + window_s
    latencies: list[list[float]] = [[] for _ in range(concurrency)]

    def caller(slot: int) -> None:
        turn = slot
        while (began := clock()) < end:
            search(queries[turn % len(queries)])
            finished = clock()
            if began >= start and finished <= end:
                latencies[slot].append((finished - began) * 1000)
            turn += concurrency

    threads = [threading.Thread(target=caller, args=(slot,)) for slot in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return throughput_summary([value for slot in latencies for value in slot], window_s)
