"""Where the gateway's memory goes under load: run `chunkrag serve` with
tracemalloc on and a sampler thread, then compare what Python holds with
what the process holds.

    python -m bench.gateway_memory run OUT_DIR [--every 10] -- serve --port 8400
    python -m bench.gateway_memory compare OUT_DIR [--top 15]

run: the gateway in this process (the CLI's own `main`), tracemalloc keeping
8 frames per allocation, and every --every seconds a line in
OUT_DIR/memory.jsonl (seconds, RSS, Python's traced bytes, the glibc heap's
in-use and free bytes from mallinfo2, thread count) and a snapshot
OUT_DIR/snap-NNNN.pickle. tracemalloc slows the gateway: figures of a traced
run are for finding growth, not for latency.

compare: RSS against traced memory over the run, and the allocation sites
that grew most between the first snapshot after warm-up (--after, seconds)
and the last. Python memory flat while RSS climbs points at the allocator
(free memory kept by glibc's arenas), not at objects kept by the code.

`python -m bench.gateway_bench load --trace-memory OUT_DIR --no-save` starts
the gateway this way.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

from bench.gateway_soak import rss_mb

FRAMES = 8


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def glibc_heap() -> dict[str, float] | None:
    """glibc's own account of its heap, all arenas (mallinfo2, glibc >= 2.33):
    bytes handed out and bytes free but kept, in MB."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    mb = 1024 * 1024
    return {
        "in_use_mb": round((info.uordblks + info.hblkhd) / mb, 1),
        "free_kept_mb": round(info.fordblks / mb, 1),
        "arena_mb": round(info.arena / mb, 1),
    }


def _sample_forever(out: Path, every_s: float) -> None:
    began = time.monotonic()
    number = 0
    with (out / "memory.jsonl").open("a", encoding="utf-8") as log:
        while True:
            time.sleep(every_s)
            traced, peak = tracemalloc.get_traced_memory()
            line = {
                "s": round(time.monotonic() - began, 1),
                "rss_mb": rss_mb(os.getpid()),
                "traced_mb": round(traced / 2**20, 1),
                "traced_peak_mb": round(peak / 2**20, 1),
                "threads": threading.active_count(),
                "glibc": glibc_heap(),
            }
            log.write(json.dumps(line) + "\n")
            log.flush()
            tracemalloc.take_snapshot().dump(str(out / f"snap-{number:04d}-{int(line['s'])}.pickle"))
            number += 1


def run(out: Path, every_s: float, cli_args: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(FRAMES)
    threading.Thread(target=_sample_forever, args=(out, every_s), daemon=True, name="memory-sampler").start()
    from chunkrag_cli.main import main

    return main(cli_args)


def compare(out: Path, after_s: float, top: int) -> None:
    lines = [json.loads(line) for line in (out / "memory.jsonl").read_text().splitlines()]
    for line in lines:
        glibc = line.get("glibc") or {}
        print(
            f"{line['s']:7.1f} s  rss {line['rss_mb']:7.1f} MB  python {line['traced_mb']:6.1f} MB  glibc in use "
            f"{glibc.get('in_use_mb', '?')} MB, free kept {glibc.get('free_kept_mb', '?')} MB  threads "
            f"{line['threads']}"
        )
    snaps = sorted(out.glob("snap-*.pickle"))
    first = next((s for s in snaps if int(s.stem.rsplit("-", 1)[1]) >= after_s), snaps[0])
    last = snaps[-1]
    keep = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
    old = tracemalloc.Snapshot.load(str(first)).filter_traces(keep)
    new = tracemalloc.Snapshot.load(str(last)).filter_traces(keep)
    print(f"\ngrowth from {first.name} to {last.name}, by line:")
    for stat in new.compare_to(old, "lineno")[:top]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {stat.traceback[0]}")
    print("\nby traceback (the biggest growth):")
    for stat in new.compare_to(old, "traceback")[:3]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
        for frame in stat.traceback.format()[-2 * FRAMES :]:
            print("     " + frame)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="bench.gateway_memory")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run")
    run_parser.add_argument("out", type=Path)
    run_parser.add_argument("--every", type=float, default=10.0)
    compare_parser = sub.add_parser("compare")
    compare_parser.add_argument("out", type=Path)
    compare_parser.add_argument(
        "--after", type=float, default=20.0, help="seconds of warm-up before the baseline snapshot"
    )
    compare_parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.out, args.every, cli_args)
    compare(args.out, args.after, args.top)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
