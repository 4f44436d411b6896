"""What the gateway adds to a search: the same hybrid query sent straight to
Elasticsearch and through the gateway, interleaved.

    python -m bench.gateway_bench [--runs 5] [--requests 300] [--name gateway]
    python -m bench.gateway_soak [--clients 32] [--duration 300]   (load and soak)

On the `bench-scifact` index (left by `bench.ingest_bench`) with SciFact's
test queries: pass-through (the `native_sum` hybrid body, query vectors
computed beforehand, forwarded unchanged), and ext.chunkrag with no model
stages (`stages: false`: the gateway embeds the query and runs the same
search) against embedding here and sending the same body directly. The
gateway runs as `chunkrag serve` in its own process; the client is a lean
urllib3 pool with pre-encoded bodies; each pair alternates which goes first;
p50/p95 per run, medians over runs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

from bench.common import RESULTS, median, write_result
from bench.metrics import percentile

INDEX = "bench-scifact"
# Sections of results/gateway.json written by `load` and `fuzz` (gateway_soak.py).
SEPARATE_SECTIONS = ("load", "fuzz")
SIZE = 10
WARMUP = 50
# How long the gateway may take to start (imports, first health check): a
# few seconds on a quiet machine, more than a minute on one shared with heavy work.
STARTUP_S = 180.0
# What the pass-through may add to a search at p50, on a quiet machine (ms).
GOAL_ADDED_MS = 0.3
COMPAT = "application/vnd.elasticsearch+json; compatible-with=9"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gateway(port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    # Started the way a user starts it; its output is discarded so logging
    # to a pipe nobody reads cannot block it.
    process = subprocess.Popen(
        [sys.executable, "-m", "chunkrag_cli", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    import urllib3

    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        try:
            if urllib3.request("GET", f"http://127.0.0.1:{port}/v1/health", timeout=2, retries=False).status == 200:
                return process
        except urllib3.exceptions.HTTPError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"the gateway exited with {process.returncode}")
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    raise RuntimeError(f"the gateway did not become healthy within {STARTUP_S:g} s")


class Timed:
    """POSTs pre-encoded bodies over a keep-alive connection pool."""

    def __init__(self, base_url: str):
        import urllib3

        self.pool = urllib3.connection_from_url(base_url, maxsize=1, retries=False, timeout=30)

    def post(self, path: str, body: bytes) -> tuple[float, bytes]:
        started = time.perf_counter()
        response = self.pool.urlopen("POST", path, body=body, headers={"content-type": COMPAT, "accept": COMPAT})
        data = response.data
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}: {data[:300]!r}")
        return elapsed, data


def hit_ids(data: bytes) -> list[str]:
    import orjson

    return [hit["_id"] for hit in orjson.loads(data)["hits"]["hits"]]


def summary(per_run: list[dict[str, list[float]]], name: str) -> dict:
    p50s = [percentile(run[name], 0.5) for run in per_run]
    p95s = [percentile(run[name], 0.95) for run in per_run]
    return {
        "p50_ms": median(p50s),
        "p95_ms": median(p95s),
        "runs_p50_ms": [round(v, 3) for v in p50s],
        "runs_p95_ms": [round(v, 3) for v in p95s],
    }


def versions(client) -> dict:
    packages = {
        name: importlib.metadata.version(name)
        for name in (
            "elasticsearch",
            "fastapi",
            "starlette",
            "uvicorn",
            "httpx",
            "aiohttp",
            "h11",
            "urllib3",
            "orjson",
        )
    }
    nodes = client.nodes.info(node_id="_local", filter_path="nodes.*.version")["nodes"]
    return {"elasticsearch_server": next(iter(nodes.values()))["version"], **packages}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import orjson

    from bench.retrieval_bench import load_queries
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from search_extension import queries

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300, help="timed request pairs per comparison per run")
    parser.add_argument("--index", default=INDEX)
    parser.add_argument("--name", default="gateway", help="results file name (bench/results/NAME.json)")
    parser.add_argument(
        "--comparisons",
        default="passthrough,chunkrag_no_stages",
        help="which comparisons to run, comma-separated (an A/B of the pass-through alone: passthrough)",
    )
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    client = make_backend(settings).client
    if not client.indices.exists(index=args.index):
        print(f"index {args.index!r} missing: run `python -m bench.ingest_bench` first", file=sys.stderr)
        return 1
    texts = list(load_queries()[0].values())
    embedder = make_embedder(settings.embedder)
    vectors = embedder.embed(texts)

    def hybrid_body(text, vector) -> bytes:
        spec = queries.QuerySpec(text=text, vector=vector, size=SIZE, num_candidates=settings.retrieval.num_candidates)
        return orjson.dumps(
            queries.native_sum_body(spec, settings.retrieval.bm25_weight, settings.retrieval.knn_weight)
        )

    hybrid = [hybrid_body(t, v) for t, v in zip(texts, vectors)]
    chunkrag = [
        orjson.dumps(
            {
                "query": {"match": {"text": t}},
                "size": SIZE,
                "ext": {"chunkrag": {"stages": False, "mode": "native_sum", "candidates": SIZE}},
            }
        )
        for t in texts
    ]
    path = f"/{args.index}/_search"

    load_at_start = os.getloadavg()[0]
    port = free_port()
    gateway_process = start_gateway(port)
    try:
        es, gateway = Timed(settings.es_nodes[0]), Timed(f"http://127.0.0.1:{port}")

        def direct_with_embedding(i: int) -> tuple[float, bytes]:
            started = time.perf_counter()
            body = hybrid_body(texts[i], embedder.embed([texts[i]])[0])
            _, data = es.post(path, body)
            return (time.perf_counter() - started) * 1000, data

        def through_gateway_chunkrag(i: int) -> tuple[float, bytes]:
            return gateway.post(path, chunkrag[i])

        every = {
            "passthrough": (lambda i: es.post(path, hybrid[i]), lambda i: gateway.post(path, hybrid[i])),
            "chunkrag_no_stages": (direct_with_embedding, through_gateway_chunkrag),
        }
        comparisons = {name: every[name] for name in args.comparisons.split(",")}
        same_hits = {name: 0 for name in comparisons}
        for name, (direct, proxied) in comparisons.items():
            for i in range(WARMUP):
                direct(i % len(texts))
                proxied(i % len(texts))
            for i in range(len(texts)):
                same_hits[name] += hit_ids(direct(i)[1]) == hit_ids(proxied(i)[1])

        per_run: list[dict[str, list[float]]] = []
        for run in range(args.runs):
            timings: dict[str, list[float]] = {
                f"{name}_{side}": [] for name in comparisons for side in ("direct", "gateway")
            }
            for name, (direct, proxied) in comparisons.items():
                for n in range(args.requests):
                    i = (run * args.requests + n) % len(texts)
                    pair = [("direct", direct), ("gateway", proxied)]
                    for side, send in pair if n % 2 == 0 else reversed(pair):
                        timings[f"{name}_{side}"].append(send(i)[0])
            per_run.append(timings)
            print(
                f"run {run + 1}: " + ", ".join(f"{k} p50 {percentile(v, 0.5):.2f} ms" for k, v in timings.items()),
                file=sys.stderr,
            )
    finally:
        gateway_process.send_signal(signal.SIGTERM)
        gateway_process.wait(timeout=30)

    results = {key: summary(per_run, key) for key in per_run[0]}

    def run_ratios(name: str) -> list[float]:
        # Both sides of a ratio come from the same run: the machine's drift
        # between runs cancels out.
        return [
            round(percentile(run[f"{name}_gateway"], 0.5) / percentile(run[f"{name}_direct"], 0.5), 3)
            for run in per_run
        ]

    def run_added(name: str) -> list[float]:
        return [
            round(percentile(run[f"{name}_gateway"], 0.5) - percentile(run[f"{name}_direct"], 0.5), 3)
            for run in per_run
        ]

    overhead = median(run_ratios("passthrough"))
    added = median(run_added("passthrough"))
    payload = {
        "index": args.index,
        "chunks": client.count(index=args.index)["count"],
        "queries": len(texts),
        "runs": args.runs,
        "requests_per_run": args.requests,
        "warmup_requests": WARMUP,
        "body": (
            f"queries.native_sum_body, size {SIZE}, k {max(100, SIZE)}, "
            f"num_candidates {settings.retrieval.num_candidates}, precomputed query vectors"
        ),
        "client": (
            "urllib3 keep-alive pool, pre-encoded bodies, one request at a time; "
            "direct and gateway alternate which goes first"
        ),
        "gateway": (
            "`chunkrag serve` (uvicorn, no access log) in its own process; "
            "pass-through over its keep-alive HTTP/1.1 pool (origin.py, aiohttp's connector)"
        ),
        # uvicorn picks uvloop and httptools by itself when they are importable.
        "gateway_server": {
            "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
        },
        "versions": versions(client),
        "load_average": {"start": round(load_at_start, 2), "end": round(os.getloadavg()[0], 2)},
        "load_note": (
            f"machine load average (1 min) {load_at_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, "
            f"on {os.cpu_count()} cores: a quiet machine reads well under 1"
        ),
        "results": results,
        "gateway_over_es_p50": overhead,
        "gateway_over_es_p50_per_run": run_ratios("passthrough"),
        "gateway_over_es_p95": round(
            results["passthrough_gateway"]["p95_ms"] / results["passthrough_direct"]["p95_ms"], 3
        ),
        **(
            {
                "chunkrag_no_stages_over_embed_plus_es_p50": median(run_ratios("chunkrag_no_stages")),
                "chunkrag_no_stages_over_embed_plus_es_p50_per_run": run_ratios("chunkrag_no_stages"),
            }
            if "chunkrag_no_stages" in comparisons
            else {}
        ),
        "ratio_note": (
            "p50 ratios are the median over runs of gateway p50 / direct p50 within each run; "
            "p95 ratio is of the medians"
        ),
        # Median over runs of gateway p50 - direct p50 within each run (as the ratios).
        "added_p50_ms": {name: median(run_added(name)) for name in comparisons},
        "added_p50_ms_per_run": {name: run_added(name) for name in comparisons},
        "same_hits_share": {name: round(count / len(texts), 4) for name, count in same_hits.items()},
        "goal": f"pass-through adds <= {GOAL_ADDED_MS} ms at p50 (added_p50_ms.passthrough)",
        "goal_met": added <= GOAL_ADDED_MS,
    }
    # The soak and the fuzz run are separate commands writing their own
    # sections of the same file: a new overhead run keeps them.
    previous = RESULTS / f"{args.name}.json"
    kept = (
        {k: v for k, v in json.loads(previous.read_text()).items() if k in SEPARATE_SECTIONS}
        if previous.is_file()
        else {}
    )
    print(write_result(args.name, "bench.gateway_bench", {**payload, **kept}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
