"""Both sides of CHUNKRAG_GATEWAY_FILTER_NICE, each candidate in turn in
one run: what a flood of filtered searches does to a plain caller, and what
other work on the machine does to a filtered search.

    python -m bench.nice_bench [--nice 0,5,10] [--rounds 3] [--plain 60] [--filtered 20] [--flood-threads 8]

One gateway (`chunkrag serve`, forward mode) per candidate niceness, all
started first and warmed; then in each round, each gateway in turn (the
order rotated per round):

- flooded: another caller (``flood``) sends filtered searches from
  ``--flood-threads`` threads without pause (a process of its own; the
  per-caller cap lets two run at once, the rest wait or get 429), and a
  plain caller's pass-through searches are timed one at a time;
- busy: two processes spin on the two cores (niceness 0, as other work
  would), and filtered searches are timed one at a time.

The index is the post-search bench's (SQuAD documents of 1,000-3,000
words, ``bench-post-search-7``) with its companion (`chunkrag sync`): a
filtered search is a post-search of 10 hits scored by the engine. The
figures are p50 / p95 per round and their medians, with the load average
around each phase. bench/results/nice.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import time

from bench.common import write_result
from bench.metrics import percentile

PLAIN_AUTH = {"authorization": "Basic cGxhaW46cGxhaW4="}  # plain:plain
FLOOD_AUTH = {"authorization": "Basic Zmxvb2Q6Zmxvb2Q="}  # flood:flood
# Seconds the flood runs before the plain searches are timed.
BUILD_UP_S = 3.0
# The longest one request may take (a crowded machine).
REQUEST_TIMEOUT_S = 120.0


def bodies(questions: list[str], filtered: bool) -> list[bytes]:
    ext = {"ext": {"chunkrag": {}}} if filtered else {}
    return [json.dumps({"query": {"match": {"body": q}}, "size": 10, **ext}).encode() for q in questions]


def send_flood(url: str, payloads: list[bytes], threads: int, stop, counts) -> None:
    """Filtered searches from ``threads`` threads until ``stop`` is set;
    ``counts`` gets {status: number}. Runs in a process of its own."""
    import threading

    import httpx

    tally: dict[int, int] = {}
    lock = threading.Lock()

    def loop(offset: int) -> None:
        with httpx.Client(headers={**FLOOD_AUTH, "content-type": "application/json"}, timeout=REQUEST_TIMEOUT_S) as c:
            n = offset
            while not stop.is_set():
                try:
                    status = c.post(url, content=payloads[n % len(payloads)]).status_code
                except httpx.HTTPError:
                    status = 0
                with lock:
                    tally[status] = tally.get(status, 0) + 1
                if status == 429:
                    stop.wait(0.2)
                n += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    counts.put(tally)


def timed(url: str, payloads: list[bytes], count: int, headers: dict[str, str]) -> list[float]:
    """``count`` searches one at a time, ms each; any answer but 200 is an error."""
    import httpx

    out = []
    with httpx.Client(headers={**headers, "content-type": "application/json"}, timeout=REQUEST_TIMEOUT_S) as client:
        for n in range(count):
            started = time.perf_counter()
            answer = client.post(url, content=payloads[n % len(payloads)])
            out.append((time.perf_counter() - started) * 1000)
            if answer.status_code != 200:
                raise RuntimeError(f"a timed search got {answer.status_code}: {answer.text[:300]}")
    return out


@contextlib.contextmanager
def spinning(processes: int):
    """``processes`` processes spinning on the CPU for the block's length."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(10)


