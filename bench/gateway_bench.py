"""What the gateway costs: three commands of one harness (`chunkrag serve` in
its own process, timed from outside).

    python -m bench.gateway_bench [--runs 5] [--requests 300] [--name gateway]
    python -m bench.gateway_bench load [--clients 32] [--duration 300] [--model-latency 0.4]
    python -m bench.gateway_bench flood [--duration 300] [--keys 1,2,4] [--runs 3] [--threads-per-key 4] [--steady]

What it adds to a search (results/gateway.json): on the `bench-scifact` index (left by `bench.ingest_bench`)
with SciFact's test queries: pass-through (the `native_sum` hybrid body, query vectors computed beforehand,
forwarded unchanged), and ext.chunkrag with no model stages (`stages: false`: the gateway embeds the query and
runs the same search) against embedding here and sending the same body directly. The client is a lean urllib3
pool with pre-encoded bodies; each pair alternates which goes first; p50/p95 per run, medians over runs.

``load`` (the ``load`` section of gateway.json, beside the pass-through and the 2026-11-23 ``fuzz`` run): the
scripted model server (local_services/scripted_openai.py) answering after --model-latency s, and --clients
threads sending for --duration s an even mix of pass-through hybrid searches, ``ext.chunkrag`` with ``stages:
false`` and filtered queries (listwise judging, an answer): every answer but 200 or the documented 429 is an
error; the gateway's RSS sampled every 10 s.

``flood`` (gateway_flood.json): keys sending, without pause, the expensive search of the fourth attack on the
gateway (a 1,999-character query, 50 candidates, ``relevance: crossencoder`` and ``rerank: local``,
``budget_s: 1``) against a gateway whose deadline is short (``ES_REQUEST_TIMEOUT_S`` and
``CHUNKRAG_CHAT_TIMEOUT_S`` set low), so most end in 504. First the stop: after a 20 s flood and a quiet wait
(so the threads a flood starts exist before as after), two keys flood for --duration s; the gateway's CPU time
and RSS are read from /proc before, during and for --after s after the flood's last answer, and its running
filtered searches from its metrics (each should end within one batch of its 504). Then the fair shares: per
run, for 1, 2 and 4 flooding keys in a rotating order, a quiet key's default-filter p50 (sequential requests)
on the quiet gateway, then with the keys flooding; their ratio, median over runs. ``--steady``: the stop alone
at the default deadline, each key sending ``STEADY_OPTIONS`` searches in turn (gateway_steady_memory.json).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bench.common import (
    COMPAT,
    Timed,
    free_port,
    kept_sections,
    load_average,
    median,
    merge_result,
    rss_mb,
    start_gateway,
    stop_gateway,
    write_result,
)
from bench.metrics import percentile

INDEX = "bench-scifact"
# Sections of results/gateway.json written by other runs: `load`, and the retired fuzz wrapper's.
SEPARATE_SECTIONS = ("load", "fuzz")
SIZE = 10
WARMUP = 50
# What the pass-through may add to a search at p50, on a quiet machine (ms).
GOAL_ADDED_MS = 0.3


def search_body(text: str, size: int, options: dict | None = None) -> bytes:
    """A match query on the chunk text, with ``ext.chunkrag`` ``options`` unless None."""
    import orjson

    body = {"query": {"match": {"text": text}}, "size": size}
    return orjson.dumps(body | ({} if options is None else {"ext": {"chunkrag": options}}))


def hybrid_bodies(settings, texts: list[str], vectors) -> list[bytes]:
    """The pass-through's searches: `native_sum` hybrid bodies with the query vectors computed here."""
    import orjson

    from search_extension import queries

    retrieval = settings.retrieval
    specs = (
        queries.QuerySpec(t, vector=v, size=SIZE, num_candidates=retrieval.num_candidates)
        for t, v in zip(texts, vectors)
    )
    return [orjson.dumps(queries.native_sum_body(s, retrieval.bm25_weight, retrieval.knn_weight)) for s in specs]


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
    names = "elasticsearch fastapi starlette uvicorn httpx aiohttp h11 urllib3 orjson".split()
    packages = {name: importlib.metadata.version(name) for name in names}
    nodes = client.nodes.info(node_id="_local", filter_path="nodes.*.version")["nodes"]
    return {"elasticsearch_server": next(iter(nodes.values()))["version"], **packages}


