"""The pure parts of the cost-curve benchmark: corpus planning and the
derived chunk vectors (bench/scale_corpus.py), and the latency summaries
(chunkrag_eval/search_load.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.scale_corpus import (
    MAX_CHUNK_SENTENCES,
    MIN_CHUNK_SENTENCES,
    SYNTHETIC_PREFIX,
    chunk_document,
    group_sizes,
    mean_vectors,
    plan_corpus,
    sentence_table,
)
from chunkrag_eval.search_load import median_of_runs, percentiles


def test_sentence_table_numbers_distinct_usable_sentences_first_seen_first():
    long_a = "Alpha sentence that is long enough."
    long_b = "Beta sentence that is long enough too."
    sentences, per_doc = sentence_table([[long_a, "short", long_b], [long_b, long_a]])
    assert sentences == [long_a, long_b]
    assert per_doc == [[0, 1], [1, 0]]


def test_group_sizes_cover_every_sentence_within_the_bounds():
    rng = np.random.default_rng(0)
    for count in (1, 2, 7, 40):
        sizes = group_sizes(count, rng)
        assert sum(sizes) == count
        assert all(MIN_CHUNK_SENTENCES <= s <= MAX_CHUNK_SENTENCES for s in sizes[:-1])
        assert 1 <= sizes[-1] <= MAX_CHUNK_SENTENCES


def test_chunk_document_keeps_sentences_consecutive_and_positions_counted():
    chunks = chunk_document("d", "T", [10, 11, 12, 13, 14, 15, 16], np.random.default_rng(3))
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert [i for c in chunks for i in c.sentences] == [10, 11, 12, 13, 14, 15, 16]
    assert {c.doc_id for c in chunks} == {"d"}


def _real():
    return [(f"doc{i}", f"title {i}", list(range(i * 8, i * 8 + 8))) for i in range(5)]


def test_plan_corpus_real_documents_first_then_synthetic_exactly_the_target():
    plan = list(plan_corpus(_real(), pool_size=40, target=60))
    chunks = [c for doc in plan for c in doc]
    assert len(chunks) == 60
    real = [doc for doc in plan if not doc[0].doc_id.startswith(SYNTHETIC_PREFIX)]
    assert {doc[0].doc_id for doc in real} == {f"doc{i}" for i in range(5)}
    # Every real document comes before the first synthetic one.
    kinds = [doc[0].doc_id.startswith(SYNTHETIC_PREFIX) for doc in plan]
    assert kinds == sorted(kinds)
    assert all(0 <= i < 40 for c in chunks for i in c.sentences)


def test_plan_corpus_smaller_target_is_a_prefix_of_a_larger_one():
    small = [c for doc in plan_corpus(_real(), 40, 25) for c in doc]
    large = [c for doc in plan_corpus(_real(), 40, 90) for c in doc]
    assert small == large[:25]


def test_mean_vectors_are_normalised_means_of_their_sentences():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]], dtype=np.float32)
    out = mean_vectors(vectors, [[0, 1], [2], [0, 0, 2]])
    assert out == pytest.approx(np.array([[0.70710677, 0.70710677], [0.6, 0.8], [5 / 41**0.5, 4 / 41**0.5]]))
    assert out.dtype == np.float32


def test_percentiles_and_median_of_runs():
    values = list(range(1, 101))
    summary = percentiles(values)
    assert set(summary) == {"p50", "p95", "p99"}
    assert summary["p50"] <= summary["p95"] <= summary["p99"] <= 100
    assert median_of_runs([{"p50": 1.0}, {"p50": 5.0}, {"p50": 3.0}]) == {"p50": 3.0}


def _fake_index(ids_by_query: dict[str, list[int]], vectors: np.ndarray):
    from types import SimpleNamespace

    def search(text, mode, size, include_vectors=False):
        assert (mode, include_vectors) == ("knn", True)
        return SimpleNamespace(
            chunks=[SimpleNamespace(chunk_id=f"d:{i}", vector=vectors[i]) for i in ids_by_query[text]]
        )

    return search


def test_knn_recall_counts_the_exact_neighbours_the_index_returned(monkeypatch):
    from types import SimpleNamespace

    import bench.scale_bench as scale_bench
    import chunkrag_eval.search_load as search_load

    vectors = np.eye(4, dtype=np.float32)
    sentences = [f"sentence {i} long enough to count" for i in range(4)]
    plan = [[scale_bench.PlannedChunk("d", "", p, (p,)) for p in range(4)]]

    class Embedder:
        def embed(self, texts):
            return np.asarray([[1.0, 0.2, 0.1, 0.0] if t == "q" else [0.0, 0.0, 0.1, 1.0] for t in texts])

    # Exact top-2 for "q" is d:0, d:1; for "r" d:3, d:2; the fake index misses d:2.
    search = _fake_index({"q": [0, 1], "r": [3, 0]}, vectors)
    retriever = SimpleNamespace(embedder=Embedder(), search=search, settings=SimpleNamespace(num_candidates=100))
    for block in (1, 3, 50):
        monkeypatch.setattr(search_load, "RECALL_BLOCK", block)
        chunked = lambda: scale_bench.chunked_documents(plan, sentences, vectors)  # noqa: E731
        recall = search_load.knn_recall(retriever, ["q", "r"], chunked, 2)
        # d:0 (cosine 0) is farther than r's 2nd exact neighbour d:2 (0.1).
        assert (recall["recall"], recall["recall_by_distance"]) == (0.75, 0.75)


def test_knn_recall_by_distance_counts_a_tied_neighbour_the_ids_miss(tmp_path):
    """Two chunks with the same vector: the exact top 1 holds one of them,
    the index returned the other; by id a miss, by distance a hit."""
    from types import SimpleNamespace

    from chunkrag_eval.search_load import knn_recall

    vectors = np.asarray([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    cache = tmp_path / "exact.json"
    cache.write_text('{"ids": [["d:0"]], "kth": [1.0]}')

    class Embedder:
        def embed(self, texts):
            return np.asarray([[1.0, 0.0]], dtype=np.float32)

    retriever = SimpleNamespace(
        embedder=Embedder(), search=_fake_index({"q": [1]}, vectors), settings=SimpleNamespace(num_candidates=500)
    )
    recall = knn_recall(retriever, ["q"], list, 1, exact_cache=cache)
    assert (recall["recall"], recall["recall_by_distance"], recall["num_candidates"]) == (0.0, 1.0, 500)


def test_heap_summary_of_one_node_keeps_the_single_node_figures():
    from chunkrag_eval.index_figures import heap_summary

    mb = 2**20
    samples = [{"n1": (300 * mb, 3072 * mb)}, {"n1": (200 * mb, 3072 * mb)}, {"n1": (250 * mb, 3072 * mb)}]
    assert heap_summary(samples) == {"heap_used_mb_min": 200.0, "heap_used_mb_max": 300.0, "heap_max_mb": 3072.0}


def test_heap_summary_sums_the_nodes_per_sample_and_keeps_each_node():
    from chunkrag_eval.index_figures import heap_summary

    mb = 2**20
    samples = [
        {"a": (100 * mb, 1024 * mb), "b": (400 * mb, 1024 * mb), "c": (50 * mb, 1024 * mb)},
        {"a": (300 * mb, 1024 * mb), "b": (150 * mb, 1024 * mb), "c": (60 * mb, 1024 * mb)},
    ]
    summary = heap_summary(samples)
    # Sums per sample: 550 and 510; the least sum is not the sum of the least per node (310).
    assert summary["heap_used_mb_min"] == 510.0
    assert summary["heap_used_mb_max"] == 550.0
    assert summary["heap_max_mb"] == 3072.0
    assert summary["nodes"] == 3
    assert summary["heap_per_node"]["a"] == {
        "heap_used_mb_min": 100.0,
        "heap_used_mb_max": 300.0,
        "heap_max_mb": 1024.0,
    }
    assert summary["heap_per_node"]["c"]["heap_used_mb_min"] == 50.0


def test_shards_per_node_counts_copies_and_their_bytes():
    from chunkrag_eval.index_figures import shards_per_node

    rows = [
        {"shard": "0", "prirep": "p", "node": "n1", "store": "1048576"},
        {"shard": "0", "prirep": "r", "node": "n2", "store": "2097152"},
        {"shard": "1", "prirep": "p", "node": "n2", "store": "1048576"},
        {"shard": "1", "prirep": "r", "node": "n1", "store": None},
        {"shard": "2", "prirep": "r", "node": None, "store": None},
    ]
    assert shards_per_node(rows) == {
        "n1": {"primaries": 1, "replicas": 1, "store_bytes": 1048576, "store_mb": 1.0},
        "n2": {"primaries": 1, "replicas": 1, "store_bytes": 3145728, "store_mb": 3.0},
        "unassigned": {"primaries": 0, "replicas": 1, "store_bytes": 0, "store_mb": 0.0},
    }


def test_row_key_names_a_cluster_and_leaves_one_node_rows_as_they_were():
    from bench.scale_bench import row_key

    assert row_key("elasticsearch", "int8_hnsw", 100000) == "elasticsearch/int8_hnsw/100000"
    assert row_key("elasticsearch", "int8_hnsw", 100000, 1) == "elasticsearch/int8_hnsw/100000"
    assert row_key("opensearch", "hnsw", 10000, 3) == "opensearch-3nodes/hnsw/10000"


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_node_stop_on_a_node_never_started_says_so(engine, tmp_path, capsys):
    """`scale_bench node --stop` goes through the services' managed process
    (a node of the benchmark's own, in its own state home): nothing runs
    there, so it says so and starts nothing."""
    from bench.scale_bench import main

    assert main(["node", "--engine", engine, "--port", "19990", "--stop", "--home", str(tmp_path / "home")]) == 0
    assert "is not running" in capsys.readouterr().out


def test_throughput_summary_counts_per_second_of_the_window():
    from chunkrag_eval.search_load import throughput_summary

    summary = throughput_summary([10.0, 20.0, 30.0, 40.0], window_s=2.0)
    assert (summary["searches"], summary["per_s"], summary["p50"]) == (4, 2.0, 25.0)
    assert throughput_summary([], window_s=30.0) == {"searches": 0, "per_s": 0.0}


def test_closed_loop_callers_take_the_queries_in_turn_and_stop_at_the_window():
    import itertools
    import threading

    from chunkrag_eval.search_load import closed_loop

    seen: list[str] = []
    lock = threading.Lock()

    def search(text: str) -> None:
        with lock:
            seen.append(text)

    # A clock that moves a millisecond per reading, whatever the machine's
    # load: the window holds 25 searches, whichever callers get the CPU.
    ticks = itertools.count()

    def clock() -> float:
        with lock:
            return next(ticks) / 1000

    queries = [f"q{i}" for i in range(5)]
    summary = closed_loop(search, queries, concurrency=3, warmup_s=0.0, window_s=0.05, clock=clock)
    # Callers start at their own slot and step by the concurrency: together
    # they go round every query.
    assert set(seen) == set(queries)
    # Each counted search ran inside the window; the calls past it are not counted.
    assert 0 < summary["searches"] <= len(seen)
