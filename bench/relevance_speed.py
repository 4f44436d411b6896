"""How long the relevance model takes to read a query's candidates.

    python -m bench.relevance_speed --runs 30

Scores 20 candidates of ~500 characters (SQuAD paragraphs' sentences packed
to 500 characters, the size the ingest aims at) for one question, over and
over, on the shipped int8 graph and, when given (``--fp32 PATH``, written
by ``python -m chunkrag_train export`` beside the checkpoint), the fp32 one;
at each of several batch sizes. Reports the median and p90 wall time of a
query's scoring, and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench.common import SHARED, write_result

CANDIDATES = 20
TARGET_CHARS = 500


def candidates(count: int = CANDIDATES, size: int = TARGET_CHARS) -> tuple[str, list[str]]:
    """A SQuAD question and ``count`` chunks of about ``size`` characters from its article."""
    from chunkrag_train.pairs import chunks_of

    data = json.loads((SHARED / "eval" / "squad" / "squad2_cs224n_dev-v2.0.json").read_text(encoding="utf-8"))
    article = data["data"][0]
    texts = []
    for paragraph in article["paragraphs"]:
        context = paragraph["context"]
        texts.extend(context[s:e] for s, e in chunks_of(context, size))
    texts = [t for t in texts if len(t) > size * 0.6][:count]
    return article["paragraphs"][0]["qas"][0]["question"], texts


def time_model(model, query: str, texts: list[str], runs: int) -> dict:
    model.score(query, texts)  # load and warm
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        model.score(query, texts)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    from chunkrag_core.artifacts import RELEVANCE_INT8_ONNX, Artifact, file_sha256
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    parser = argparse.ArgumentParser(prog="python -m bench.relevance_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[8, 16, 20])
    parser.add_argument("--fp32", type=Path, default=None, help="the fp32 graph, for comparison")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)

    query, texts = candidates()
    graphs = {"int8": RELEVANCE_INT8_ONNX}
    if args.fp32:
        graphs["fp32"] = Artifact("relevance fp32", "chunkrag_core", str(args.fp32.resolve()), file_sha256(args.fp32))
    rows = {}
    for name, artifact in graphs.items():
        for batch in args.batch_sizes:
            model = LocalRelevanceModel(batch_size=batch, artifact=artifact)
            rows[f"{name}_batch{batch}"] = time_model(model, query, texts, args.runs)
            print(name, batch, rows[f"{name}_batch{batch}"], file=sys.stderr)
    payload = {
        "candidates": len(texts),
        "mean_chars": round(statistics.fmean(len(t) for t in texts)),
        "threads": 2,
        "goal_p50_ms": 30,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "rows": rows,
    }
    print(json.dumps(payload, indent=2))
    if not args.no_save:
        print(write_result("relevance_speed", "bench.relevance_speed", payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