def overhead(argv) -> int:
    from bench.retrieval_bench import load_queries
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings

    parser = argparse.ArgumentParser(prog="bench.gateway_bench")
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
    hybrid = hybrid_bodies(settings, texts, embedder.embed(texts))
    chunkrag = [search_body(t, SIZE, {"stages": False, "mode": "native_sum", "candidates": SIZE}) for t in texts]
    path = f"/{args.index}/_search"

    load_at_start = os.getloadavg()[0]
    port = free_port()
    gateway_process = start_gateway(port)
    try:
        es, gateway = Timed(settings.es_nodes[0]), Timed(f"http://127.0.0.1:{port}")

        def direct_with_embedding(i: int) -> tuple[float, bytes]:
            started = time.perf_counter()
            body = hybrid_bodies(settings, texts[i : i + 1], embedder.embed([texts[i]]))[0]
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
        stop_gateway(gateway_process, 30)

    results = {key: summary(per_run, key) for key in per_run[0]}

    def within_runs(name: str, combine) -> list[float]:
        # Both sides come from the same run: the machine's drift between runs cancels out.
        p50s = ((percentile(run[f"{name}_gateway"], 0.5), percentile(run[f"{name}_direct"], 0.5)) for run in per_run)
        return [round(combine(gateway, direct), 3) for gateway, direct in p50s]

    def run_ratios(name: str) -> list[float]:
        return within_runs(name, lambda gateway, direct: gateway / direct)

    def run_added(name: str) -> list[float]:
        return within_runs(name, lambda gateway, direct: gateway - direct)

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
    # The load and the fuzz run wrote their own sections of the same file: a new overhead run keeps them.
    kept = kept_sections(args.name, lambda key: key in SEPARATE_SECTIONS)
    print(write_result(args.name, "bench.gateway_bench", {**payload, **kept}))
    return 0


# --- load: a mix of searches from many clients against the scripted model -------------------

LOAD_INDEX = "bench-gateway-load"
LOAD_DOCUMENTS = 300  # SciFact abstracts: ~2,500 chunks, ingested once
FILTERED_CANDIDATES = 10
# The filtered queries turn the LLM judge on (the default makes no judge
# call), so each holds model calls as the heaviest real query would.
FILTERED_OPTIONS = {"candidates": FILTERED_CANDIDATES, "judge_top": FILTERED_CANDIDATES}
RSS_EVERY_S = 10.0
# Requests of one client at most: bounds the run even if answers are instant.
MAX_REQUESTS_PER_CLIENT = 20_000


def scripted_reply(latency_s: float):
    """A model that answers every prompt kind of the filter after a delay:
    listwise (passage 1), yes/no, and the answer."""
    from local_services.scripted_openai import completion, is_listwise, listwise_choice

    def reply(request):
        time.sleep(latency_s)
        if is_listwise(request):
            prompt = request["messages"][-1]["content"]
            first = prompt.split("[1] ", 1)[1][:40] if "[1] " in prompt else "\u0000"
            return listwise_choice(first)(request)
        if "Passages:" in request["messages"][-1]["content"]:
            return completion("An answer from the passages [1].")(request)
        return completion("Yes", yes_probability=0.7)(request)

    return reply


def ensure_index(settings) -> int:
    from bench.ingest_bench import ensure_scifact_index

    return ensure_scifact_index(settings, LOAD_INDEX, LOAD_DOCUMENTS)


