"""What every benchmark records: the machine, the command, medians."""

from __future__ import annotations

import atexit
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(os.environ.get("CHUNKRAG_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def machine() -> dict[str, Any]:
    from chunkrag_eval.open_eval import machine as described

    return described()


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 3)


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


def write_result(name: str, module: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "command": " ".join(["python", "-m", module, *sys.argv[1:]]),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        **payload,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def merge_result(
    name: str, module: str, section: str, payload: dict[str, Any], rows_key: str, rows: dict[str, Any]
) -> Path:
    """Add rows measured by a later, separate run (behind a flag) to
    ``results/NAME.json`` without re-running or dropping the rows already
    there: ``rows`` go under ``rows_key`` beside the old ones, and how they
    were measured (command, machine, date, ``payload``) under ``section``."""
    path = RESULTS / f"{name}.json"
    existing = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    merged = {
        **existing,
        rows_key: {**existing.get(rows_key, {}), **rows},
        section: {
            "command": " ".join(["python", "-m", module, *sys.argv[1:]]),
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d"),
            **payload,
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    return path
