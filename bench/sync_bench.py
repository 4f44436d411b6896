r"""`chunkrag sync` on a source index of N whole documents: documents per
second of the first pass, of a pass with nothing to do, and of re-syncs
after 1% of the documents changed and 1% were deleted, each checked to touch
only those and to leave the companion exactly in step with the source.

    python -m bench.sync_bench --documents 10000 [--embedder scripted|configured] [--workers K]

Source: SciFact's 5,183 abstracts as `title`/`body` documents (numbered
copies past that). `scripted`: a scripted embedding server over HTTP (the
sync's own cost); `configured`: the settings' embedder. `--workers K`: K
Celery workers on their own Redis database. Rows accumulate in sync.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from bench.common import SHARED, merge_result

CORPUS = SHARED / "eval" / "scifact" / "beir_derived" / "corpus.jsonl"
REDIS_DB = 15  # the workers' own queue database, flushed before and after
DIMS = 384
CHANGED = 0.01  # share of the documents changed before each re-sync
DELETED = 0.01  # and deleted
MAPPING = {
    "settings": {"number_of_shards": 1, "number_of_replicas": 0},
    "mappings": {"properties": {"title": {"type": "text"}, "body": {"type": "text"}, "url": {"type": "keyword"}}},
}


def source_documents(n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    records = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    records = [r for r in records if r.get("text")]
    for i in range(n):
        record = records[i % len(records)]
        copy = i // len(records)
        prefix = f"Copy {copy}. " if copy else ""
        yield f"doc-{i}", {"title": record["title"], "body": prefix + record["text"], "url": f"scifact/{record['_id']}"}


def fill(client, index: str, n: int) -> None:
    client.delete_index(index)
    client.create_index(index, MAPPING)
    actions = (
        {"_op_type": "index", "_index": index, "_id": doc_id, "_source": source}
        for doc_id, source in source_documents(n)
    )
    failed = [item for ok, item in client.bulk(actions, chunk_size=1000, max_retries=3, initial_backoff=1) if not ok]
    if failed:
        raise RuntimeError(f"{len(failed)} source documents not written, e.g. {failed[0]}")
    client.refresh(index)


def touch(client, index: str, n: int, round_number: int) -> tuple[int, int]:
    """Change one share of the documents and delete another (different ones
    each round); (changed, deleted)."""
    step = int(1 / CHANGED)
    changed_ids = [f"doc-{i}" for i in range(round_number, n, step)]
    deleted_ids = [f"doc-{i}" for i in range(round_number + step // 2, n, step)]
    current = {doc["_id"]: doc["_source"] for doc in client.fetch(index, changed_ids)}
    actions = [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {**source, "body": source["body"] + f" Revised in round {round_number}."},
        }
        for doc_id, source in current.items()
    ] + [{"_op_type": "delete", "_index": index, "_id": doc_id} for doc_id in deleted_ids]
    results = list(client.bulk(actions, chunk_size=1000, max_retries=3, initial_backoff=1))
    client.refresh(index)
    deleted = sum(1 for ok, item in results if ok and "delete" in item)
    return len(current), deleted


@contextlib.contextmanager
def embedding_env(kind: str) -> Iterator[dict[str, str]]:
    """The environment the sync (and its workers) run with."""
    if kind == "configured":
        yield dict(os.environ)
        return
    from local_services.scripted_openai import ScriptedOpenAI, embeddings

    with ScriptedOpenAI(default=embeddings(DIMS)) as server:
        server._server.handle_error = lambda request, client_address: None
        yield {
            **os.environ,
            "CHUNKRAG_EMBED_PROVIDER": "openai",
            "CHUNKRAG_EMBED_MODEL": "scripted-hashing",
            "CHUNKRAG_EMBED_BASE_URL": server.base_url,
            "CHUNKRAG_EMBED_DIMS": str(DIMS),
        }


@contextlib.contextmanager
def worker_pool(env: dict[str, str], count: int) -> Iterator[dict[str, str]]:
    if not count:
        yield env
        return
    import redis

    from chunkrag_core.settings import Settings
    from local_services.celery_workers import CeleryWorkers

    url = Settings.from_env(env).redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    env = {**env, "REDIS_URL": url}
    store = redis.Redis.from_url(url)
    store.flushdb()
    try:
        with CeleryWorkers(env, Path(tempfile.mkdtemp(prefix="sync-bench-"))) as pool:
            pool.start(count, timeout=300)
            yield env
    finally:
        store.flushdb()
        store.close()


def one_pass(env: dict[str, str], source: str, workers: int, embedder) -> dict[str, Any]:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.settings import Settings
    from ingest_pipeline.sync import sync_index

    settings = Settings.from_env(env)
    client = make_backend(settings)
    began = time.perf_counter()
    if workers:
        from workers.sync_dispatch import sync_on_workers

        report = sync_on_workers(source, client=client, settings=settings, fields=["body"])
    else:
        report = sync_index(source, client=client, embedder=embedder, settings=settings, fields=["body"])
    seconds = time.perf_counter() - began
    client.close()
    row = {k: v for k, v in dataclasses.asdict(report).items() if k in ("read", "unchanged", "rechunked", "deleted")}
    return {
        **row,
        "errors": len(report.errors),
        "complete": report.complete,
        "seconds": round(seconds, 2),
        "docs_per_s": round(report.read / seconds, 1),
    }


def drift(env: dict[str, str], source: str) -> dict[str, int]:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.settings import Settings
    from ingest_pipeline.sync import companion_drift

    settings = Settings.from_env(env)
    client = make_backend(settings)
    found = companion_drift(client, source, settings, fields=["body"])
    client.close()
    return dataclasses.asdict(found)


def measure(documents: int, kind: str, workers: int, rounds: int, engine: str) -> dict[str, Any]:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings

    source = f"bench-sync-{uuid.uuid4().hex[:8]}"
    with embedding_env(kind) as env, worker_pool({**env, "SEARCH_BACKEND": engine}, workers) as env:
        settings = Settings.from_env(env)
        client = make_backend(settings)
        embedder = None if workers else make_embedder(settings.embedder)
        try:
            fill(client, source, documents)
            first = one_pass(env, source, workers, embedder)
            print(f"first pass: {first}", file=sys.stderr)
            idle = one_pass(env, source, workers, embedder)
            print(f"nothing changed: {idle}", file=sys.stderr)
            resyncs = []
            for number in range(rounds):
                changed, deleted = touch(client, source, documents, number + 1)
                row = one_pass(env, source, workers, embedder)
                row.update(changed_in_source=changed, deleted_in_source=deleted, drift=drift(env, source))
                row["touched_only_those"] = row["rechunked"] == changed and row["deleted"] == deleted
                print(f"re-sync {number + 1}: {row}", file=sys.stderr)
                resyncs.append(row)
        finally:
            client.delete_index(source)
            client.delete_index(source + "-chunkrag")
            client.close()
    return {
        "documents": documents,
        "embedder": kind if kind == "scripted" else f"{settings.embedder.provider}:{settings.embedder.model}",
        "workers": workers,
        "engine": engine,
        "first_pass": first,
        "nothing_changed_pass": idle,
        "resyncs": resyncs,
        "resync_median_s": round(statistics.median(r["seconds"] for r in resyncs), 2) if resyncs else None,
        "load_average_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--embedder", choices=("scripted", "configured"), default="scripted")
    parser.add_argument("--workers", type=int, default=0, help="Celery workers (0: in process)")
    parser.add_argument("--rounds", type=int, default=3, help="re-syncs after 1%% changed and 1%% deleted")
    parser.add_argument("--engine", choices=("elasticsearch", "opensearch"), default="elasticsearch")
    args = parser.parse_args(argv)
    before = os.getloadavg()
    row = measure(args.documents, args.embedder, args.workers, args.rounds, args.engine)
    key = f"{args.engine}/{args.embedder}/{args.documents} documents/" + (
        f"{args.workers} workers" if args.workers else "in process"
    )
    print(json.dumps({key: row}))
    merge_result("sync", "bench.sync_bench", f"run: {key}", {"load_average_before": before}, "rows", {key: row})
    return 0


if __name__ == "__main__":
    sys.exit(main())
