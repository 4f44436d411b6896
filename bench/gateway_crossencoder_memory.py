"""The gateway's resident memory before and after the project's cross-encoder
runs in it (``relevance: crossencoder`` with ``rerank: local``), for
docs/sizing.md: results/gateway_crossencoder_memory.json.

    python -m bench.gateway_crossencoder_memory [--queries 20] [--candidates 50] [--idle 60]
        [--clients 1] [--query-chars 0] [--run NAME]

``chunkrag serve`` on loopback (its defaults: the filter in the gateway's
threads, judge=threads), over the SciFact load index of bench.gateway_soak.
The RSS (VmRSS) is read when the gateway is healthy, once its models have
loaded, after default-filter searches, after each of --queries filtered
searches with the cross-encoder, and after --idle seconds with nothing in
flight. --clients send at once (each its share of the queries; the
per-caller cap, 2 by default, lets two of one caller run together);
--query-chars repeats each query's text up to that many characters (the
gateway's cap is 2,000). Each run goes under ``runs.NAME`` of the results,
beside the others. The load average is recorded at the start and the end:
the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from bench.common import RESULTS, machine
from bench.gateway_soak import LOAD_INDEX, ensure_index, rss_mb

# Long enough for the embedder and the relevance model to load beside the first requests.
MODELS_WAIT_S = 120.0
DEFAULT_SEARCHES = 5


def main(argv) -> int:
    import urllib3

    from bench.gateway_bench import COMPAT, free_port, start_gateway
    from bench.retrieval_bench import load_queries
    from chunkrag_core.settings import Settings

    parser = argparse.ArgumentParser(prog="bench.gateway_crossencoder_memory")
    parser.add_argument("--queries", type=int, default=20, help="filtered searches with the cross-encoder")
    parser.add_argument("--candidates", type=int, default=50, help="candidates each (the gateway's default cap)")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds with nothing in flight before the last read")
    parser.add_argument("--clients", type=int, default=1, help="searches sent at once")
    parser.add_argument("--query-chars", type=int, default=0, help="each query repeated up to this many characters")
    parser.add_argument("--run", default="one_client", help="the name of this run in the results")
    args = parser.parse_args(argv)

    load_start = os.getloadavg()
    settings = Settings.from_env()
    chunks = ensure_index(settings)
    texts = [long_query(text, args.query_chars) for text in load_queries()[0].values()]
    port = free_port()
    gateway = start_gateway(port, dict(os.environ))
    pool = urllib3.connection_from_url(f"http://127.0.0.1:{port}", maxsize=args.clients, retries=False, timeout=900)

    def search(text: str, options: dict) -> tuple[int, float, dict]:
        body = {"query": {"match": {"text": text}}, "size": 10, "ext": {"chunkrag": options}}
        started = time.perf_counter()
        response = pool.urlopen(
            "POST",
            f"/{LOAD_INDEX}/_search",
            body=json.dumps(body).encode(),
            headers={"content-type": COMPAT, "accept": COMPAT},
        )
        answer = json.loads(response.data) if response.status == 200 else {}
        return response.status, round((time.perf_counter() - started) * 1000, 1), answer

    rss: dict[str, float | None] = {}
    per_query: list[dict] = []
    try:
        rss["healthy"] = rss_mb(gateway.pid)
        deadline = time.monotonic() + MODELS_WAIT_S
        while time.monotonic() < deadline:
            health = json.loads(pool.urlopen("GET", "/v1/health").data)
            if health.get("models", {}).get("ok"):
                break
            time.sleep(1.0)
        rss["models_loaded"] = rss_mb(gateway.pid)
        for text in texts[:DEFAULT_SEARCHES]:
            status, _, _ = search(text, {"candidates": args.candidates})
            if status != 200:
                raise RuntimeError(f"a default-filter search answered {status}")
        rss["after_default_filter"] = rss_mb(gateway.pid)
        options = {"candidates": args.candidates, "relevance": "crossencoder", "rerank": "local"}
        chosen = texts[DEFAULT_SEARCHES : DEFAULT_SEARCHES + args.queries]
        lock = threading.Lock()

        def client(number: int) -> None:
            for text in chosen[number :: args.clients]:
                status, ms, answer = search(text, options)
                relevance_by = (answer.get("chunkrag") or {}).get("relevance_by")
                with lock:
                    per_query.append(
                        {"status": status, "ms": ms, "relevance_by": relevance_by, "rss_mb": rss_mb(gateway.pid)}
                    )

        clients = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        rss["after_crossencoder"] = rss_mb(gateway.pid)
        time.sleep(args.idle)
        rss[f"after_{args.idle:g}_s_idle"] = rss_mb(gateway.pid)
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=60)

    load_end = os.getloadavg()
    ok = [entry for entry in per_query if entry["status"] == 200]
    run = {
        "command": " ".join(["python", "-m", "bench.gateway_crossencoder_memory", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "queries": args.queries,
        "clients": args.clients,
        "candidates": args.candidates,
        "query_chars": args.query_chars or "as written (SciFact claims, ~90 characters)",
        "rss_mb": rss,
        "rss_mb_max": max((entry["rss_mb"] or 0.0) for entry in per_query) if per_query else None,
        "answered": len(ok),
        "relevance_by": sorted({str(entry["relevance_by"]) for entry in ok}),
        "search_ms_median": sorted(entry["ms"] for entry in ok)[len(ok) // 2] if ok else None,
        "per_query": per_query,
        "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]},
        "load_note": f"one run; the gateway, Elasticsearch and this client share {os.cpu_count()} cores with "
        "whatever else the machine ran",
    }
    path = RESULTS / "gateway_crossencoder_memory.json"
    current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    current = {
        "question": "the gateway's resident memory before and after the cross-encoder (relevance: crossencoder, "
        "rerank: local) has run in it",
        "index": LOAD_INDEX,
        "chunks": chunks,
        "gateway": "`chunkrag serve` with its defaults (filtered searches in its own threads, judge=threads)",
        "runs": {**current.get("runs", {}), args.run: run},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    print(path)
    print(json.dumps({k: v for k, v in run.items() if k != "per_query"}, indent=2))
    return 0 if len(ok) == len(per_query) else 1


def long_query(text: str, chars: int) -> str:
    """``text`` repeated (words whole) up to ``chars`` characters; as it is for 0."""
    if chars <= 0:
        return text
    words, out = text.split(), []
    while len(" ".join(out)) < chars:
        out.extend(words)
    return " ".join(out)[:chars].rsplit(" ", 1)[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
