"""One caller's flood of filtered searches against another caller's plain
searches: how much the flood slows the plain caller's p95, written to
bench/results/fairness.json.

    python -m bench.fairness_bench [--runs 3] [--threads 16] [--requests 150] [--env NAME=VALUE ...]
    python -m bench.fairness_bench --label processes --env CHUNKRAG_GATEWAY_FILTER_PROCESSES=true

Each run starts the gateway (`chunkrag serve`, forward mode, in its own
process) on the configured Elasticsearch, times --requests plain searches
of one caller (Basic credentials ``plain``), then starts --threads threads
of another caller (``flood``, in another process: tests/support/flood.py)
sending filtered searches (50 candidates, ensembling, the default filter:
no model call) without pause, waits 3 s for the flood to build up and
times the plain searches again. The ratio of the two p95s is the figure;
the median over the runs is recorded with the load average before and
after each run (the machine is shared: a ratio means something only next
to its load). With the filter processes on, each run also records their
resident memory after the flood. --env passes gateway settings
(CHUNKRAG_GATEWAY_...) to every run; --label names the result in
fairness.json.

The index (``bench-fairness``: the first --documents SciFact abstracts at
the default ensembling scales) is made on first use and kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import RESULTS, machine, process_cpu_s
from bench.metrics import percentile

INDEX = "bench-fairness"
QUERY_TEXT = "vitamin D deficiency and the risk of fractures"
PLAIN_BODY = {"query": {"match": {"text": QUERY_TEXT}}, "size": 3}
FLOOD_BODY = {
    "query": {"match": {"text": QUERY_TEXT}},
    "size": 5,
    "ext": {"chunkrag": {"candidates": 50, "ensemble": True}},
}
# Basic credentials only name the two callers (the cluster runs without security).
PLAIN_AUTH = {"authorization": "Basic cGxhaW46cGxhaW4="}  # plain:plain
FLOOD_AUTH = {"authorization": "Basic Zmxvb2Q6Zmxvb2Q="}  # flood:flood
WARM_REQUESTS = 20
# Seconds the flood runs before the plain searches are timed: the child
# process starts and every thread has a search in the gateway.
BUILD_UP_S = 3.0
# Seconds the first filtered search may take, the gateway's processes starting.
WARM_FILTERED_S = 600.0
# Seconds the gateway may take to start answering /v1/health (a crowded machine).
START_S = 300.0
# Seconds the gateway may take to answer its last requests and stop.
STOP_S = 300.0


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def ensure_index(settings, documents: int) -> int:
    from bench.ingest_bench import ensure_scifact_index
    from chunkrag_core.settings import DEFAULT_SCALES

    scaled = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=DEFAULT_SCALES))
    return ensure_scifact_index(scaled, INDEX, documents)


def plain_latencies(url: str, count: int) -> list[float]:
    import httpx

    latencies = []
    with httpx.Client(headers=PLAIN_AUTH, timeout=60) as client:
        for _ in range(count):
            started = time.perf_counter()
            answer = client.post(f"{url}/{INDEX}/_search", json=PLAIN_BODY)
            latencies.append(time.perf_counter() - started)
            if answer.status_code != 200:
                raise RuntimeError(f"a plain search got {answer.status_code}: {answer.text[:300]}")
    return latencies


def start_gateway(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    import httpx

    from bench.gateway_bench import free_port

    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "-m", "chunkrag_cli", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "CHUNKRAG_GATEWAY_RETRY_AFTER_S": "1", **env},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while True:
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return gateway, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or gateway.poll() is not None:
            gateway.kill()
            raise RuntimeError("the gateway did not become healthy")
        time.sleep(0.2)


def stop_gateway(gateway: subprocess.Popen) -> None:
    """SIGTERM; the gateway first answers what it has in hand (the last
    of the flood's filtered searches), then stops its filter processes."""
    gateway.send_signal(signal.SIGTERM)
    try:
        gateway.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        gateway.kill()
        gateway.wait(timeout=30)


def warm_filtered(url: str) -> None:
    """One filtered search answered before anything is timed: the gateway's
    filter processes start and load their embedder first (seconds; minutes
    on a crowded machine, when the first attempts may time out)."""
    import httpx

    deadline = time.monotonic() + WARM_FILTERED_S
    while True:
        try:
            answer = httpx.post(f"{url}/{INDEX}/_search", json=FLOOD_BODY, headers=FLOOD_AUTH, timeout=WARM_FILTERED_S)
            if answer.status_code == 200:
                return
            failure = f"{answer.status_code}: {answer.text[:300]}"
        except httpx.TimeoutException as exc:
            failure = repr(exc)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the filtered search failed: {failure}")


def one_run(env: dict[str, str], threads: int, requests: int, phases: int, es_url: str) -> dict:
    """Quiet and flooded phases in turn (``phases`` of each), so that what
    else the machine does weighs on both alike; in each, the plain search
    through the gateway and straight to Elasticsearch in turn."""
    import multiprocessing

    from tests.support.flood import flood as send_flood

    load_before = load_average()
    gateway, url = start_gateway(env)
    context = multiprocessing.get_context("spawn")
    go, stop, results = context.Event(), context.Event(), context.Queue()
    flood = context.Process(
        target=send_flood,
        args=(f"{url}/{INDEX}/_search", FLOOD_AUTH, FLOOD_BODY, threads, stop, results, go),
        daemon=True,
    )
    timed: dict[str, list[float]] = {"quiet": [], "flooded": [], "quiet_es": [], "flooded_es": []}
    cpu = {"quiet": 0.0, "flooded": 0.0}
    seconds = {"quiet": 0.0, "flooded": 0.0}
    try:
        warm_filtered(url)
        flood.start()
        plain_latencies(url, WARM_REQUESTS)
        plain_latencies(es_url, WARM_REQUESTS)
        per_phase = max(1, requests // phases)
        for _ in range(phases):
            for phase in ("quiet", "flooded"):
                if phase == "flooded":
                    go.set()
                time.sleep(BUILD_UP_S)  # the flood builds up, or the last of it ends
                used, began = process_cpu_s(gateway.pid), time.monotonic()
                for _ in range(per_phase // 10):
                    timed[phase] += plain_latencies(url, 10)
                    timed[f"{phase}_es"] += plain_latencies(es_url, 10)
                cpu[phase] += process_cpu_s(gateway.pid) - used
                seconds[phase] += time.monotonic() - began
                go.clear()
        stop.set()
        outcomes = results.get(timeout=180)
        flood.join(30)
        rss_mb = filter_processes_rss_mb(gateway.pid)
    finally:
        stop.set()
        stop_gateway(gateway)
    statuses = [status for status, _ in outcomes]
    run = {name: _figures(values) for name, values in timed.items()}
    run.update(
        {
            "p95_ratio": round(run["flooded"]["p95_ms"] / run["quiet"]["p95_ms"], 2),
            "es_p95_ratio": round(run["flooded_es"]["p95_ms"] / run["quiet_es"]["p95_ms"], 2),
            "flood_200": statuses.count(200),
            "flood_429": statuses.count(429),
            # Filtered searches answered a second while the flood ran.
            "flood_200_per_s": round(statuses.count(200) / (seconds["flooded"] + phases * BUILD_UP_S), 2),
            "flood_other": len(statuses) - statuses.count(200) - statuses.count(429),
            "flood_429_without_retry_after": sum(1 for status, retry in outcomes if status == 429 and not retry),
            # Of one core: what the gateway's process used in each phase.
            "gateway_cpu_quiet": round(cpu["quiet"] / seconds["quiet"], 3),
            "gateway_cpu_flooded": round(cpu["flooded"] / seconds["flooded"], 3),
            "filter_processes_rss_mb": rss_mb,
            "load_before": load_before,
            "load_after": load_average(),
        }
    )
    return run


def filter_processes_rss_mb(pid: int) -> list[int]:
    """Resident memory (MB) of the gateway's filter processes: its children
    started by multiprocessing's spawn, other than its resource tracker."""
    sizes = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
                status = Path(f"/proc/{child}/status").read_text()
            except OSError:
                continue
            if b"spawn_main" in command and b"resource_tracker" not in command:
                kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
                sizes.append(round(kb / 1024))
    return sorted(sizes)


def _figures(latencies: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
        "p95_ms": round(percentile(latencies, 0.95) * 1000, 2),
    }


def main(argv=None) -> int:
    from chunkrag_core.settings import Settings

    parser = argparse.ArgumentParser(prog="bench.fairness_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16, help="threads of the flooding caller")
    parser.add_argument("--requests", type=int, default=150, help="plain searches timed, quiet and flooded")
    parser.add_argument("--phases", type=int, default=3, help="quiet and flooded phases, in turn")
    parser.add_argument("--documents", type=int, default=60, help="SciFact abstracts in the index")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a gateway setting")
    parser.add_argument("--label", default="default", help="the result's name in fairness.json")
    parser.add_argument("--no-save", action="store_true", help="print the figures, leave fairness.json alone")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)

    settings = Settings.from_env()
    chunks = ensure_index(settings, args.documents)
    runs = []
    for number in range(args.runs):
        run = one_run(env, args.threads, args.requests, args.phases, settings.es_url)
        print(f"run {number + 1}: {json.dumps(run)}", file=sys.stderr)
        runs.append(run)
    result = {
        "command": " ".join(["python", "-m", "bench.fairness_bench", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "index": INDEX,
        "chunks": chunks,
        "threads": args.threads,
        "requests": args.requests,
        "env": env,
        "median_p95_ratio": round(statistics.median(run["p95_ratio"] for run in runs), 2),
        "median_es_p95_ratio": round(statistics.median(run["es_p95_ratio"] for run in runs), 2),
        "median_flood_200_per_s": round(statistics.median(run["flood_200_per_s"] for run in runs), 2),
        "median_quiet_p95_ms": round(statistics.median(run["quiet"]["p95_ms"] for run in runs), 2),
        "median_flooded_p95_ms": round(statistics.median(run["flooded"]["p95_ms"] for run in runs), 2),
        "runs": runs,
    }
    print(json.dumps(result, indent=2))
    if not args.no_save:
        path = RESULTS / "fairness.json"
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        path.write_text(json.dumps({**current, args.label: result}, indent=2) + "\n", encoding="utf-8")
        print(f"written to {Path(path).relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
