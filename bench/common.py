"""What every benchmark records (the machine, the command, medians) and the
gateway the gateway benches start and time."""

from __future__ import annotations

import atexit
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(os.environ.get("CHUNKRAG_SHARED", Path(__file__).resolve().parents[2] / "shared"))
COMPAT = "application/vnd.elasticsearch+json; compatible-with=9"
# How long the gateway may take to start (imports, first health check): a
# few seconds on a quiet machine, more than a minute on one shared with heavy work.
STARTUP_S = 180.0


def machine() -> dict[str, Any]:
    from chunkrag_eval.open_eval import machine as described

    return described()


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 3)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb(pid: int) -> float | None:
    """A process's resident memory (VmRSS), None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def burn_cpu(processes: int) -> None:
    """``processes`` processes spinning on the CPU until this one exits: a
    measurement taken with the CPU busy (``--busy N``), recorded as such."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    atexit.register(lambda: [p.kill() for p in burners])


def run_child(module: str, args: Sequence[str]) -> dict[str, Any]:
    """Run one measurement in a fresh process (clean peak RSS, cold caches
    of our own), and return the JSON it prints last."""
    out = subprocess.run([sys.executable, "-m", module, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def stamped(module: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with the command that ran (this process's), the machine and the date."""
    command = " ".join(["python", "-m", module, *sys.argv[1:]])
    return {"command": command, "machine": machine(), "date": time.strftime("%Y-%m-%d"), **payload}


def write_result(name: str, module: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(stamped(module, payload), indent=2) + "\n", encoding="utf-8")
    return path


def kept_sections(name: str, keep: Callable[[str], bool]) -> dict[str, Any]:
    """The sections of ``results/NAME.json`` that other runs wrote (``keep``
    says which), for a run that writes the file anew to keep."""
    path = RESULTS / f"{name}.json"
    previous = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return {key: value for key, value in previous.items() if keep(key)}


def merge_result(
    name: str,
    module: str,
    section: str,
    payload: dict[str, Any],
    rows_key: str = "",
    rows: dict[str, Any] | None = None,
) -> Path:
    """Add what a later, separate run measured to ``results/NAME.json``
    without dropping what is there: how it was measured (command, machine,
    date) and ``payload`` under ``section``; ``rows``, if any, under
    ``rows_key`` beside the old ones."""
    path = RESULTS / f"{name}.json"
    existing = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    merged = {**existing, section: stamped(module, payload)}
    if rows_key:
        merged[rows_key] = {**existing.get(rows_key, {}), **(rows or {})}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    return path


# --- the gateway, started as a user starts it and timed from outside ---------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gateway(port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`chunkrag serve` on ``port`` once its health answers; its output is
    discarded so that logging to a pipe nobody reads cannot block it."""
    import urllib3

    process = subprocess.Popen(
        [sys.executable, "-m", "chunkrag_cli", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
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


def stop_gateway(process: subprocess.Popen, wait_s: float = 60) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=wait_s)


class Timed:
    """POSTs pre-encoded bodies over a keep-alive connection pool; an answer but 200 is an error."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None, timeout: float = 30):
        import urllib3

        self.pool = urllib3.connection_from_url(base_url, maxsize=1, retries=False, timeout=timeout)
        self.headers = {"content-type": COMPAT, "accept": COMPAT, **(headers or {})}

    def post(self, path: str, body: bytes) -> tuple[float, bytes]:
        started = time.perf_counter()
        response = self.pool.urlopen("POST", path, body=body, headers=self.headers)
        data = response.data
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}: {data[:300]!r}")
        return elapsed, data