def load(argv) -> int:
    import urllib3

    from bench.retrieval_bench import load_queries
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from local_services.scripted_openai import ScriptedOpenAI

    parser = argparse.ArgumentParser(prog="bench.gateway_bench load")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--model-latency", type=float, default=0.4, help="seconds the scripted model takes per call")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    chunks = ensure_index(settings)
    texts = list(load_queries()[0].values())
    hybrid = hybrid_bodies(settings, texts, make_embedder(settings.embedder).embed(texts))
    retrieval = [search_body(t, SIZE, {"stages": False}) for t in texts]
    filtered = [search_body(t, 5, FILTERED_OPTIONS) for t in texts]
    kinds = (("passthrough", hybrid), ("stages_false", retrieval), ("filtered", filtered))
    path = f"/{LOAD_INDEX}/_search"

    redis_db = settings.redis_url.rsplit("/", 1)[0] + "/12"
    import redis

    redis.Redis.from_url(redis_db).flushdb()  # no score from an earlier run answers
    with ScriptedOpenAI(default=scripted_reply(args.model_latency)) as model:
        port = free_port()
        env = {
            **os.environ,
            "CHUNKRAG_CHAT_BASE_URL": model.base_url,
            "CHUNKRAG_CHAT_MODEL": "scripted",
            "REDIS_URL": redis_db,
            "CHUNKRAG_CHAT_TIMEOUT_S": "30",
        }
        gateway = start_gateway(port, env)
        try:
            samples: list[tuple[str, int, float]] = []
            lock = threading.Lock()
            stop = time.monotonic() + args.duration
            first_errors: list[str] = []

            def client(number: int) -> None:
                pool = urllib3.connection_from_url(f"http://127.0.0.1:{port}", maxsize=1, retries=False, timeout=120)
                for n in range(MAX_REQUESTS_PER_CLIENT):
                    if time.monotonic() >= stop:
                        return
                    kind, bodies = kinds[(number + n) % len(kinds)]
                    body = bodies[(number * 7919 + n) % len(bodies)]
                    started = time.perf_counter()
                    try:
                        response = pool.urlopen(
                            "POST", path, body=body, headers={"content-type": COMPAT, "accept": COMPAT}
                        )
                        status, data = response.status, response.data
                    except urllib3.exceptions.HTTPError as exc:
                        status, data = 0, str(exc).encode()
                    elapsed = (time.perf_counter() - started) * 1000
                    with lock:
                        samples.append((kind, status, elapsed))
                        if status not in (200, 429) and len(first_errors) < 5:
                            first_errors.append(f"{kind} {status} {data[:200]!r}")

            rss: list[tuple[float, float | None]] = [(0.0, rss_mb(gateway.pid))]
            began = time.monotonic()
            threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
            for thread in threads:
                thread.start()
            while any(thread.is_alive() for thread in threads):
                time.sleep(1.0)
                if time.monotonic() - began - rss[-1][0] >= RSS_EVERY_S:
                    rss.append((round(time.monotonic() - began, 1), rss_mb(gateway.pid)))
                    with model._lock:
                        model.requests.clear()  # the scripted server keeps every request otherwise
            elapsed_s = time.monotonic() - began
            rss.append((round(elapsed_s, 1), rss_mb(gateway.pid)))
        finally:
            stop_gateway(gateway, 30)

    statuses = Counter((kind, status) for kind, status, _ in samples)
    per_kind = {}
    for kind, _ in kinds:
        ok = [ms for k, status, ms in samples if k == kind and status == 200]
        per_kind[kind] = {
            "requests": sum(1 for k, _, _ in samples if k == kind),
            "ok": len(ok),
            "rejected_429": statuses[(kind, 429)],
            "errors": sum(n for (k, status), n in statuses.items() if k == kind and status not in (200, 429)),
            "p50_ms": round(percentile(ok, 0.5), 1),
            "p95_ms": round(percentile(ok, 0.95), 1),
            "p99_ms": round(percentile(ok, 0.99), 1),
            "throughput_rps": round(len(ok) / elapsed_s, 2),
        }
    rss_values = [value for _, value in rss if value is not None]
    errors = sum(entry["errors"] for entry in per_kind.values())
    section = {
        "clients": args.clients,
        "duration_s": round(elapsed_s, 1),
        "model_latency_s": args.model_latency,
        "index": LOAD_INDEX,
        "chunks": chunks,
        "mix": (
            "even: pass-through native_sum hybrid body; ext.chunkrag stages:false; ext.chunkrag filtered (listwise "
            "judging of 10 candidates + answer)"
        ),
        "gateway": (
            "`chunkrag serve` (defaults: max_filtered 4, max_queued 16, forward auth) in its own process; judging in "
            "threads with the Redis score cache (db 12, emptied first)"
        ),
        "requests": len(samples),
        "throughput_rps": round(sum(entry["ok"] for entry in per_kind.values()) / elapsed_s, 2),
        "errors": errors,
        "first_errors": first_errors,
        "rejected_429": sum(entry["rejected_429"] for entry in per_kind.values()),
        "per_kind": per_kind,
        "gateway_rss_mb": {
            "start": rss_values[0] if rss_values else None,
            "end": rss_values[-1] if rss_values else None,
            "max": max(rss_values) if rss_values else None,
            "samples": rss,
        },
        "load_note": (
            f"one run; clients, gateway, Elasticsearch, Redis and the scripted model share {os.cpu_count()} cores; "
            f"load average at the end {os.getloadavg()[0]:.2f}"
        ),
        "goal": "zero errors other than 429s; RSS flat",
        "goal_met": errors == 0,
    }
    print(merge_result("gateway", "bench.gateway_bench", "load", section))
    print(json.dumps({k: v for k, v in section.items() if k != "gateway_rss_mb"}, indent=2))
    print("gateway RSS (s, MB):", " ".join(f"{s:g}:{mb}" for s, mb in rss))
    return 0 if errors == 0 else 1


