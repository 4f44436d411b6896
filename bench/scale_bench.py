"""The cost curve: ingest time, disk, heap and query latency at about 10k,
100k and 1M chunks, per vector type, on a node of its own.

    python -m bench.scale_bench pool                       # embed the sentence pool once (cached)
    python -m bench.scale_bench node --engine elasticsearch --port 19400 --heap 3g   # start a node
    python -m bench.scale_bench run --url http://127.0.0.1:19400 --engine elasticsearch \\
        --size 10000 --vector-type int8_hnsw [--runs 3] [--keep]
    python -m bench.scale_bench recall --url ... --index scale-bbq_hnsw-1000000 --size 1000000 \
        --row elasticsearch/bbq_hnsw/1000000   # kNN recall of a kept index
    python -m bench.scale_bench throughput --url ... --index ... --row ...  # searches/s at 1,2,4,8 callers

Corpora: scale_corpus.py; what is timed: ``HOW`` (written into scale.json); rows
land under engine/vector type/size. The rows of three local nodes
(``elasticsearch-3nodes/...``) and a row's ``index_final`` (disk measured again
once the merges were done) came from commands since retired (bench/REPORT.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, SHARED, load_average, machine
from bench.scale_corpus import SYNTHETIC_PREFIX, PlannedChunk, mean_vectors, plan_corpus, real_documents, sentence_table
from chunkrag_core.settings import state_home
from chunkrag_eval.index_figures import index_figures
from chunkrag_eval.search_load import (
    THROUGHPUT_WARMUP_S,
    THROUGHPUT_WINDOW_S,
    closed_loop,
    knn_recall,
    measure_latency,
)

EVAL = SHARED / "eval"
RESULT_NAME = "scale"
# Sentences embedded per call before the partial pool is saved (a killed
# run resumes from the last save).
POOL_SAVE_EVERY = 4096
# Shuffles the real documents before their sentences are numbered.
POOL_SEED = 11
# Sentences embedded for the pool: all 71k distinct real sentences would
# take over an hour at the ~14 sentences/s the shared 2 cores gave the
# local MiniLM (2026-11-24); this prefix spans every corpus.
DEFAULT_POOL_SENTENCES = 8192


# --- the sentence pool ---------------------------------------------------------------


def pool_paths(cache: Path) -> tuple[Path, Path]:
    return cache / "scale-sentences.json", cache / "scale-vectors.npy"


def build_pool(cache: Path, max_sentences: int | None = None):
    """The distinct sentences of the real documents (documents in a seeded
    shuffled order, so any prefix of the pool spans every corpus), the
    first ``max_sentences`` of them embedded once (resumable, cached), and
    the documents whose sentences all fall in that prefix, each with its
    sentence ids. Returns (sentences, documents, vectors, all_sentences_count)."""
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from ingest_pipeline.sentences import sentence_spans

    cache.mkdir(parents=True, exist_ok=True)
    text_path, vector_path = pool_paths(cache)
    if text_path.exists():
        stored = json.loads(text_path.read_text(encoding="utf-8"))
        sentences, docs = stored["sentences"], [tuple(d) for d in stored["docs"]]
    else:
        source = real_documents(EVAL)
        order = np.random.default_rng(POOL_SEED).permutation(len(source))
        source = [source[i] for i in order]
        split = [[d.text[s:e] for s, e in sentence_spans(d.text, 0, len(d.text))] for d in source]
        sentences, per_doc = sentence_table(split)
        docs = [(d.doc_id, d.title, ids) for d, ids in zip(source, per_doc)]
        text_path.write_text(json.dumps({"sentences": sentences, "docs": docs}), encoding="utf-8")
    size = min(len(sentences), max_sentences or len(sentences))
    done = np.load(vector_path) if vector_path.exists() else np.zeros((0, 384), dtype=np.float32)
    if len(done) < size:
        embedder = make_embedder(Settings.from_env().embedder)
        began = time.perf_counter()
        start = len(done)
        while len(done) < size:
            batch = sentences[len(done) : min(size, len(done) + POOL_SAVE_EVERY)]
            done = np.concatenate([done, np.asarray(embedder.embed(batch), dtype=np.float32)])
            np.save(vector_path, done)
            rate = (len(done) - start) / (time.perf_counter() - began)
            print(f"pool: {len(done)}/{size} sentences embedded ({rate:.0f}/s)", file=sys.stderr)
    covered = [(doc_id, title, ids) for doc_id, title, ids in docs if ids and max(ids) < size]
    return sentences[:size], covered, done[:size], len(sentences)


def pool_main(args) -> int:
    sentences, docs, vectors, available = build_pool(Path(args.cache), args.pool_sentences)
    print(json.dumps({"sentences": len(sentences), "of": available, "documents": len(docs), "vectors": vectors.shape}))
    return 0


# --- writing a corpus ------------------------------------------------------------------


def chunked_documents(plan, sentences: list[str], vectors: np.ndarray):
    """Each planned document as the ingest pipeline's ChunkedDocument: the
    chunks' texts joined from their sentences (offsets into the joined
    document), their vectors the normalised mean of the sentences'."""
    from chunkrag_core.chunk import Chunk
    from ingest_pipeline.chunker import ChunkedDocument
    from ingest_pipeline.sources import Document

    for planned in plan:
        texts = [" ".join(sentences[i] for i in chunk.sentences) for chunk in planned]
        text = " ".join(texts)
        first: PlannedChunk = planned[0]
        chunks, cursor = [], 0
        chunk_vectors = mean_vectors(vectors, [chunk.sentences for chunk in planned])
        for chunk, chunk_text, vector in zip(planned, texts, chunk_vectors):
            chunks.append(
                Chunk(
                    doc_id=chunk.doc_id,
                    position=chunk.position,
                    text=chunk_text,
                    start=cursor,
                    end=cursor + len(chunk_text),
                    title=chunk.title,
                    sentence_count=len(chunk.sentences),
                    vector=vector,
                    header=chunk.title,
                )
            )
            cursor += len(chunk_text) + 1
        document = Document(doc_id=first.doc_id, title=first.title, text=text, sections=())
        # Nothing is re-ingested here: any stable fingerprint will do.
        fingerprint = f"scale-bench:{len(chunks)}"
        yield ChunkedDocument(document, tuple(chunks), sum(c.sentence_count for c in chunks), fingerprint)


