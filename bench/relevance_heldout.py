"""The project's relevance model against the retrieval's own ranking, within a question.

    python -m bench.filter_loo build                 # the candidates (cached; once)
    python -m bench.relevance_heldout                # score them, fit, compare

Reads the candidates ``bench.filter_loo build`` cached (every labelled set of
shared/eval, each question's best 64 chunks from its pool by the hybrid
search, with the gold label and the retrieval signals), reads each with the
relevance model (chunkrag_core/providers/local_relevance.py; the scores are
cached per model sha256), and compares at equal characters per question:
each ranking keeps the best chunks within 25% and 50% of the question's
candidate characters, and a question counts when a relevant chunk is kept.

Rankings: the hybrid retrieval order (top-k), embedding cosine, the
relevance model alone, and the calibration the filter ships for ``relevance:
crossencoder``: a logistic model over the relevance model's log-odds and the
retrieval signals, fitted here on the two sets the relevance model was
trained on (NQ, SQuAD), never on a held-out set. Every figure for a
held-out set (PopQA, SciFact, WikiQA, HealthVer, Climate-FEVER: none of them
was seen in training or fitting) is marked ``held_out``; exact McNemar
p-values compare the relevance rankings with top-k and cosine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from bench.common import write_result
from bench.filter_loo import CACHE

SETS = ("popqa", "scifact", "wikiqa", "healthver", "climate_fever", "nq", "squad")
TRAINED_ON = ("nq", "squad")
SHARES = (0.25, 0.5)
FEATURES = ("relevance_logit", "relevance_gap", "cosine", "cosine_gap", "bm25", "inv_rank", "log_chars")


def load_set(cache: Path, name: str) -> list[dict]:
    path = cache / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def relevance_scores(records: list[dict], cache_file: Path, model) -> list[list[float]]:
    """The model's P(relevant) for every candidate, cached by question id."""
    cached: dict[str, list[float]] = {}
    if cache_file.exists():
        for line in cache_file.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            cached[entry["query_id"]] = entry["scores"]
    out = []
    with cache_file.open("a", encoding="utf-8") as handle:
        for record in records:
            key = str(record["query_id"])
            if key not in cached or len(cached[key]) != len(record["rows"]):
                cached[key] = [
                    round(s, 6) for s in model.score(record["question"], [r["text"] for r in record["rows"]])
                ]
                handle.write(json.dumps({"query_id": key, "scores": cached[key]}) + "\n")
            out.append(cached[key])
    return out


def with_relevance(records: list[dict], scores: list[list[float]]) -> list[dict]:
    """Each candidate row with the relevance features the filter computes."""
    from chunkrag_filter.processors.calibration import relevance_logit

    out = []
    for record, per in zip(records, scores):
        logits = [relevance_logit(p) for p in per]
        best = max(logits, default=0.0)
        rows = [
            {**row, "relevance": p, "relevance_logit": z, "relevance_gap": z - best}
            for row, p, z in zip(record["rows"], per, logits)
        ]
        out.append({**record, "rows": rows})
    return out


def kept_answer(records: Sequence[dict], ranking: Sequence[Sequence[float]], share: float) -> list[bool]:
    """Per question with a relevant candidate: is one kept within ``share``
    of the question's candidate characters?"""
    from chunkrag_eval.measures import share_kept

    flags = []
    for record, scores in zip(records, ranking):
        rows = record["rows"]
        if not any(r["gold"] for r in rows):
            continue
        kept = share_kept([r["chars"] for r in rows], scores, share)
        flags.append(any(rows[i]["gold"] for i in kept))
    return flags


def rankings(records: Sequence[dict], calibration) -> dict[str, list[list[float]]]:
    return {
        "top_k": [[-r["rank"] for r in rec["rows"]] for rec in records],
        "cosine": [[r["cosine"] for r in rec["rows"]] for rec in records],
        "relevance": [[r["relevance"] for r in rec["rows"]] for rec in records],
        "relevance_calibrated": [[calibration.probability(r) for r in rec["rows"]] for rec in records],
    }


