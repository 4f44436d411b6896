"""Client-side fusion's cost: hits with their chunks in the ``_msearch``
(every chunk of both windows, vectors included when the filter wants them)
against ids and scores first, then one fetch of the chunks fusion kept.

    python bench/fusion_fetch.py run --tree /path/to/checkout --label before --index chunkrag-loo-scifact
    python bench/fusion_fetch.py summary

Run by path with ``PYTHONPATH`` at the checkout to measure, so the same
script times the retriever of two commits on the same index; ``run`` appends
its rows to bench/results/fusion_fetch.json, ``summary`` takes the median per
label. The queries: SciFact's 300, embedded once before any timing; an
untimed warm-up of 50 searches per shape. Timed: HybridRetriever.took_ms
(the engine part; the query's embedding excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULT = Path(__file__).resolve().parent / "results" / "fusion_fetch.json"
SHARED = Path(os.environ.get("CHUNKRAG_SHARED", Path(__file__).resolve().parents[2] / "shared"))
# (name, retrieval size, vectors): the filter's default candidates with
# vectors (redundancy), and a plain top 10 without.
SHAPES = (("minmax_candidates_with_vectors", 8, True), ("minmax_top10", 10, False))
WARMUP = 50


def quantile(values, q):
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def run(index: str, runs: int) -> dict:
    import numpy as np

    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from search_extension.retriever import HybridRetriever

    path = SHARED / "eval" / "scifact" / "beir_derived" / "queries_validation.jsonl"
    texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]
    settings = Settings.from_env()
    vectors = dict(zip(texts, make_embedder(settings.embedder).embed(texts)))

    class Cached:
        def embed(self, batch):
            return np.asarray([vectors[t] for t in batch], dtype=np.float32)

    retriever = HybridRetriever(make_backend(settings), Cached(), index, settings.retrieval)
    rows = {}
    for name, size, with_vectors in SHAPES:
        for text in texts[:WARMUP]:
            retriever.search(text, mode="minmax", size=size, include_vectors=with_vectors)
        per_run = []
        for _ in range(runs):
            took = [retriever.search(t, mode="minmax", size=size, include_vectors=with_vectors).took_ms for t in texts]
            per_run.append({"p50": quantile(took, 0.5), "p95": quantile(took, 0.95), "p99": quantile(took, 0.99)})
        rows[name] = {k: statistics.median(r[k] for r in per_run) for k in ("p50", "p95", "p99")} | {"runs": per_run}
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run")
    one.add_argument("--tree", required=True)
    one.add_argument("--label", required=True)
    one.add_argument("--index", default="chunkrag-loo-scifact")
    one.add_argument("--runs", type=int, default=3)
    one.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser("summary")
    args = parser.parse_args(argv)
    if args.command == "summary":
        data = json.loads(RESULT.read_text())
        by_label: dict[str, dict[str, list[float]]] = {}
        for row in data["rows"]:
            for shape, figures in row["shapes"].items():
                for stat in ("p50", "p95"):
                    by_label.setdefault(row["label"], {}).setdefault(f"{shape}.{stat}", []).append(figures[stat])
        data["summary"] = {
            label: {key: round(statistics.median(values), 2) for key, values in stats.items()}
            for label, stats in by_label.items()
        }
        RESULT.write_text(json.dumps(data, indent=2) + "\n")
        print(json.dumps(data["summary"], indent=2))
        return 0
    if args.child:
        print(json.dumps(run(args.index, args.runs)))
        return 0
    env = {**os.environ, "PYTHONPATH": args.tree}
    commit = subprocess.run(
        ["git", "-C", args.tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    load = os.getloadavg()[0]
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "run",
            "--tree",
            args.tree,
            "--label",
            args.label,
            "--index",
            args.index,
            "--runs",
            str(args.runs),
            "--child",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    shapes = json.loads(out.stdout.strip().splitlines()[-1])
    data = json.loads(RESULT.read_text()) if RESULT.exists() else {"rows": []}
    data.setdefault("what", __doc__.split("\n\n")[0])
    data["rows"].append(
        {
            "label": args.label,
            "commit": commit,
            "index": args.index,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_1m_before": round(load, 2),
            "command": f"python bench/fusion_fetch.py run --label {args.label} --index {args.index} --runs {args.runs}",
            "shapes": shapes,
        }
    )
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(data, indent=2) + "\n")
    print(args.label, json.dumps({k: {s: v[s] for s in ("p50", "p95")} for k, v in shapes.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
