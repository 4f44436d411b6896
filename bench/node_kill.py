"""A node lost mid-flight on a three-node Elasticsearch (or OpenSearch) cluster, counted.

    python -m bench.node_kill --documents 800 --runs 3 [--victim primary] [--engine opensearch]

Starts a three-node cluster (ports 19300-19305), its own Redis (16410), two
Celery workers and a scripted embedding server over HTTP
(local_services/scripted_openai.py); every client gets all three node URLs.
1. ingest: ``--documents`` SciFact abstracts (and one malformed line) into 3
   shards with 1 replica; a quarter in, node 0 (``--victim primary``: another
   primary holder) is SIGKILLed. Every chunk must land once; the node comes
   back, time to green is measured; a re-run must find every document unchanged.
2. searches through the gateway while that node is killed and restarted: each
   answer's status, ``_shards.failed`` and reason.
Writes node_kill_node0.json (node_kill.json with ``--victim primary``;
``_opensearch`` for OpenSearch); tests/integration/test_cluster_node_loss.py
runs the same, smaller. A node that hangs (SIGSTOP) was measured by a mode
since retired (bench/REPORT.md, node_hang.json).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

CLUSTER_PORT = 19300
OPENSEARCH_CLUSTER_PORT = 19340
REDIS_PORT = 16410
EMBED_LATENCY_S = (0.02, 0.05)
DIMS = 384


@dataclasses.dataclass
class Rig:
    cluster: Any  # local_services.cluster.LocalCluster
    settings: Any  # chunkrag_core.settings.Settings: clients are given every node's URL
    env: dict[str, str]  # the workers' environment
    workers: Any  # local_services.celery_workers.CeleryWorkers
    embed_url: str
    log_dir: Path


@contextlib.contextmanager
def rig(
    log_dir: Path,
    *,
    workers: int = 2,
    first_port: int = CLUSTER_PORT,
    redis_port: int = REDIS_PORT,
    embed_latency_s: tuple[float, float] = EMBED_LATENCY_S,
    stop_cluster: bool = True,
    extra_env: dict[str, str] | None = None,
    engine: str = "elasticsearch",
) -> Iterator[Rig]:
    """The cluster of ``engine``, a Redis, the embedding server and the
    workers, all real processes (the model's answers alone are scripted);
    stopped after."""
    from chunkrag_core.settings import Settings, state_home
    from local_services import cluster as local_cluster
    from local_services import redis_server
    from local_services.celery_workers import CeleryWorkers
    from local_services.scripted_openai import ScriptedOpenAI, embeddings

    home = state_home(os.environ)
    local = local_cluster.LocalCluster(engine, home, first_port=first_port, nodes=3, heap="512m")
    redis = redis_server.RedisSettings(home=home, port=redis_port)
    try:
        local_cluster.up(local, timeout=600)
        redis_server.process(redis).up()
    except BaseException:
        # A cluster that did not come up (a node too slow on a busy machine, a
        # port taken) is stopped here: its nodes run as daemons and would
        # outlive the caller.
        redis_server.process(redis).down()
        local_cluster.down(local)
        raise
    try:
        with ScriptedOpenAI(default=embeddings(DIMS, embed_latency_s)) as server:
            server._server.handle_error = lambda request, client_address: None
            inherited = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(
                    ("CHUNKRAG_WORKER_", "CHUNKRAG_EMBED_", "CHUNKRAG_INDEX_", "ES_", "OPENSEARCH_", "SEARCH_")
                )
            }
            env = {
                **inherited,
                **engine_env(engine, local.url),
                "REDIS_URL": redis.url,
                "CHUNKRAG_EMBED_PROVIDER": "openai",
                "CHUNKRAG_EMBED_MODEL": "scripted-hashing",
                "CHUNKRAG_EMBED_BASE_URL": server.base_url,
                "CHUNKRAG_EMBED_DIMS": str(DIMS),
                "CHUNKRAG_INDEX_SHARDS": "3",
                "CHUNKRAG_INDEX_REPLICAS": "1",
                # Backoff 1, 2, 4, 8 s...: a primary is promoted within seconds.
                "CHUNKRAG_WORKER_RETRY_BACKOFF_S": "1",
                "CHUNKRAG_WORKER_RETRY_BACKOFF_MAX_S": "8",
                "CHUNKRAG_WORKER_INGEST_MAX_RETRIES": "10",
                "CHUNKRAG_WORKER_QUERY_BUDGET_S": "20",
                # One batch's run is stopped after this; a batch held by a
                # worker that died comes back from the broker after
                # 180 + backoff max + 5 s = 193 s, but the dispatcher sends
                # it again within seconds, as soon as the worker stops
                # answering pings.
                "CHUNKRAG_WORKER_INGEST_BATCH_BUDGET_S": "180",
                **(extra_env or {}),
            }
            _redis(redis.url).flushdb()  # messages a killed earlier run left behind
            with CeleryWorkers(env, log_dir) as pool:
                pool.start(workers, timeout=120)
                yield Rig(local, Settings.from_env(env), env, pool, server.base_url, log_dir)
    finally:
        redis_server.process(redis).down()
        if stop_cluster:
            local_cluster.down(local)


def engine_env(engine: str, url: str) -> dict[str, str]:
    """The variables that point the project's clients at ``url`` as ``engine``."""
    if engine == "opensearch":
        return {"SEARCH_BACKEND": "opensearch", "OPENSEARCH_URL": url}
    return {"SEARCH_BACKEND": "elasticsearch", "ES_URL": url}


def _redis(url: str):
    import redis

    return redis.Redis.from_url(url)


def scifact_corpus(path: Path, documents: int) -> tuple[Path, int]:
    """The first ``documents`` SciFact abstracts as JSONL, and one malformed
    line in the middle; returns the file and the valid documents in it."""
    from bench.common import SHARED

    source = SHARED / "eval" / "scifact" / "beir_derived" / "corpus.jsonl"
    lines = source.read_text().splitlines()[:documents]
    lines.insert(len(lines) // 2, '{"_id": "broken", "text": ')
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines) - 1


def expected_chunk_ids(corpus: Path, settings) -> set[str]:
    """Every chunk id the source makes, chunked here with the same settings
    and embedder the workers use (independently of any index)."""
    from chunkrag_core.providers import make_embedder
    from ingest_pipeline.chunker import chunk_documents
    from ingest_pipeline.pipeline import shaping_of
    from ingest_pipeline.sources import Document, read_sources

    documents = [d for d in read_sources([corpus]) if isinstance(d, Document)]
    embedder = make_embedder(settings.embedder)
    ids: set[str] = set()
    for begin in range(0, len(documents), 64):
        chunked = chunk_documents(documents[begin : begin + 64], embedder, settings.chunking, shaping_of(settings))
        ids.update(c.chunk_id for item in chunked for c in item.chunks)
    return ids


def count_against_source(client, index: str, expected: set[str]) -> dict[str, Any]:
    """The index's chunks against the source's: missing and extra ids, and
    chunks stored twice (the same doc_id, position and scale under two ids).
    ``client`` is the engine's own (elasticsearch-py or opensearch-py)."""
    client.indices.refresh(index=index)
    stored: list[str] = []
    places: collections.Counter = collections.Counter()
    scan = _helpers(client).scan
    for hit in scan(client, index=index, query={"_source": ["doc_id", "position", "scale"]}, size=2000):
        stored.append(hit["_id"])
        source = hit["_source"]
        places[(source["doc_id"], source["position"], source.get("scale", 0))] += 1
    return {
        "expected": len(expected),
        "stored": len(stored),
        "count": client.count(index=index)["count"],
        "missing": len(expected - set(stored)),
        "extra": len(set(stored) - expected),
        "duplicates": sum(n - 1 for n in places.values() if n > 1),
    }


# Which node is SIGKILLed: node 0, the first URL of every client, or
# "primary": a node other than node 0 holding a primary of the index.
VICTIMS = ("node0", "primary")


def pick_victim(victim: str, local, client, index: str) -> int:
    return 0 if victim == "node0" else node_with_a_primary(local, client, index)


def primaries_on(local, client, index: str, node: int) -> int:
    """How many primaries of ``index`` ``node`` holds."""
    shards = client.cat.shards(index=index, format="json")
    return sum(1 for s in shards if s["prirep"] == "p" and s.get("node") == local.node_name(node))


def node_with_a_primary(local, client, index: str) -> int:
    """A node other than node 0 that holds a primary of ``index``."""
    shards = client.cat.shards(index=index, format="json")
    names = {s["node"] for s in shards if s["prirep"] == "p" and s.get("node")}
    for node in range(1, local.nodes):
        if local.node_name(node) in names:
            return node
    return local.nodes - 1


# Longest wait for every copy of the index to be started before a node is
# killed (seconds): a new index's replicas recover from their primaries in
# its first seconds, and under load this takes longer.
COPIES_WAIT_S = 300


def wait_for_every_copy(client, index: str, timeout_s: float = COPIES_WAIT_S) -> float:
    """Until every shard of ``index`` has its replica started (green), so
    that the node about to be killed holds no primary whose only other copy
    is still recovering from it (that shard would have no copy to promote:
    red until the node returns, and a write to it waits for that); returns
    the seconds waited."""
    began = time.monotonic()
    # Asked again and again rather than with the API's own wait: the two
    # engines' clients read a `timeout` argument differently.
    while client.cluster.health(index=index).get("status") != "green":
        if time.monotonic() - began > timeout_s:
            shards = client.cat.shards(index=index, format="json")
            states = sorted(f"{s['shard']}{s['prirep']} {s['state']} on {s.get('node')}" for s in shards)
            raise RuntimeError(f"{index} was not green within {timeout_s:g} s before the kill: {', '.join(states)}")
        time.sleep(0.25)
    return time.monotonic() - began


def worker_retries(log_dir: Path) -> list[str]:
    """Each retry the workers logged ("Retry in 2s: <why>"), newest last."""
    lines = []
    for log in sorted(log_dir.glob("*.log")):
        lines += [line for line in log.read_text(errors="replace").splitlines() if "retry: Retry in" in line]
    return [re.sub(r"^.*?retry: ", "", line)[:300] for line in lines]


def ingest_in_background(backend, settings, corpus: Path, batches: int, kill_at: float):
    """Start ``chunkrag ingest --workers``'s library call on a thread and
    return once ``kill_at`` of its ``batches`` are done (or it ended): the
    thread, its outcome (``report`` or ``failure``) and when it began."""
    from ingest_pipeline.sources import read_sources
    from workers.ingest_dispatch import ingest_documents_on_workers

    reached = threading.Event()
    outcome: dict[str, Any] = {}

    def on_batch(done: int) -> None:
        if done >= max(1, int(batches * kill_at)):
            reached.set()

    def run() -> None:
        try:
            outcome["report"] = ingest_documents_on_workers(
                read_sources([corpus]), client=backend, settings=settings, progress=False, on_batch=on_batch
            )
        except BaseException as exc:  # reported by the caller
            outcome["failure"] = exc
        finally:
            reached.set()

    began = time.monotonic()
    thread = threading.Thread(target=run, name="ingest", daemon=True)
    thread.start()
    reached.wait(600)
    return thread, outcome, began


# Longest wait for the ingest after the kill; the dispatcher bounds its own
# waits well within this, so reaching it is a finding, reported as such.
INGEST_WAIT_S = 900


def ingest_report(thread: threading.Thread, outcome: dict[str, Any], log_dir: Path, what: str):
    """The ingest's report once its thread ends; its exception, or an error
    saying it did not finish (with the workers' logs' tails), otherwise."""
    thread.join(INGEST_WAIT_S)
    if "failure" in outcome:
        raise outcome["failure"]
    if "report" not in outcome:
        logs = "\n".join(f"--- {log.name} ---\n{_tail(log)}" for log in sorted(log_dir.glob("*.log")))
        raise RuntimeError(
            f"the distributed ingest did not return within {INGEST_WAIT_S} s of {what} "
            f"(thread {'still running' if thread.is_alive() else 'ended without a report'}); "
            f"the workers' logs end:\n{logs}"
        )
    return outcome["report"]


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def ingest_with_node_kill(
    the_rig: Rig,
    corpus: Path,
    documents: int,
    index: str,
    kill_at: float = 0.25,
    victim: str = "primary",
    green_timeout_s: float = 600,
) -> dict:
    """Ingest ``corpus`` on the workers, killing a node (``victim``: one of
    VICTIMS) once ``kill_at`` of the batches are done; then count, restart
    the node, time to green, run again. A cluster not green within
    ``green_timeout_s`` of the node's return is recorded (``not_green``, with
    the engine's shard states), not raised: the counts and the second run
    still tell whether anything was lost."""
    from chunkrag_core.engines import make_backend
    from ingest_pipeline.sources import read_sources
    from local_services import cluster as local_cluster
    from local_services.process import LocalServiceError
    from workers.ingest_dispatch import ingest_documents_on_workers

    settings = dataclasses.replace(the_rig.settings, index=index)
    backend = make_backend(settings)
    expected = expected_chunk_ids(corpus, settings)
    batches = math.ceil(documents / settings.workers.ingest_batch_docs)
    thread, outcome, began = ingest_in_background(backend, settings, corpus, batches, kill_at)
    copies_wait_s = wait_for_every_copy(backend.client, index) if "failure" not in outcome else None
    chosen = victim
    victim = pick_victim(chosen, the_rig.cluster, backend.client, index) if "failure" not in outcome else 2
    primaries = primaries_on(the_rig.cluster, backend.client, index, victim) if "failure" not in outcome else None
    pid = local_cluster.kill_node(the_rig.cluster, victim)
    killed_at = time.monotonic() - began
    report = ingest_report(thread, outcome, the_rig.log_dir, f"node {victim} was killed")
    with_node_down = count_against_source(backend.client, index, expected)
    restarted = time.monotonic()
    local_cluster.start_node(the_rig.cluster, victim, timeout=600, log=lambda _m: None)
    green_s, not_green = None, None
    try:
        green_s = local_cluster.seconds_to_status(the_rig.cluster, "green", timeout=green_timeout_s)
    except LocalServiceError as exc:
        shards = backend.client.cat.shards(index=index, format="json")
        states = sorted(f"{s['shard']}{s['prirep']} {s['state']} on {s.get('node')}" for s in shards)
        not_green = f"{exc}; shards: {', '.join(states)}"
    after_restart = count_against_source(backend.client, index, expected)
    again = ingest_documents_on_workers(read_sources([corpus]), client=backend, settings=settings, progress=False)
    result = {
        "documents": documents,
        "batches": batches,
        "victim": chosen,
        "killed_node": the_rig.cluster.node_name(victim),
        "killed_node_primaries": primaries,
        "killed_pid": pid,
        "killed_after_s": round(killed_at, 2),
        "waited_for_every_copy_s": None if copies_wait_s is None else round(copies_wait_s, 2),
        "ingest_s": report.seconds,
        "report": {
            "documents": report.documents,
            "chunks": report.chunks,
            "skipped": [str(s) for s in report.skipped],
            "errors": list(report.errors),
        },
        "retries_seen_by_workers": worker_retries(the_rig.log_dir),
        "count_with_node_down": with_node_down,
        "node_restart_to_green_s": round(time.monotonic() - restarted, 2) if not_green is None else None,
        "green_after_rejoin_s": round(green_s, 2) if green_s is not None else None,
        "not_green": not_green,
        "count_after_restart": after_restart,
        "second_run": {"documents": again.documents, "unchanged": again.unchanged, "errors": list(again.errors)},
        "count_after_second_run": count_against_source(backend.client, index, expected),
    }
    backend.close()
    return result


QUERIES = (
    "vitamin D deficiency and bone density",
    "gene expression in cancer cells",
    "antibiotic resistance in bacteria",
    "insulin signalling and diabetes",
    "T cell response to infection",
)


# Longest wait for the searches' first answers before a node is taken down.
FIRST_ANSWERS_WAIT_S = 120


def searches_with_node_kill(
    the_rig: Rig,
    index: str,
    *,
    before_s: float = 5.0,
    down_s: float = 15.0,
    after_s: float = 5.0,
    victim: str = "primary",
    passthrough: bool = False,
    streams: int = 1,
) -> dict:
    """Searches through the gateway, one after another on each of
    ``streams`` threads, while a node (``victim``: one of VICTIMS) is lost
    for ``down_s`` and comes back: every answer, and its latency. Filtered
    searches (``ext.chunkrag``: the gateway's Elasticsearch client) only, or
    with ``passthrough`` every other one a plain search (the gateway's own
    pools). The node is SIGKILLed and started again after ``down_s``."""
    import httpx

    from chunkrag_core.providers import make_embedder
    from chunkrag_gateway import create_app
    from chunkrag_gateway.server import serve_in_thread
    from local_services import cluster as local_cluster

    settings = dataclasses.replace(the_rig.settings, index=index)
    answers: list[dict[str, Any]] = []
    stop = threading.Event()
    phase = {"now": "before"}

    def search(url: str, n: int) -> None:
        body = {
            "query": {
                "bool": {
                    "must": {"match": {"text": QUERIES[n % len(QUERIES)]}},
                    "filter": {"exists": {"field": "doc_id"}},
                }
            },
            "size": 5,
        }
        kind = "plain" if passthrough and n % 2 else "filtered"
        if kind == "filtered":
            body["ext"] = {"chunkrag": {"candidates": 10, "stages": False}}
        began = time.monotonic()
        try:
            response = httpx.post(f"{url}/{index}/_search", json=body, timeout=60)
            data = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
            record = {
                "phase": phase["now"],
                "kind": kind,
                "status": response.status_code,
                "shards_failed": (data.get("_shards") or {}).get("failed"),
                "hits": len((data.get("hits") or {}).get("hits", [])),
                "reason": _reason(data) if response.status_code >= 400 else None,
            }
        except httpx.HTTPError as exc:
            record = {"phase": phase["now"], "kind": kind, "status": None, "reason": f"{type(exc).__name__}: {exc}"}
        record["seconds"] = round(time.monotonic() - began, 3)
        answers.append(record)

    def stream(url: str, first: int) -> None:
        n = first
        while not stop.is_set():
            search(url, n)
            n += 1
            time.sleep(0.1)

    embedder = make_embedder(settings.embedder)
    with serve_in_thread(create_app(settings, embedder=embedder)) as url:
        threads = [threading.Thread(target=stream, args=(url, i), name=f"searches-{i}") for i in range(streams)]
        for thread in threads:
            thread.start()
        time.sleep(before_s)
        # On a busy machine the first searches (the first loads the embedder)
        # may not have answered yet: the node goes down once every stream has
        # had an answer before it, or after FIRST_ANSWERS_WAIT_S at most.
        deadline = time.monotonic() + FIRST_ANSWERS_WAIT_S
        while sum(a["phase"] == "before" for a in answers) < streams and time.monotonic() < deadline:
            time.sleep(0.2)
        wait_for_every_copy(engine_client(settings), index)
        chosen = victim
        victim = pick_victim(chosen, the_rig.cluster, engine_client(settings), index)
        phase["now"] = "node down"
        pid = local_cluster.kill_node(the_rig.cluster, victim)
        time.sleep(down_s)
        phase["now"] = "node restarting"
        restarted = time.monotonic()
        local_cluster.start_node(the_rig.cluster, victim, timeout=600, log=lambda _m: None)
        local_cluster.seconds_to_status(the_rig.cluster, "green", timeout=600)
        to_green = time.monotonic() - restarted
        phase["now"] = "after"
        time.sleep(after_s)
        stop.set()
        for thread in threads:
            thread.join(120)
    by_phase: dict[str, dict[str, int]] = {}
    by_kind: dict[str, dict[str, dict[str, int]]] = {}
    for answer in answers:
        key = str(answer["status"])
        counts = by_phase.setdefault(answer["phase"], {})
        counts[key] = counts.get(key, 0) + 1
        kinds = by_kind.setdefault(answer["phase"], {}).setdefault(answer["kind"], {})
        kinds[key] = kinds.get(key, 0) + 1
    return {
        "victim": chosen,
        "streams": streams,
        "down_s": down_s,
        "killed_node": the_rig.cluster.node_name(victim),
        "killed_pid": pid,
        "restart_to_green_s": round(to_green, 2),
        "searches": len(answers),
        "statuses_by_phase": by_phase,
        "statuses_by_phase_and_kind": by_kind,
        "shards_failed_seen": sorted({a.get("shards_failed") for a in answers if a.get("shards_failed")}),
        "errors": [a for a in answers if a["status"] != 200],
        "latency_s_median": sorted(a["seconds"] for a in answers)[len(answers) // 2] if answers else None,
        "latency_s_by_phase_and_kind": {
            phase: {
                kind: latencies([a["seconds"] for a in answers if a["phase"] == phase and a["kind"] == kind])
                for kind in by_kind[phase]
            }
            for phase in by_phase
        },
    }


def latencies(seconds: list[float]) -> dict[str, float | int | None]:
    """How many, p50, p95 and max of ``seconds`` (nearest-rank percentiles)."""
    ordered = sorted(seconds)
    if not ordered:
        return {"n": 0, "p50": None, "p95": None, "max": None}

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"n": len(ordered), "p50": rank(0.5), "p95": rank(0.95), "max": ordered[-1]}


def engine_client(settings):
    """The raw client of the engine ``settings`` choose, at its URL."""
    if settings.search_backend == "opensearch":
        from opensearchpy import OpenSearch

        return OpenSearch(list(settings.opensearch_nodes))
    from elasticsearch import Elasticsearch

    return Elasticsearch(list(settings.es_nodes))


def _helpers(client):
    """The bulk helpers module of ``client``'s library."""
    if type(client).__module__.startswith("opensearchpy"):
        from opensearchpy import helpers
    else:
        from elasticsearch import helpers
    return helpers


def _reason(data: dict) -> str | None:
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("reason") or error.get("type") or error)[:300]
    return str(error)[:300] if error else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=1200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--victim", choices=VICTIMS, default="node0", help="the node killed (default: node 0)")
    parser.add_argument("--engine", choices=("elasticsearch", "opensearch"), default="elasticsearch")
    parser.add_argument(
        "--green-timeout", type=float, default=600, help="seconds to wait for green once the killed node is back"
    )
    parser.add_argument("--first-port", type=int, default=None, help="the cluster's first HTTP port")
    parser.add_argument("--redis-port", type=int, default=REDIS_PORT)
    args = parser.parse_args(argv)

    from bench.common import write_result

    runs = []
    for the_rig, corpus, documents, index in rigs_per_run(args):
        ingest = ingest_with_node_kill(
            the_rig, corpus, documents, index, victim=args.victim, green_timeout_s=args.green_timeout
        )
        searches = searches_with_node_kill(the_rig, index, victim=args.victim, passthrough=True)
        engine_client(the_rig.settings).indices.delete(index=index)
        runs.append({"ingest": ingest, "searches": searches})
        print(json.dumps(runs[-1], default=str)[:2000], flush=True)
    # A run that never turned green again records None: left out of the medians.
    greens = sorted(g for r in runs if (g := r["ingest"]["node_restart_to_green_s"]) is not None) or [None]
    write_result(
        # node 0 killed: its own file, beside the earlier runs that killed another node.
        ("node_kill" if args.victim == "primary" else "node_kill_node0")
        + ("" if args.engine == "elasticsearch" else f"_{args.engine}"),
        "bench.node_kill",
        {
            "runs": runs,
            "medians": {
                "ingest_restart_to_green_s": greens[len(greens) // 2],
                "search_restart_to_green_s": sorted(r["searches"]["restart_to_green_s"] for r in runs)[len(runs) // 2],
                "ingest_s": sorted(r["ingest"]["ingest_s"] for r in runs)[len(runs) // 2],
            },
            "chunks_lost": sum(r["ingest"]["count_after_restart"]["missing"] for r in runs),
            "duplicates": sum(r["ingest"]["count_after_restart"]["duplicates"] for r in runs),
            "search_errors": sum(len(r["searches"]["errors"]) for r in runs),
            "victim": args.victim,
            "clients_given": "every node's URL ({}=<node 0>,<node 1>,<node 2>)".format(
                "ES_URL" if args.engine == "elasticsearch" else "OPENSEARCH_URL"
            ),
        },
    )
    return 0


def rigs_per_run(args) -> Iterator[tuple[Rig, Path, int, str]]:
    """For each of ``args.runs``: the rig (its cluster kept up between runs,
    stopped after the last), the SciFact corpus, its document count and a
    fresh index name."""
    # Each engine's cluster on a port block of its own.
    first_port = args.first_port or (CLUSTER_PORT if args.engine == "elasticsearch" else OPENSEARCH_CLUSTER_PORT)
    with tempfile.TemporaryDirectory() as tmp:
        corpus, documents = scifact_corpus(Path(tmp) / "scifact.jsonl", args.documents)
        for run in range(args.runs):
            log_dir = Path(tmp) / f"workers-{run}"
            log_dir.mkdir()
            with rig(
                log_dir,
                stop_cluster=run == args.runs - 1,
                engine=args.engine,
                first_port=first_port,
                redis_port=args.redis_port,
            ) as the_rig:
                yield the_rig, corpus, documents, f"bench-node-kill-{run}-{int(time.time())}"


if __name__ == "__main__":
    raise SystemExit(main())
