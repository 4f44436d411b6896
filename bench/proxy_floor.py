"""The floor under the gateway's pass-through figure: what the server and
client libraries alone add to a search, with no gateway logic at all.

    python -m bench.proxy_floor [--runs 5] [--requests 1000] [--index bench-scifact-passthru]

Four servers, each started in its own process on a free port, then timed in
turn against the cluster with the same small `match` search (interleaved
with a direct request, which goes first every other time):

- `static`: a bare ASGI app under uvicorn (uvloop, httptools) that answers
  every request itself: the server side alone;
- `aiohttp`: the same app forwarding each request to the cluster over one
  aiohttp session (keep-alive), as the gateway's pass-through does;
- `urllib3_thread`: the same app forwarding over a urllib3 pool from a
  worker thread (anyio's): the other well-kept pool the issue names;
- `gateway`: `chunkrag serve`, everything on (its defaults).

For each: the p50 added to the direct search (median over runs of the
per-run difference) and the server process's CPU time per request (user and
system, from /proc). The gateway's own logic costs what it adds over
`aiohttp`; the pass-through goal (bench/gateway_bench.py) can be met only
where the floor leaves room for it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench.common import median, process_cpu_split, write_result
from bench.gateway_bench import STARTUP_S, Timed, free_port, start_gateway
from bench.metrics import percentile

SERVERS = ("static", "aiohttp", "urllib3_thread", "gateway")
WARMUP = 300
BODY = b'{"query":{"match":{"text":"vitamin d deficiency"}},"size":10}'
STATIC_ANSWER = b'{"hits":{"hits":[]}}'


def _app(kind: str, origin: str):
    """The bare ASGI app of one kind (not `gateway`)."""
    state: dict = {}

    async def forward_aiohttp(method: str, path: str, body: bytes) -> tuple[int, bytes]:
        async with state["session"].request(
            method, origin + path, data=body, headers={"content-type": "application/json"}
        ) as response:
            return response.status, await response.read()

    def forward_urllib3(method: str, path: str, body: bytes) -> tuple[int, bytes]:
        response = state["pool"].urlopen(method, path, body=body, headers={"content-type": "application/json"})
        return response.status, response.data

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    if kind == "aiohttp":
                        import aiohttp

                        state["session"] = aiohttp.ClientSession(auto_decompress=False)
                    elif kind == "urllib3_thread":
                        import urllib3

                        state["pool"] = urllib3.connection_from_url(origin, maxsize=16, retries=False)
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if "session" in state:
                        await state["session"].close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if kind == "static":
            status, answer = 200, STATIC_ANSWER
        elif kind == "aiohttp":
            status, answer = await forward_aiohttp(scope["method"], scope["path"], body)
        else:
            import anyio

            status, answer = await anyio.to_thread.run_sync(forward_urllib3, scope["method"], scope["path"], body)
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def serve(kind: str, port: int, origin: str) -> None:
    import uvicorn

    uvicorn.run(
        _app(kind, origin),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )


def _start(kind: str, port: int, origin: str) -> subprocess.Popen:
    if kind == "gateway":
        return start_gateway(port)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.proxy_floor", "serve", kind, str(port), origin],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import urllib3

    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        try:
            urllib3.request("POST", f"http://127.0.0.1:{port}/", body=b"{}", timeout=2, retries=False)
            return process
        except urllib3.exceptions.HTTPError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"the {kind} server did not answer within {STARTUP_S:g} s")


def _measure(kind: str, origin: str, path: str, requests: int) -> dict:
    port = free_port()
    process = _start(kind, port, origin)
    try:
        direct, served = Timed(origin), Timed(f"http://127.0.0.1:{port}")
        static = kind == "static"

        def through() -> float:
            if static:  # its answer is its own: no hits to compare, no status to check
                started = time.perf_counter()
                served.pool.urlopen("POST", path, body=BODY, headers={"content-type": "application/json"}).data
                return (time.perf_counter() - started) * 1000
            return served.post(path, BODY)[0]

        for _ in range(WARMUP):
            direct.post(path, BODY)
            through()
        user0, system0 = process_cpu_split(process.pid)
        times: dict[str, list[float]] = {"direct": [], "through": []}
        for n in range(requests):
            pair = [("direct", lambda: direct.post(path, BODY)[0]), ("through", through)]
            for side, send in pair if n % 2 == 0 else reversed(pair):
                times[side].append(send())
        user1, system1 = process_cpu_split(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return {
        "direct_p50_ms": round(percentile(times["direct"], 0.5), 3),
        "through_p50_ms": round(percentile(times["through"], 0.5), 3),
        "added_p50_ms": round(percentile(times["through"], 0.5) - percentile(times["direct"], 0.5), 3),
        "cpu_user_us_per_request": round((user1 - user0) / requests * 1e6),
        "cpu_system_us_per_request": round((system1 - system0) / requests * 1e6),
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":
        serve(argv[1], int(argv[2]), argv[3])
        return 0
    from chunkrag_core.settings import Settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="timed request pairs per server per run")
    parser.add_argument("--index", default="bench-scifact-passthru")
    args = parser.parse_args(argv)
    origin = Settings.from_env().es_nodes[0]
    path = f"/{args.index}/_search"
    load_at_start = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {kind: [] for kind in SERVERS}
    for run in range(args.runs):
        for kind in SERVERS:
            runs[kind].append(_measure(kind, origin, path, args.requests))
        print(
            f"run {run + 1}: "
            + ", ".join(f"{kind} +{runs[kind][-1]['added_p50_ms']:.3f} ms" for kind in SERVERS if kind != "static"),
            file=sys.stderr,
        )
    results = {
        kind: {
            key: median([r[key] for r in measured])
            for key in ("added_p50_ms", "cpu_user_us_per_request", "cpu_system_us_per_request", "through_p50_ms")
        }
        | {"added_p50_ms_per_run": [r["added_p50_ms"] for r in measured]}
        for kind, measured in runs.items()
    }
    payload = {
        "index": args.index,
        "body": BODY.decode(),
        "runs": args.runs,
        "requests_per_run": args.requests,
        "servers": {
            "static": "bare ASGI app under uvicorn (uvloop, httptools), answering itself",
            "aiohttp": "the bare app forwarding over one aiohttp ClientSession",
            "urllib3_thread": "the bare app forwarding over a urllib3 pool from anyio's worker threads",
            "gateway": "`chunkrag serve` with its defaults",
        },
        "load_average": {"start": round(load_at_start, 2), "end": round(os.getloadavg()[0], 2)},
        "results": results,
        "note": (
            "static: through_p50_ms is the whole round trip to a server that answers itself (added_p50_ms "
            "compares it with a real search and is not meaningful); medians over runs"
        ),
    }
    print(write_result("proxy_floor", "bench.proxy_floor", payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