def compare(records: Sequence[dict], calibration) -> dict:
    from chunkrag_eval.measures import discordant, mcnemar_exact, rate
    from chunkrag_filter.processors.calibration import roc_auc

    ranked = rankings(records, calibration)
    out: dict = {
        "questions": len(records),
        "with_relevant_candidate": sum(any(r["gold"] for r in rec["rows"]) for rec in records),
        "candidates_per_question": round(sum(len(rec["rows"]) for rec in records) / max(len(records), 1), 1),
        "auc": {},
    }
    for name, scores in ranked.items():
        flat = [s for per in scores for s in per]
        labels = [bool(r["gold"]) for rec in records for r in rec["rows"]]
        auc = roc_auc(flat, labels)
        out["auc"][name] = None if auc is None else round(auc, 4)
    for share in SHARES:
        flags = {name: kept_answer(records, scores, share) for name, scores in ranked.items()}
        block = {name: round(rate(f) or 0.0, 4) for name, f in flags.items()}
        for mine in ("relevance", "relevance_calibrated"):
            for base in ("top_k", "cosine"):
                b, c = discordant(flags[mine], flags[base])
                block[f"{mine}_vs_{base}"] = {
                    "points": round(100 * (block[mine] - block[base]), 1),
                    "only_mine": b,
                    "only_base": c,
                    "p": round(mcnemar_exact(b, c), 6),
                }
        out[f"at_{int(share * 100)}pct_chars"] = block
    return out


def main(argv: list[str] | None = None) -> int:
    from chunkrag_core.artifacts import RELEVANCE_INT8_ONNX
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel
    from chunkrag_filter.processors.calibration import RELEVANCE_ONLY, fit_logistic

    parser = argparse.ArgumentParser(prog="python -m bench.relevance_heldout", description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--out", default="relevance_heldout")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)

    model = LocalRelevanceModel()
    started = time.perf_counter()
    data: dict[str, list[dict]] = {}
    for name in args.sets:
        records = load_set(args.cache, name)
        if not records:
            print(f"{name}: no cached candidates under {args.cache}; run `python -m bench.filter_loo build {name}`")
            continue
        sidecar = args.cache / f"{name}.relevance-{RELEVANCE_INT8_ONNX.sha256[:12]}.jsonl"
        data[name] = with_relevance(records, relevance_scores(records, sidecar, model))
        print(f"{name}: {len(records)} questions scored ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    fit_rows = [r for name in TRAINED_ON for rec in data.get(name, []) for r in rec["rows"]]
    # Without the training sets' candidates there is nothing to fit on: the
    # shipped calibration (the model's own probability) stands in.
    calibration = fit_logistic(fit_rows, [bool(r["gold"]) for r in fit_rows], FEATURES) if fit_rows else RELEVANCE_ONLY
    results = {name: {"held_out": name not in TRAINED_ON, **compare(recs, calibration)} for name, recs in data.items()}
    payload = {
        "model": {"artifact": RELEVANCE_INT8_ONNX.relative_path, "sha256": RELEVANCE_INT8_ONNX.sha256},
        "calibration_fitted_on": [name for name in TRAINED_ON if data.get(name)],
        "calibration": {
            "features": list(calibration.names),
            "weights": list(calibration.weights),
            "bias": calibration.bias,
        },
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "seconds": round(time.perf_counter() - started, 1),
        "sets": results,
    }
    for name, block in results.items():
        line = [f"{name:14s}{' (held out)' if block['held_out'] else ' (trained) '}"]
        for share in SHARES:
            b = block[f"at_{int(share * 100)}pct_chars"]
            line.append(
                f"@{int(share * 100)}%: top-k {b['top_k']:.3f} cosine {b['cosine']:.3f} "
                f"model {b['relevance']:.3f} calibrated {b['relevance_calibrated']:.3f}"
            )
        print("  ".join(line))
    if not args.no_save:
        print(write_result(args.out, "bench.relevance_heldout", payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
