"""Does distributed ingest scale with Celery workers?

    python -m bench.ingest_scaling --documents 400 --runs 3 --workers 1,2,4

SciFact abstracts go through `ingest_documents_on_workers` to 1, 2 and 4
real worker processes (one pool process each), into the local three-node
Elasticsearch cluster (3 shards, no replica: the writes spread over the
nodes, and scaling measures the workers, not replication), with two
embedders:

- ``local``: the packaged MiniLM on onnxruntime in every worker, two threads
  each. On this 2-core machine the CPU is the bound: expect no gain past
  the cores (the workers, the cluster and the client share them);
- ``remote``: a scripted OpenAI-compatible server on loopback
  (tests/support/scripted_openai.py: real HTTP, words hashed into 384
  dimensions) that answers each request after 50-200 ms, like a hosted
  model; the workers wait on it, so more workers should overlap the waits.

Each (embedder, workers) pair: a warm-up ingest (every worker loads its
model and clients), then ``--runs`` ingests into fresh indices, each timed
from the client (reading, dispatch, the workers, the final refresh).
Reported: the median seconds, documents and sentences per second, and the
ratio to one worker. Writes bench/results/ingest_scaling.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench.common import median, write_result

CLUSTER_PORT = 19300
REDIS_PORT = 16411
REMOTE_LATENCY_S = (0.05, 0.2)
# Documents per task, both embedders: ~35 sentences, one embedding request
# for them (and one for the chunks' headers), so a task waits on a remote
# model longer than it computes; small enough that a short local run still
# has several tasks per worker.
BATCH_DOCS = 4


def cpu_times() -> tuple[int, int]:
    """The machine's (busy, total) CPU jiffies since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all cores busy between two :func:`cpu_times` readings."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total else 0.0


def measure(embedder: str, worker_counts: list[int], documents: int, runs: int, corpus: Path, tmp: Path) -> dict:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.settings import Settings, state_home
    from ingest_pipeline.sources import read_sources
    from local_services import cluster as local_cluster
    from local_services import redis_server
    from local_services.celery_workers import CeleryWorkers
    from tests.support.scripted_openai import ScriptedOpenAI, embeddings
    from workers.ingest_dispatch import ingest_documents_on_workers

    home = state_home(os.environ)
    local = local_cluster.LocalCluster("elasticsearch", home, first_port=CLUSTER_PORT, nodes=3)
    local_cluster.up(local, timeout=600)
    redis = redis_server.RedisSettings(home=home, port=REDIS_PORT)
    redis_server.process(redis).up()
    rows = {}
    server = ScriptedOpenAI(default=embeddings(384, REMOTE_LATENCY_S))
    try:
        with server:
            inherited = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_EMBED_", "CHUNKRAG_INDEX_", "ES_", "SEARCH_"))
            }
            env = {
                **inherited,
                "ES_URL": local.url,
                "REDIS_URL": redis.url,
                "CHUNKRAG_INDEX_SHARDS": "3",
                "CHUNKRAG_INDEX_REPLICAS": "0",
                "CHUNKRAG_WORKER_INGEST_BATCH_DOCS": str(BATCH_DOCS),
            }
            if embedder == "remote":
                env.update(
                    {
                        "CHUNKRAG_EMBED_PROVIDER": "openai",
                        "CHUNKRAG_EMBED_MODEL": "scripted-hashing",
                        "CHUNKRAG_EMBED_BASE_URL": server.base_url,
                        "CHUNKRAG_EMBED_DIMS": "384",
                    }
                )
            settings = Settings.from_env(env)
            backend = make_backend(settings)
            for count in worker_counts:
                log_dir = tmp / f"{embedder}-{count}"
                log_dir.mkdir()
                with CeleryWorkers(env, log_dir) as pool:
                    pool.start(count, timeout=120)
                    warm = tmp / f"warm-{embedder}-{count}.jsonl"
                    warm.write_text("".join(corpus.read_text().splitlines(keepends=True)[: 4 * count * 4]))
                    index = f"bench-scaling-warm-{os.getpid()}"
                    ingest_documents_on_workers(read_sources([warm]), client=backend, settings=settings, index=index)
                    backend.delete_index(index)
                    seconds, busy, sentences = [], [], 0
                    for run in range(runs):
                        index = f"bench-scaling-{embedder}-{count}-{run}-{os.getpid()}"
                        before = cpu_times()
                        report = ingest_documents_on_workers(
                            read_sources([corpus]), client=backend, settings=settings, index=index, progress=False
                        )
                        busy.append(busy_fraction(before, cpu_times()))
                        assert report.ok and report.documents == documents, report.errors[:3]
                        seconds.append(report.seconds)
                        sentences = report.sentences
                        backend.delete_index(index)
                        print(f"{embedder} workers={count} run={run}: {report.seconds:.2f} s", flush=True)
                rows[str(count)] = {
                    "seconds_runs": seconds,
                    "seconds_median": median(seconds),
                    # The whole machine's CPU (workers, cluster, client and
                    # the scripted server share it): near 1.0, more workers
                    # can only wait on the cores, not on the embedder.
                    "cpu_busy_runs": busy,
                    "cpu_busy_median": median(busy),
                    "cpu_seconds_median": round(median(busy) * median(seconds) * (os.cpu_count() or 1), 1),
                    "documents_per_s": round(documents / median(seconds), 2),
                    "sentences_per_s": round(sentences / median(seconds), 1),
                }
            backend.close()
    finally:
        redis_server.process(redis).down()
    base = rows[str(worker_counts[0])]["seconds_median"]
    for row in rows.values():
        row["speedup_vs_first"] = round(base / row["seconds_median"], 2)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--embedders", default="remote,local")
    args = parser.parse_args(argv)

    import json
    import sys

    from bench.common import RESULTS, SHARED

    counts = [int(n) for n in args.workers.split(",")]
    # Embedders measured by an earlier run (another --embedders) are kept.
    previous = RESULTS / "ingest_scaling.json"
    kept = json.loads(previous.read_text())["results"] if previous.exists() else {}
    source = SHARED / "eval" / "scifact" / "beir_derived" / "corpus.jsonl"
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "scifact.jsonl"
        corpus.write_text("\n".join(source.read_text().splitlines()[: args.documents]) + "\n")
        for embedder in args.embedders.split(","):
            began = time.monotonic()
            rows = measure(embedder, counts, args.documents, args.runs, corpus, Path(tmp))
            results[embedder] = {
                "command": " ".join(["python", "-m", "bench.ingest_scaling", *sys.argv[1:]]),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "documents": args.documents,
                "workers": rows,
            }
            print(embedder, results[embedder], f"({time.monotonic() - began:.0f} s)", flush=True)
    write_result(
        "ingest_scaling",
        "bench.ingest_scaling",
        {
            "runs": args.runs,
            "corpus": "SciFact abstracts (shared/eval/scifact/beir_derived/corpus.jsonl), first N",
            "cluster": "local 3-node Elasticsearch 9.5 (512m heap each), index 3 shards, 0 replicas",
            "remote_embedder": {
                "latency_s": list(REMOTE_LATENCY_S),
                "docs_per_task": BATCH_DOCS,
                "what": "scripted OpenAI-compatible /embeddings on loopback: hashed words, 384 dims",
            },
            "local_embedder": "packaged all-MiniLM-L6-v2 int8 on onnxruntime, 2 threads per worker",
            "docs_per_task": BATCH_DOCS,
            "results": {**kept, **results},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