# --- flood: the stop at the deadline, and fair shares ---------------------------------

FLOOD_RESULT = "gateway_flood"
# The expensive search: a 1,999-character query over 50 candidates, each read
# by the relevance model, then the kept ones ordered by it, with a judging
# budget of 1 s. Its work estimate (50 x 1 x ~400 tokens) is within the default
# CHUNKRAG_GATEWAY_MAX_WORK.
EXPENSIVE_OPTIONS = {"candidates": 50, "relevance": "crossencoder", "rerank": "local", "budget_s": 1}
QUERY_CHARS = 1999
# The gateway's deadline for it: ES_REQUEST_TIMEOUT_S + budget_s + CHUNKRAG_CHAT_TIMEOUT_S.
FLOOD_ENV = {"ES_REQUEST_TIMEOUT_S": "5", "CHUNKRAG_CHAT_TIMEOUT_S": "4"}
# Searches each flooding key keeps in flight (more than its per-caller cap of 2).
THREADS_PER_KEY = 4
# How long a flood runs before the quiet key is timed under it (seconds).
FLOOD_WARMUP_S = 10.0
# The short flood before the stop's "before" figures, and the quiet wait after
# it (the gateway gives its free memory back 5 s after its last search).
WARM_FLOOD_S = 20.0
QUIET_AFTER_WARM_S = 15.0
CPU_TICKS = os.sysconf("SC_CLK_TCK")
# --steady: the two ways a filtered search runs the relevance model (the gate on the best three, the stage on all).
STEADY_OPTIONS = ({"gate": "crossencoder"}, {"relevance": "crossencoder"})


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user and system, every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CPU_TICKS


def running_searches(metrics_url: str) -> float | None:
    """The gateway's gauge of model-stage searches holding a place."""
    import urllib3

    try:
        text = urllib3.request("GET", metrics_url, timeout=5, retries=False).data.decode()
    except urllib3.exceptions.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("chunkrag_gateway_filtered_running "):
            return float(line.split()[1])
    return None


