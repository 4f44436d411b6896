"""Run declared scenarios (bench/scenarios.toml) and regenerate the report.

    python -m bench.run --list
    python -m bench.run --headline          # what `make bench` runs
    python -m bench.run retrieval gateway   # named scenarios
    python -m bench.run --kind gateway      # every scenario of one kind

Each scenario is one command of a runner (a bench module, or the project's own
`chunkrag eval` / `chunkrag table`) and the one result file it writes. The runner records the
command, machine, date and medians; this adds how long the scenario took and
the load average around it, under ``scenario_runs.NAME`` of that file, and the
command, machine and date where the command itself records none (``keep``: only
that part of the command's output is kept, e.g. `chunkrag eval`'s summary).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from bench.common import RESULTS, machine
from bench.report import SCENARIOS
from bench.report import main as write_report


def run_one(scenario: dict) -> int:
    program, *rest = scenario["command"]
    # python and the project's own commands from this environment, whatever PATH says
    beside = Path(sys.executable).parent / program
    command = [sys.executable if program == "python" else str(beside) if beside.exists() else program, *rest]
    print(f"== {scenario['name']}: {' '.join(scenario['command'])}", flush=True)
    load_before, started = os.getloadavg(), time.monotonic()
    code = subprocess.run(command).returncode
    minutes = round((time.monotonic() - started) / 60, 1)
    path = RESULTS / scenario["result"]
    if code == 0 and path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        if scenario.get("keep"):  # the part of a command's output the report reads (`chunkrag eval --out`)
            data = data[scenario["keep"]]
        # what the project's own commands do not record themselves
        data.setdefault("command", " ".join(scenario["command"]))
        data.setdefault("machine", machine())
        data.setdefault("date", time.strftime("%Y-%m-%d", time.gmtime()))
        data.setdefault("scenario_runs", {})[scenario["name"]] = {
            "minutes": minutes,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"== {scenario['name']}: exit {code}, {minutes} min", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="scenario names (see --list)")
    parser.add_argument("--headline", action="store_true", help="the headline set (`make bench`)")
    parser.add_argument("--kind", help="every scenario of this kind")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    declared = tomllib.loads(SCENARIOS.read_text(encoding="utf-8"))["scenario"]
    if args.list:
        for s in declared:  # * marks the headline set
            print(f"{'*' if s.get('headline') else ' '} {s['name']:<28} {s['kind']:<9} ~{s['minutes']:>4} min")
        return 0
    unknown = set(args.names) - {s["name"] for s in declared}
    if unknown:
        print(f"unknown scenario(s) {sorted(unknown)}; --list shows the declared ones", file=sys.stderr)
        return 2
    chosen = [
        s
        for s in declared
        if s["name"] in args.names or (args.headline and s.get("headline")) or (args.kind and s["kind"] == args.kind)
    ]
    if not chosen:
        print("nothing to run: name scenarios, or pass --headline or --kind (--list shows them)", file=sys.stderr)
        return 2
    failed = [s["name"] for s in chosen if run_one(s) != 0]
    write_report([])
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
