r"""The default chunk breakpoint, chosen by the rule in docs/ingest.md
(``chunkrag_eval.chunking_choice`` measures it).

    python -m bench.chunking_default [--distractors 1000] [--cache PATH] [--limit N]

Results: ``bench/results/chunking_default.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import SHARED, write_result


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.chunking_choice import CachingEmbedder, choose_breakpoint

    parser = argparse.ArgumentParser()
    parser.add_argument("--distractors", type=int, default=1000, help="SQuAD 2.0 dev paragraphs in the open corpus")
    parser.add_argument("--limit", type=int, help="the first N questions of each set (a quick look; not the rule's)")
    parser.add_argument("--cache", type=Path, help="an .npz keeping every embedded text across runs")
    parser.add_argument("--name", default="chunking_default")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    embedder = CachingEmbedder(make_embedder(settings.embedder), settings.embedder.dims, args.cache)
    began, load_before = time.perf_counter(), os.getloadavg()
    measured = choose_breakpoint(
        settings,
        make_backend(settings),
        embedder,
        popqa=SHARED / "eval" / "popqa" / "dev.jsonl",
        pubhealth=SHARED / "eval" / "pubhealth" / "dev.jsonl",
        squad=SHARED / "eval" / "squad" / "squad2_cs224n_dev-v2.0.json",
        distractors=args.distractors,
        limit=args.limit,
    )
    path = write_result(
        args.name,
        "bench.chunking_default",
        {
            "commit": git_commit(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(time.perf_counter() - began, 1),
            **measured,
        },
    )
    print(f"winner {measured['winner']}; wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