def basic(user: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()


class Flood:
    """``keys`` callers, each ``threads`` threads sending ``body`` without
    pause from the start until ``stop()``; every (key, status, ms) kept."""

    def __init__(self, url: str, body, keys: int, threads: int = THREADS_PER_KEY, prefix: str = "flood"):
        self.url, self.bodies = url, [body] if isinstance(body, bytes) else body  # a list: sent in turn
        self.outcomes: list[tuple[str, int, float]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._send, args=(f"{prefix}-{k}", k * 7919), daemon=True)
            for k in range(keys)
            for _ in range(threads)
        ]

    def _send(self, key: str, sent: int) -> None:
        import urllib3

        pool = urllib3.connection_from_url(self.url, maxsize=1, retries=False, timeout=300)
        headers = {"content-type": COMPAT, "accept": COMPAT, "authorization": basic(key)}
        while not self._stop.is_set():
            started, body, sent = time.perf_counter(), self.bodies[sent % len(self.bodies)], sent + 1
            try:
                status = pool.urlopen("POST", f"/{LOAD_INDEX}/_search", body=body, headers=headers).status
            except urllib3.exceptions.HTTPError:
                status = 0
            with self._lock:
                self.outcomes.append((key, status, (time.perf_counter() - started) * 1000))

    def __enter__(self) -> "Flood":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def statuses(self) -> dict[str, int]:
        return {str(status): n for status, n in sorted(Counter(s for _, s, _ in self.outcomes).items())}


def quiet_latencies(url: str, bodies: list[bytes], count: int, offset: int) -> list[float]:
    """A quiet key's default-filter searches, one at a time (ms); any answer
    but 200 is an error of the run."""
    quiet = Timed(url, {"authorization": basic("quiet")}, timeout=300)
    return [quiet.post(f"/{LOAD_INDEX}/_search", bodies[(offset + n) % len(bodies)])[0] for n in range(count)]


def wait_idle(metrics_url: str, limit_s: float = 120.0) -> float | None:
    """Seconds until no model-stage search holds a place (None: not within ``limit_s``)."""
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        if running_searches(metrics_url) == 0:
            return round(time.monotonic() - began, 1)
        time.sleep(0.5)
    return None


