"""The project's relevance model against the retrieval's own ranking, within a question; and its speed.

    python -m bench.relevance_heldout build          # index every labelled set, cache the candidates (once)
    python -m bench.relevance_heldout run [--write]  # score them, fit, compare (results/relevance_heldout.json)
    python -m bench.relevance_heldout speed          # 20 candidates of ~500 characters (results/relevance_speed.json)
    python -m bench.relevance_heldout run --model PATH --limit 100 --name relevance_heldout_fp32   # another graph
    python -m bench.relevance_heldout speed --model fp32=PATH --max-tokens 128 96 64   # more rows
    python -m bench.relevance_heldout pairs [--model P] [--judge P]   # pair-level AUC (results/relevance_pairs.json)

Rankings, measures and the held-out sets: chunkrag_eval/relevance_study.py; the pairs: chunkrag_eval/pair_study.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.common import SHARED, write_result

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "filter_loo"
SETS = ("popqa", "scifact", "wikiqa", "healthver", "climate_fever", "nq", "squad")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relevance_heldout", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("sets", nargs="*", default=list(SETS))
    r = sub.add_parser("run")
    r.add_argument("--sets", nargs="*", default=list(SETS))
    pr = sub.add_parser("pairs")
    for p in (r, pr):
        p.add_argument("--model", type=Path, help="score with this ONNX graph (default: the shipped one)")
    pr.add_argument("--judge", type=Path, help="also score with a judge embedder's graph (chunkrag_train)")
    r.add_argument("--max-tokens", type=int, help="cut query and chunk here (default: as trained)")
    r.add_argument("--limit", type=int, help="each set's first N questions only")
    r.add_argument("--write", action="store_true", help="write the fitted calibration and cut into the shipped file")
    s = sub.add_parser("speed")
    s.add_argument("--runs", type=int, default=30)
    s.add_argument("--batch-sizes", type=int, nargs="*", default=[8, 20])
    s.add_argument("--model", nargs="*", default=[], help="LABEL=PATH: rows for another graph besides the shipped one")
    s.add_argument("--max-tokens", type=int, nargs="*", default=[], help="rows at these shorter cuts too")
    for p in (b, r, s, pr):
        p.add_argument("--cache", type=Path, default=CACHE)
        p.add_argument("--no-save", action="store_true")
        p.add_argument("--name", help="results file name (default relevance_heldout, relevance_speed, relevance_pairs)")
    args = parser.parse_args(argv)
    from chunkrag_eval.pair_study import run_pairs
    from chunkrag_eval.relevance_study import build, heldout_table, scoring_speed

    if args.command == "build":
        return build(args.sets, args.cache, SHARED / "eval")
    if args.command == "pairs":  # its cache beside the candidates' (--cache)
        payload = run_pairs(SHARED / "eval", args.cache / "pairs", args.model, args.judge)
    elif args.command == "run":
        payload = heldout_table(args.cache, args.sets, args.model, args.max_tokens, args.limit)
        if args.write:
            write_relevance_calibration(payload["calibration"])
    else:
        if any("=" not in m for m in args.model):
            parser.error("--model takes LABEL=PATH, e.g. fp32=.cache/relevance/model/relevance-minilm.fp32.onnx")
        models = [("shipped", None), *(tuple(m.split("=", 1)) for m in args.model)]
        payload = scoring_speed(SHARED / "eval", args.runs, args.batch_sizes, models, args.max_tokens)
    payload["load_average"] = [round(v, 2) for v in os.getloadavg()]
    if not args.no_save:
        name = args.name or "relevance_" + {"run": "heldout", "speed": "speed"}.get(args.command, args.command)
        print(write_result(name, "bench.relevance_heldout", payload))
    return 0


def write_relevance_calibration(fitted: dict) -> None:
    """The shipped calibration file's ``relevance`` model replaced by the fit (its other models kept)."""
    from chunkrag_filter.processors import calibration as c

    current = c.load_calibration(None)
    model = c.LogisticModel(tuple(fitted["features"]), tuple(fitted["weights"]), fitted["bias"])
    about = {
        **current.about,
        "relevance": "the relevance model's log-odds and the retrieval signals, fitted on the NQ and SQuAD "
        "candidates the relevance model was trained on (`python -m bench.relevance_heldout run --write`, "
        f"{time.strftime('%Y-%m-%d')}, the default chunks; never on a held-out set); cut {fitted['cut']}: "
        f"{fitted['cut_rule']} (results/relevance_heldout.json)",
    }
    c.write_calibration(
        c.shipped_path(),
        current.retrieval,
        current.judged,
        about,
        c.Calibrated(model, fitted["cut"]),
        current.gate,
        current.gate_relevance,
    )


if __name__ == "__main__":
    sys.exit(main())