# Chunks between two progress lines while writing.
PROGRESS_EVERY = 50_000


def ingest(backend, index: str, vector_type: str, plan, sentences, vectors, merge_wait_s: float) -> dict:
    """The corpus written as the ingest pipeline writes it: the project's
    index body, refreshes paused, bulk requests of the writer's size; the
    seconds to a refreshed index, then to merges settled."""
    from chunkrag_core.settings import IndexLayoutSettings, VectorIndexSettings
    from ingest_pipeline.writer import bulk_write, document_actions, ensure_index

    backend.delete_index(index)
    ensure_index(
        backend,
        index,
        dims=vectors.shape[1],
        vectors=VectorIndexSettings(type=vector_type),
        capabilities=backend.capabilities(),
        layout=IndexLayoutSettings(),
    )
    began = time.perf_counter()
    previous = backend.refresh_interval(index)
    backend.set_refresh_interval(index, "-1")
    documents = synthetic = 0
    written: list[int] = []
    done: list[int] = []

    def actions():
        nonlocal documents, synthetic
        for chunked in chunked_documents(plan, sentences, vectors):
            documents += 1
            if chunked.document.doc_id.startswith(SYNTHETIC_PREFIX):
                synthetic += len(chunked.chunks)
            yield from document_actions(index, chunked, None)
            written.append(len(chunked.chunks))
            if sum(written) >= PROGRESS_EVERY:
                done.append(sum(written))
                written.clear()
                seconds = time.perf_counter() - began
                print(f"{index}: {sum(done)} chunks sent in {seconds:.0f} s", file=sys.stderr, flush=True)

    outcome = bulk_write(backend, actions())
    backend.set_refresh_interval(index, previous)
    backend.refresh(index)
    refreshed = time.perf_counter() - began
    if outcome.errors:
        raise RuntimeError(f"{len(outcome.errors)} bulk errors, first: {outcome.errors[:3]}")
    settled = settle_merges(backend, index, merge_wait_s)
    return {
        "merges_settled": settled,
        "documents": documents,
        "chunks_indexed": outcome.indexed,
        "real_text_chunks": outcome.indexed - synthetic,
        "synthetic_chunks": synthetic,
        "seconds_to_refreshed": round(refreshed, 1),
        "seconds_to_merges_settled": round(time.perf_counter() - began, 1),
        "chunks_per_s": round(outcome.indexed / refreshed, 1),
    }


# Merges still running after the bulk are part of the cost; waited for (up
# to --merge-wait seconds) so latency is measured on the index as it stays.
MERGE_WAIT_S = 600