def p50_p95(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(values, 0.5), 1), "p95_ms": round(percentile(values, 0.95), 1)}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def one_turn(url: str, index: str, plain: list[bytes], filtered: list[bytes], args) -> dict:
    """The flooded and the busy phase on one gateway."""
    search = f"{url}/{index}/_search"
    context = multiprocessing.get_context("spawn")
    stop, counts = context.Event(), context.Queue()
    flood = context.Process(target=send_flood, args=(search, filtered, args.flood_threads, stop, counts), daemon=True)
    turn: dict = {"load_before": load()}
    flood.start()
    try:
        time.sleep(BUILD_UP_S)
        began = time.monotonic()
        turn["plain_flooded"] = p50_p95(timed(search, plain, args.plain, PLAIN_AUTH))
        seconds = time.monotonic() - began
    finally:
        stop.set()
        tally = counts.get(timeout=REQUEST_TIMEOUT_S * 2)
        flood.join(30)
    turn["flood"] = {"statuses": {str(k): v for k, v in sorted(tally.items())}}
    turn["flood"]["answered_per_s"] = round(tally.get(200, 0) / (seconds + BUILD_UP_S), 2)
    turn["load_flooded"] = load()
    with spinning(args.busy):
        time.sleep(1.0)
        turn["filtered_busy"] = p50_p95(timed(search, filtered, args.filtered, PLAIN_AUTH))
        turn["load_busy"] = load()
    return turn


def start_gateways(candidates: list[int]) -> dict[int, tuple[subprocess.Popen, str]]:
    from bench.gateway_bench import free_port, start_gateway

    started = {}
    for nice in candidates:
        port = free_port()
        env = {**os.environ, "CHUNKRAG_GATEWAY_FILTER_NICE": str(nice), "CHUNKRAG_GATEWAY_RETRY_AFTER_S": "1"}
        started[nice] = (start_gateway(port, env), f"http://127.0.0.1:{port}")
    return started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench.nice_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nice", type=lambda v: [int(x) for x in v.split(",") if x], default=[0, 5, 10])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plain", type=int, default=60, help="plain searches timed per flooded phase")
    parser.add_argument("--filtered", type=int, default=20, help="filtered searches timed per busy phase")
    parser.add_argument("--flood-threads", type=int, default=8)
    parser.add_argument("--busy", type=int, default=2, help="processes spinning in the busy phase")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="nice")
    args = parser.parse_args(argv)

    from bench.post_search_bench import companion_setup, documents, queries
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings

    settings = Settings.from_env()
    docs = documents(args.seed)
    index, _, sync_figures = companion_setup(docs, settings, make_embedder(settings.embedder), args.seed)
    questions = [question for _, question, _, _ in queries(docs, args.seed, 10, 200)]
    plain, filtered = bodies(questions, False), bodies(questions, True)
    gateways = start_gateways(args.nice)
    rounds = []
    try:
        for url in (u for _, u in gateways.values()):  # each gateway's first filtered searches
            timed(f"{url}/{index}/_search", filtered, 3, PLAIN_AUTH)
        for number in range(args.rounds):
            shift = number % len(args.nice)
            order = args.nice[shift:] + args.nice[:shift]
            turns = {}
            for nice in order:
                turns[str(nice)] = one_turn(gateways[nice][1], index, plain, filtered, args)
                print(json.dumps({"round": number, "nice": nice, **turns[str(nice)]}), flush=True)
            rounds.append({"order": order, "turns": turns})
    finally:
        for process, _ in gateways.values():
            process.send_signal(signal.SIGTERM)
        for process, _ in gateways.values():
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()

    def median_of(nice: int, phase: str, key: str) -> float:
        return round(statistics.median(r["turns"][str(nice)][phase][key] for r in rounds), 1)

    summary = {
        str(nice): {
            "plain_flooded_p50_ms": median_of(nice, "plain_flooded", "p50_ms"),
            "plain_flooded_p95_ms": median_of(nice, "plain_flooded", "p95_ms"),
            "filtered_busy_p50_ms": median_of(nice, "filtered_busy", "p50_ms"),
            "filtered_busy_p95_ms": median_of(nice, "filtered_busy", "p95_ms"),
            "flood_answered_per_s": round(
                statistics.median(r["turns"][str(nice)]["flood"]["answered_per_s"] for r in rounds), 2
            ),
        }
        for nice in args.nice
    }
    loads = [r["turns"][t][k] for r in rounds for t in r["turns"] for k in ("load_before", "load_busy")]
    summary["load_1m_min"], summary["load_1m_max"] = min(loads), max(loads)
    print(json.dumps(summary))
    write_result(
        args.out, "bench.nice_bench", {"index": index, "sync": sync_figures, "summary": summary, "rounds": rounds}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