def flood(argv) -> int:
    from bench.retrieval_bench import load_queries
    from chunkrag_core.settings import Settings

    parser = argparse.ArgumentParser(prog="bench.gateway_bench flood")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of the flood that reads the stop")
    parser.add_argument("--after", type=float, default=60.0, help="seconds watched after the flood's last answer")
    parser.add_argument("--stop-keys", type=int, default=2, help="flooding keys during the stop's flood (0: no stop)")
    parser.add_argument("--keys", default="1,2,4", help="flooding keys of the fair-share runs")
    parser.add_argument("--runs", type=int, default=3, help="fair-share runs (each key count once per run)")
    parser.add_argument("--requests", type=int, default=40, help="quiet searches timed per side of a ratio")
    parser.add_argument("--threads-per-key", type=int, default=THREADS_PER_KEY, help="searches in flight per key")
    parser.add_argument("--result", default=FLOOD_RESULT, help="the result file's name (bench/results/NAME.json)")
    parser.add_argument("--steady", action="store_true", help="steady traffic at the default deadline, no fair shares")
    args = parser.parse_args(argv)
    key_counts = [] if args.steady else [int(k) for k in args.keys.split(",") if k]

    settings = Settings.from_env()
    chunks = ensure_index(settings)
    texts = list(load_queries()[0].values())
    long_query = " ".join(texts)[:QUERY_CHARS]
    expensive = search_body(long_query, 10, EXPENSIVE_OPTIONS)
    body = [search_body(t, SIZE, STEADY_OPTIONS[n % 2]) for n, t in enumerate(texts)] if args.steady else expensive
    quiet = [search_body(t, 5, {}) for t in texts]
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, **({} if args.steady else FLOOD_ENV), "CHUNKRAG_GATEWAY_METRICS_PORT": str(metrics_port)}
    url, metrics_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics"
    load_start = os.getloadavg()
    gateway = start_gateway(port, env)
    try:
        with Flood(url, body, keys=1, threads=1) as warm:  # the models' first runs
            while len(warm.outcomes) < 2:
                time.sleep(0.5)
        quiet_latencies(url, quiet, 10, 0)
        stop = _the_stop(args, gateway.pid, url, metrics_url, body) if args.stop_keys else None
        fair = [] if args.steady else _fair_shares(args, key_counts, url, metrics_url, expensive, quiet)
    finally:
        stop_gateway(gateway)

    ratios = {str(k): median([run[str(k)]["p50_ratio"] for run in fair]) for k in key_counts}
    payload = {
        "index": LOAD_INDEX,
        "chunks": chunks,
        "gateway": "`chunkrag serve` in its own process, defaults (max_filtered 4, reserved_filtered 1, "
        "max_filtered_per_caller 2, filter threads at nice 10)"
        + ("" if args.steady else f" but a short deadline: {FLOOD_ENV} (the expensive search's: {5 + 1 + 4} s)"),
        "search": {"size": SIZE, "ext.chunkrag": STEADY_OPTIONS}
        if args.steady
        else {"query_chars": len(long_query), "size": 10, "ext.chunkrag": EXPENSIVE_OPTIONS},
        "quiet_search": "a SciFact claim, size 5, ext.chunkrag {} (the default filter: no LLM call), one at a time",
        "keys": "forward mode, one Basic credential per key (the open cluster ignores it; the gateway keys on it)",
        "threads_per_flooding_key": args.threads_per_key,
        "load_average": {"start": [round(x, 2) for x in load_start], "end": load_average()},
        "machine_note": f"gateway, clients, Elasticsearch and the other engineers' work share {os.cpu_count()} cores",
        "stop": stop,
        "fair_shares": {
            "runs": fair,
            "median_p50_ratio": ratios,
            "note": "per run and key count: the quiet key's p50 with the keys flooding over its p50 just before, "
            "quiet; the key counts in a rotating order; median over runs",
        },
        "goal": "zero CPU after the 504s (the gateway as idle as before the flood once the last answer is out); "
        "RSS within 10% of its pre-flood value a minute after; quiet p50 at most 2x with 1, 2 and 4 flooding keys"
        + ("; steady: RSS at most 1.5x before throughout" if args.steady else ""),
        "goal_met": {
            "rss_within_10_percent": stop and stop["rss_after_over_before"] <= 1.10,
            "idle_after": stop and stop["idle_after"],
            "rss_max_within_1_5x_before": stop and stop["rss_max_over_before"] <= 1.5,
            "quiet_p50_at_most_2x": all(r <= 2.0 for r in ratios.values()),
        },
    }
    print(json.dumps(payload, indent=2))
    print(write_result(args.result, "bench.gateway_bench", payload))
    return 0