def settle_merges(backend, index: str, wait_s: float) -> bool:
    """True once no merge runs (on any copy: primaries and replicas); False
    if some still did after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        stats = backend.client.indices.stats(index=index, metric="merge")
        if stats["_all"]["total"]["merges"]["current"] == 0:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(5)


def row_key(engine: str, vector_type: str, chunks: int, nodes: int = 1) -> str:
    """A row's key in scale.json: one node keeps the plain engine name."""
    topology = engine if nodes <= 1 else f"{engine}-{nodes}nodes"
    return f"{topology}/{vector_type}/{chunks}"


# --- latency ----------------------------------------------------------------------------


class CachedEmbedder:
    """The queries embedded once, before any timing (the retriever embeds
    per search; that time is reported apart from the engine's anyway)."""

    def __init__(self, embedder, texts):
        self.vectors = dict(zip(texts, embedder.embed(list(texts))))
        self.dims = len(next(iter(self.vectors.values())))

    def embed(self, texts):
        return np.asarray([self.vectors[t] for t in texts], dtype=np.float32)


def scifact_queries() -> list[str]:
    path = EVAL / "scifact" / "beir_derived" / "queries_validation.jsonl"
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


# Corpora up to this size also get kNN recall against exact search (every
# chunk vector held in memory: 100k x 384 floats is 150 MB).
RECALL_MAX_CHUNKS = 200_000


def recall_main(args) -> int:
    """kNN recall@10 of a kept index (``run --keep``) into its row."""
    sentences, docs, vectors, _ = build_pool(Path(args.cache), args.pool_sentences)
    queries = scifact_queries()
    retriever, _ = kept_retriever(args, queries)
    plan = plan_corpus(docs, len(sentences), args.size)
    exact_cache = Path(args.cache) / f"exact-neighbours-{args.size}-{len(sentences)}-k10-v2.json"
    recall = knn_recall(
        retriever, queries, lambda: chunked_documents(plan, sentences, vectors), 10, exact_cache=exact_cache
    )
    recall["command"] = " ".join(["python -m bench.scale_bench", *sys.argv[1:]])
    print(json.dumps(recall), file=sys.stderr)
    # A row's knn_recall_num_candidates_N: a study of num_candidates by an option since retired.
    print(add_to_row(args.row, "knn_recall", recall))
    return 0


