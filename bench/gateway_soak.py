"""Load and soak figures for the gateway: the ``load`` section of gateway.json
(beside bench.gateway_bench's pass-through and the 2026-11-23 ``fuzz`` run).

    python -m bench.gateway_soak [--clients 32] [--duration 300] [--model-latency 0.4]

``chunkrag serve`` on loopback, the scripted model server
(local_services/scripted_openai.py) answering after --model-latency s, and
--clients threads sending for --duration s an even mix of pass-through hybrid
searches, ``ext.chunkrag`` with ``stages: false`` and filtered queries (listwise
judging, an answer): every answer but 200 or the documented 429 is an error;
the gateway's RSS sampled every 10 s. --no-save: print, keep gateway.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bench.common import RESULTS, machine
from bench.metrics import percentile

LOAD_INDEX = "bench-gateway-load"
LOAD_DOCUMENTS = 300  # SciFact abstracts: ~2,500 chunks, ingested once
SIZE = 10
FILTERED_CANDIDATES = 10
# The filtered queries turn the LLM judge on (the default makes no judge
# call), so each holds model calls as the heaviest real query would.
FILTERED_OPTIONS = {"candidates": FILTERED_CANDIDATES, "judge_top": FILTERED_CANDIDATES}
RSS_EVERY_S = 10.0
# Requests of one client at most: bounds the run even if answers are instant.
MAX_REQUESTS_PER_CLIENT = 20_000


def merge_section(name: str, section: dict) -> Path:
    """Put ``section`` under ``name`` in gateway.json, keeping the rest."""
    path = RESULTS / "gateway.json"
    current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    current[name] = {
        "command": " ".join(["python", "-m", "bench.gateway_soak", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        **section,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    return path


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


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
    import orjson
    import urllib3

    from bench.gateway_bench import COMPAT, free_port, start_gateway
    from bench.retrieval_bench import load_queries
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from local_services.scripted_openai import ScriptedOpenAI
    from search_extension import queries

    parser = argparse.ArgumentParser(prog="bench.gateway_soak")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--model-latency", type=float, default=0.4, help="seconds the scripted model takes per call")
    parser.add_argument(
        "--no-save", action="store_true", help="print the figures, leave gateway.json alone (short runs)"
    )
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    chunks = ensure_index(settings)
    texts = list(load_queries()[0].values())
    vectors = make_embedder(settings.embedder).embed(texts)
    hybrid = [
        orjson.dumps(
            queries.native_sum_body(
                queries.QuerySpec(text=t, vector=v, size=SIZE, num_candidates=settings.retrieval.num_candidates)
            )
        )
        for t, v in zip(texts, vectors)
    ]
    retrieval = [
        orjson.dumps({"query": {"match": {"text": t}}, "size": SIZE, "ext": {"chunkrag": {"stages": False}}})
        for t in texts
    ]
    filtered = [
        orjson.dumps({"query": {"match": {"text": t}}, "size": 5, "ext": {"chunkrag": FILTERED_OPTIONS}}) for t in texts
    ]
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
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(timeout=30)

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
    if not args.no_save:
        print(merge_section("load", section))
    print(json.dumps({k: v for k, v in section.items() if k != "gateway_rss_mb"}, indent=2))
    print("gateway RSS (s, MB):", " ".join(f"{s:g}:{mb}" for s, mb in rss))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(load(sys.argv[1:]))