def _the_stop(args, pid: int, url: str, metrics_url: str, body: bytes) -> dict:
    """The gateway's CPU and RSS before, during and after a flood whose
    searches end in 504. "Before" follows a short flood of the same keys
    (WARM_FLOOD_S) and a quiet wait: the threads a flood starts and their
    buffers (each thread that runs the model keeps onnxruntime's working
    buffers) are there before as after; the RSS of the gateway that had
    served no flood yet is recorded too (``rss_mb_cold``)."""
    rss_cold = rss_mb(pid)
    with Flood(url, body, keys=args.stop_keys, threads=args.threads_per_key):
        time.sleep(WARM_FLOOD_S)
    wait_idle(metrics_url)
    time.sleep(QUIET_AFTER_WARM_S)
    quiet_window = min(args.after, 30.0)
    cpu_before, began = cpu_s(pid), time.monotonic()
    time.sleep(quiet_window)
    idle_cpu_per_s = (cpu_s(pid) - cpu_before) / (time.monotonic() - began)
    rss_before = rss_mb(pid)
    samples: list[tuple[float, float | None, float, float]] = []
    with Flood(url, body, keys=args.stop_keys, threads=args.threads_per_key) as flood_:
        began = time.monotonic()
        last_cpu = cpu_s(pid)
        while time.monotonic() - began < args.duration:
            time.sleep(RSS_EVERY_S)
            now_cpu = cpu_s(pid)
            samples.append(
                (round(time.monotonic() - began), rss_mb(pid), round(now_cpu - last_cpu, 2), load_average()[0])
            )
            last_cpu = now_cpu
    ended = time.monotonic()  # every client has its last answer
    running_at_end = running_searches(metrics_url)
    freed_in_s = wait_idle(metrics_url)
    cpu_at_end = cpu_s(pid)
    after: list[tuple[float, float]] = []
    while time.monotonic() - ended < args.after:
        time.sleep(5.0)
        after.append((round(time.monotonic() - ended, 1), round(cpu_s(pid) - cpu_at_end, 2)))
    cpu_after = cpu_s(pid) - cpu_at_end
    window = time.monotonic() - ended
    rss_after = rss_mb(pid)
    statuses, ok = flood_.statuses(), [ms for _, status, ms in flood_.outcomes if status == 200]
    return {
        "flooding_keys": args.stop_keys,
        "duration_s": args.duration,
        "answers": statuses,
        "answers_504": statuses.get("504", 0),
        "idle_cpu_s_per_s_before": round(idle_cpu_per_s, 4),
        "s_rss_mb_cpu_s_load_every_10s_during": samples,
        "answered_200_p50_p95_ms": [round(percentile(ok, q)) if ok else None for q in (0.5, 0.95)],
        "running_searches_at_last_answer": running_at_end,
        "seconds_until_none_running": freed_in_s,
        "cpu_s_after_last_answer": round(cpu_after, 2),
        "cpu_after_window_s": round(window, 1),
        "cpu_s_after_over_idle": round(cpu_after - idle_cpu_per_s * window, 2),
        "cpu_after_samples": after,
        "rss_mb_cold": rss_cold,
        "rss_mb_before": rss_before,
        "rss_mb_max": (peak := max((sample[1] or 0 for sample in samples), default=0)),
        "rss_max_over_before": round(peak / rss_before, 3) if rss_before else None,
        "rss_mb_after": rss_after,
        "rss_after_over_before": round(rss_after / rss_before, 3) if rss_before and rss_after else None,
        "rss_after_over_cold": round(rss_after / rss_cold, 3) if rss_cold and rss_after else None,
        # As idle as before the flood (its event loop's own ticks) within a tenth of a CPU second a minute.
        "idle_after": cpu_after - idle_cpu_per_s * window <= 0.1 * window / 60,
    }


def _fair_shares(args, key_counts: list[int], url: str, metrics_url: str, body: bytes, quiet: list[bytes]) -> list:
    runs = []
    offset = 0
    for run in range(args.runs):
        order = key_counts[run % len(key_counts) :] + key_counts[: run % len(key_counts)]
        figures = {}
        for keys in order:
            wait_idle(metrics_url)
            unloaded = quiet_latencies(url, quiet, args.requests, offset)
            offset += args.requests
            with Flood(url, body, keys=keys, threads=args.threads_per_key) as flood_:
                time.sleep(FLOOD_WARMUP_S)
                loaded = quiet_latencies(url, quiet, args.requests, offset)
            offset += args.requests
            figures[str(keys)] = {
                "unloaded_p50_ms": round(percentile(unloaded, 0.5), 1),
                "flooded_p50_ms": round(percentile(loaded, 0.5), 1),
                "p50_ratio": round(percentile(loaded, 0.5) / percentile(unloaded, 0.5), 2),
                "unloaded_p95_ms": round(percentile(unloaded, 0.95), 1),
                "flooded_p95_ms": round(percentile(loaded, 0.95), 1),
                "flood_answers": flood_.statuses(),
                "load_average": round(os.getloadavg()[0], 2),
            }
            print(f"run {run + 1}, {keys} flooding keys: {figures[str(keys)]}", file=sys.stderr, flush=True)
        runs.append(figures)
    return runs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"load": load, "flood": flood}
    if argv[:1] and argv[0] in commands:
        return commands[argv[0]](argv[1:])
    return overhead(argv)


if __name__ == "__main__":
    sys.exit(main())