def throughput_main(args) -> int:
    """Filtered searches a kept index answers per second, by concurrency:
    each search is what `ask` does before the model (minmax retrieval of the
    candidates with their vectors, then the default filter)."""
    from chunkrag_core.providers import make_chat
    from chunkrag_filter.pipeline import FilterOptions, run_filter
    from search_extension.ask import DEFAULT_CANDIDATES

    queries = scifact_queries()
    retriever, settings = kept_retriever(args, queries)
    model, options = make_chat(settings.chat), FilterOptions()

    def filtered_search(text: str) -> None:
        found = retriever.search(text, mode="minmax", size=DEFAULT_CANDIDATES, include_vectors=True)
        run_filter(text, found.chunks, model=model, options=options)

    load_before = os.getloadavg()
    levels = {}
    for concurrency in args.concurrency:
        levels[str(concurrency)] = closed_loop(filtered_search, queries, concurrency, THROUGHPUT_WARMUP_S, args.seconds)
        print(f"{args.index}: {concurrency} callers: {levels[str(concurrency)]}", file=sys.stderr)
    figures = {
        "what": "filtered searches (minmax with vectors, default filter, no model call), closed loop",
        "window_s": args.seconds,
        "warmup_s": THROUGHPUT_WARMUP_S,
        "by_concurrency": levels,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": load_average(),
        "command": " ".join(["python -m bench.scale_bench", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(add_to_row(args.row, "throughput", figures))
    return 0


def kept_retriever(args, queries: list[str]):
    """The retriever of a kept index (``--url``, ``--index``) and its settings."""
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from search_extension.retriever import HybridRetriever

    settings = engine_settings(args.engine, args.url)
    embedder = CachedEmbedder(make_embedder(settings.embedder), queries)
    return HybridRetriever(make_backend(settings), embedder, args.index), settings


def engine_settings(engine: str, url: str):
    from chunkrag_core.settings import Settings

    base = Settings.from_env()
    if engine == "opensearch":
        return dataclasses.replace(base, search_backend="opensearch", opensearch_url=url)
    return dataclasses.replace(base, search_backend="elasticsearch", es_url=url)


def run_main(args) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from search_extension.ask import DEFAULT_CANDIDATES
    from search_extension.retriever import HybridRetriever

    sentences, docs, vectors, available = build_pool(Path(args.cache), args.pool_sentences)
    settings = engine_settings(args.engine, args.url)
    backend = make_backend(settings)
    nodes = int(backend.client.cluster.health()["number_of_nodes"])
    index = f"scale-{args.vector_type}-{args.size}"
    load_before = os.getloadavg()
    plan = plan_corpus(docs, len(sentences), args.size)
    print(f"{index}: writing {args.size} chunks to {args.url}", file=sys.stderr)
    if args.reuse and backend.index_exists(index) and backend.count(index) == args.size:
        # Written by an earlier run (whose ingest figures are in its log):
        # only measured here.
        written = {"reused_index": True}
    else:
        written = ingest(backend, index, args.vector_type, plan, sentences, vectors, args.merge_wait)
    figures = index_figures(backend, index)
    print(f"{index}: {written} {figures}", file=sys.stderr)
    queries = scifact_queries()
    retriever = HybridRetriever(backend, CachedEmbedder(make_embedder(settings.embedder), queries), index)
    candidates = args.candidates or DEFAULT_CANDIDATES
    latency = measure_latency(retriever, queries, args.runs, candidates)
    recall = None
    if args.size <= RECALL_MAX_CHUNKS:
        plan = plan_corpus(docs, len(sentences), args.size)
        recall = knn_recall(retriever, queries, lambda: chunked_documents(plan, sentences, vectors), 10)
        print(f"{index}: kNN recall@10 against exact {recall['recall']}", file=sys.stderr)
    figures_after = index_figures(backend, index)
    row = {
        "engine": args.engine,
        **({} if nodes <= 1 else {"nodes": nodes, "client_url": args.url}),
        "vector_type": args.vector_type,
        "chunks": args.size,
        "sentence_pool": {"embedded": len(sentences), "real_sentences": available, "real_documents": len(docs)},
        "ingest": written,
        "index": figures,
        "index_after_queries": figures_after,
        "queries": len(queries),
        "candidates": candidates,
        "latency_ms": latency,
        "knn_recall": recall,
        "fusion_minmax": retriever.search(queries[0], mode="minmax", size=candidates).fusion,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "command": " ".join(["python -m bench.scale_bench", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(json.dumps({k: v for k, v in row.items() if k != "latency_ms"}), file=sys.stderr)
    for mode, values in latency.items():
        print(f"  {mode:>20}: p50 {values['p50']} p95 {values['p95']} p99 {values['p99']} ms", file=sys.stderr)
    print(store_row(row_key(args.engine, args.vector_type, args.size, nodes), row))
    if not args.keep:
        backend.delete_index(index)
    return 0


def add_to_row(key: str, name: str, figures: dict) -> Path:
    """``figures`` measured on a kept index, under ``name`` in its row."""
    existing = json.loads((RESULTS / f"{RESULT_NAME}.json").read_text(encoding="utf-8"))
    return store_row(key, {**existing["rows"][key], name: figures})


def store_row(key: str, row: dict) -> Path:
    """The row beside those already in bench/results/scale.json."""
    path = RESULTS / f"{RESULT_NAME}.json"
    existing = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    payload = {
        "command": "python -m bench.scale_bench run --url URL --engine E --size N --vector-type T (each row: command)",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "how": HOW,
        "rows": {**existing.get("rows", {}), key: row},
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


HOW = (
    "Corpus: real documents from ../shared/eval (SciFact, NQ, SQuAD, PopQA, PubHealth, bio, WikiQA, "
    "Climate-FEVER) cut into chunks of 2-6 consecutive sentences, then documents recombined from random real "
    "sentences (synthetic_chunks); chunk vector = L2-normalised mean of its sentences' MiniLM vectors (each "
    "distinct sentence of the pool embedded once), a stand-in for embedding each chunk. Written with the "
    "project's index body and bulk writer, refreshes paused. Latency: SciFact's 300 queries, an untimed "
    "warm-up of 50 queries per mode, then each mode `runs` times; p50/p95/p99 of the engine part of one "
    "search (HybridRetriever.took_ms, query embedding excluded), median over runs. filter: run_filter with "
    "the default FilterOptions (no judge) on the minmax candidates fetched with their vectors "
    "(minmax_with_vectors), per query. Node of its own (bench.scale_bench node); rows keyed ENGINE-3nodes ran on "
    "three local nodes on the same 2 cores (a command since retired, shards/replicas in ingest; heap summed over "
    "the nodes, heap_per_node; disk store_mb primaries, store_mb_total with replicas, shards_per_node): they measure "
    "fan-out and replication, not added capacity. The machine was shared with other jobs: see load_average_* per row."
)


# --- nodes of its own ------------------------------------------------------------------


def node_main(args) -> int:
    """Start (idempotently) a single node of ``--engine`` on ``--port`` with
    its transport on port+1, from the distribution the project's services
    already fetched, in a state home of its own (so its data, heap and
    disk are the benchmark's alone)."""
    if args.engine == "elasticsearch":
        from local_services.elasticsearch_node import ElasticsearchSettings as base
        from local_services.elasticsearch_node import process
    else:
        from local_services.opensearch_node import OpenSearchSettings as base
        from local_services.opensearch_node import process
    home = scale_home(Path(args.home))
    # Transport on port+1 keeps both ports inside one small range.
    settings_class = type(f"Scale{base.__name__}", (base,), {"TRANSPORT_PORT_OFFSET": 1})
    settings = settings_class(home=home, port=args.port, heap=args.heap)
    node = process(settings)
    if args.stop:
        node.down()
        return 0
    node.up(timeout=300)
    print(json.dumps({"engine": args.engine, "url": settings.url, "heap": args.heap, "run_dir": str(settings.run_dir)}))
    return 0


def scale_home(home: Path) -> Path:
    """A state home of the benchmark's own, its distributions linked from the
    shared services' cache (nothing is fetched again)."""
    home.mkdir(parents=True, exist_ok=True)
    cache = home / "cache"
    if not cache.exists():
        cache.symlink_to(state_home() / "cache")
    return home


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cache",
        default=str(state_home() / "bench-cache" / "scale"),
        help="where the sentence pool is cached (not committed; default $CHUNKRAG_HOME/bench-cache/scale)",
    )
    parser.add_argument(
        "--pool-sentences", type=int, default=DEFAULT_POOL_SENTENCES, help="distinct real sentences embedded"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    engine = argparse.ArgumentParser(add_help=False)
    engine.add_argument("--engine", choices=("elasticsearch", "opensearch"), default="elasticsearch")
    kept = argparse.ArgumentParser(add_help=False, parents=[engine])  # a kept index (`run --keep`) and its row
    kept.add_argument("--url", required=True)
    kept.add_argument("--index", required=True)
    kept.add_argument("--row", required=True, help="the row's key in scale.json, e.g. elasticsearch/bbq_hnsw/1000000")
    commands.add_parser("pool", help="embed the sentence pool once")
    node = commands.add_parser("node", parents=[engine], help="start a node of its own for the benchmark")
    node.add_argument("--port", type=int, required=True, help="HTTP port; transport on port+1")
    node.add_argument("--heap", default="3g")
    node.add_argument("--stop", action="store_true", help="stop the node started on --port instead")
    node.add_argument("--home", default=str(state_home() / "bench-cache" / "scale-home"))
    run = commands.add_parser("run", parents=[engine], help="write one corpus and measure it")
    run.add_argument("--url", required=True)
    run.add_argument("--size", type=int, required=True, help="chunks")
    run.add_argument("--vector-type", default="int8_hnsw", choices=("hnsw", "int8_hnsw", "bbq_hnsw"))
    run.add_argument("--runs", type=int, default=3)
    run.add_argument("--candidates", type=int, help="chunks per search (default: ask's candidates)")
    run.add_argument("--keep", action="store_true", help="keep the index afterwards")
    run.add_argument("--reuse", action="store_true", help="measure the index as it is when it holds --size chunks")
    run.add_argument("--merge-wait", type=float, default=MERGE_WAIT_S, help="seconds to wait for merges to settle")
    recall = commands.add_parser("recall", parents=[kept], help="kNN recall@10 of a kept index, into its row")
    recall.add_argument("--size", type=int, required=True, help="the corpus size the index was written with")
    load = commands.add_parser("throughput", parents=[kept], help="filtered searches per second of a kept index")
    load.add_argument(
        "--concurrency", type=lambda raw: [int(n) for n in raw.split(",")], default=[1, 2, 4, 8],
        help="callers at once, comma-separated (default 1,2,4,8)",
    )  # fmt: skip
    load.add_argument("--seconds", type=float, default=THROUGHPUT_WINDOW_S, help="timed window per level")
    args = parser.parse_args(argv)
    runners = {"throughput": throughput_main, "recall": recall_main, "run": run_main}
    runners.update(pool=pool_main, node=node_main)
    return runners[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
