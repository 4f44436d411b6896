"""Does the LLM filter earn its cost? One model run per dataset, then every
variant of the filter replayed on the same model outputs.

    python -m bench.judge_study collect popqa          # all 200 dev questions, the local model
    python -m bench.judge_study ablate                 # -> results/filter_popqa_dev.json
    python -m bench.judge_study collect pubhealth      # all 150 dev claims

`collect` runs the real filter path (`evaluate` -> `run_filter`) with the
listwise judge asked in both orders over every batch, so each candidate
carries its retrieval signals (cosine, BM25, rank) and its share in each
order. Scores go to a Redis score cache (database 12) as the product
caches them, so a later run of the chosen default on the same questions
costs no model call and checks that the product reproduces the replay.

`ablate` replays each variant (evaluation/ablation.py): which share (as
retrieved, or both orders), which candidates the model sees (all, or the
best nine: one batch), which score (the judge's share, a cheap signal, or a
logistic model over both fitted with 5-fold cross-validation by question),
and which cut. The baselines (cosine and BM25 kept to the same characters)
are computed per variant at that variant's own budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.common import RESULTS, SHARED, write_result
from search_extension.evaluation import ablation
from search_extension.evaluation.ablation import Variant
from search_extension.processors.calibration import CHEAP_FEATURES, FEATURES

STUDY_DB = 12


def questions_file(dataset: str) -> Path:
    return RESULTS / f"filter_{dataset}_dev.questions.json"


def collect(dataset: str, limit: int | None, orders: int) -> int:
    import dataclasses

    from chunkrag_core.es_client import make_client
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_core.settings import Settings
    from search_extension.chunk_filter import FilterOptions, judge_in_threads
    from search_extension.evaluation.datasets import read_items
    from search_extension.evaluation.report import print_outcome, write_report
    from search_extension.evaluation.runner import evaluate
    from search_extension.processors.relevance import ScoringOptions
    from workers.score_cache import RedisScoreCache

    settings = Settings.from_env()
    _, items, bad = read_items(SHARED / "eval" / dataset / "dev.jsonl", dataset, "ambiguous", limit)
    cache_url = settings.redis_url.rsplit("/", 1)[0] + f"/{STUDY_DB}"
    cache = RedisScoreCache.from_url(cache_url, ttl_s=30 * 24 * 3600)
    model = make_chat(settings.chat)
    options = FilterOptions(scoring=ScoringOptions(method="listwise", orders=orders), answer=False)
    # Two threads: the local server has two slots, so two batches run at once.
    judge = judge_in_threads(model, threads=settings.chat.parallel, cache=cache, model_name=settings.chat.model)
    started = time.perf_counter()
    report = evaluate(
        items, dataset, client=make_client(settings), embedder=make_embedder(settings.embedder), settings=settings,
        model=model, options=options, judge_many=judge, index=f"chunkrag-eval-{dataset}", generate=False,
        on_question=lambda q: print_outcome(q, sys.stderr),
    )
    summary = {**report.summary(), "skipped_records": len(bad), "wall_seconds": round(time.perf_counter() - started, 1),
               "options": {"method": "listwise", "orders": orders, "threshold": "dynamic", "redundancy": 0.9, "judge_threads": settings.chat.parallel},
               "model": settings.chat.model, "model_base_url": settings.chat.base_url}
    write_report(questions_file(dataset), summary, report)
    print(json.dumps(summary, indent=2))
    return 0


# Cut rules tried for probabilities: Algorithm 1 on them, fixed
# probabilities, and a share of the question's best probability.
CUTS = ("algorithm1", "fixed:0.3", "fixed:0.4", "fixed:0.5", "relative:0.5", "relative:0.7")
JUDGE_FEATURES = FEATURES


def variants() -> list[Variant]:
    out = [
        Variant("cosine, Algorithm 1", "cosine", "algorithm1"),
        Variant("BM25, Algorithm 1", "bm25", "algorithm1"),
        Variant("hybrid retrieval score, Algorithm 1", "retrieval", "algorithm1"),
        Variant("listwise as retrieved, all batches, Algorithm 1 (previous default)", "judge", "algorithm1", judge="forward"),
        Variant("listwise both orders, all batches, Algorithm 1", "judge", "algorithm1", judge="both"),
        Variant("listwise as retrieved, best 9 only, Algorithm 1", "judge", "algorithm1", judge="forward", top=9),
        Variant("listwise both orders, best 9 only, Algorithm 1", "judge", "algorithm1", judge="both", top=9),
    ]
    for cut in CUTS:
        out.append(Variant(f"calibrated, cheap signals only, {cut}", "calibrated", cut, features=CHEAP_FEATURES))
    for judge, top, label in (("forward", None, "as retrieved, all batches"), ("both", None, "both orders, all batches"), ("forward", 9, "as retrieved, best 9"), ("both", 9, "both orders, best 9")):
        for cut in CUTS:
            out.append(Variant(f"calibrated, judge {label} + cheap signals, {cut}", "calibrated", cut, judge=judge, top=top, features=JUDGE_FEATURES))
    return out


def meets_goals(row: dict, before: float) -> bool:
    return (row["answer_in_context_after"] >= row["baseline_cosine_answer_in_context_after"] + 0.05
            and row["answer_in_context_after"] >= 0.90 * before and row["context_chars_kept_share"] <= 0.25)


def ablate(dataset: str, folds: int) -> int:
    payload = json.loads(questions_file(dataset).read_text())
    questions = ablation.questions_from_report(payload)
    per_call = ablation.median_seconds_per_call(payload)
    before = sum(any(r["gold"] for r in q.rows) for q in questions) / len(questions)
    table, fitted = [], {}
    for variant in variants():
        if variant.score == "calibrated":
            results, probabilities, labels = ablation.cross_validated(questions, variant, k=folds)
            auc = ablation.roc_auc(probabilities, labels)
        else:
            results = [ablation.replay(q, variant) for q in questions]
            auc = ablation.chunk_auc(questions, lambda q, v=variant: ablation.scores_for(q, v))
        row = {"variant": variant.name, "score": variant.score, "cut": variant.cut, "judge": variant.judge, "judge_top": variant.top,
               **ablation.summarise(results, per_call), "chunk_roc_auc": None if auc is None else round(auc, 4)}
        row["meets_goals"] = meets_goals(row, before)
        table.append(row)
        print(f"{row['answer_in_context_after']:.3f} (cos {row['baseline_cosine_answer_in_context_after']:.3f}, bm25 {row['baseline_bm25_answer_in_context_after']:.3f}) "
              f"chars {row['context_chars_kept_share']:.3f} calls {row['model_calls_per_question']:.2f} auc {row['chunk_roc_auc']}  {variant.name}", file=sys.stderr)
    for variant in variants():
        if variant.score == "calibrated" and variant.cut == "algorithm1":
            model = ablation.fit(questions, variant)
            fitted[variant.name.rsplit(",", 1)[0]] = {"features": list(model.names), "weights": list(model.weights), "bias": model.bias}
    summary = payload["summary"]
    path = write_result(f"filter_{dataset}_dev_ablation", "bench.judge_study", {
        "dataset": f"{dataset}/dev.jsonl (all {len(questions)} records with gold per chunk; pool: contexts.ambiguous)",
        "model": summary.get("model"),
        "collection_run": {k: summary.get(k) for k in ("questions", "answer_in_context_before", "answer_in_context_after", "baseline_cosine_answer_in_context_after", "baseline_bm25_answer_in_context_after", "context_chars_kept_share", "model_calls_per_question", "naive_model_calls_per_question", "seconds_per_question", "wall_seconds", "options")},
        "answer_in_context_before": round(before, 4),
        "median_seconds_per_call": per_call,
        "cross_validation_folds": folds,
        "ablation": table,
        "fitted_on_all_questions": fitted,
        "note": "Answer-in-context is per-chunk gold (some kept chunk holds a gold answer). Seconds per question are calls times the median seconds per call of the collection run. Calibrated rows are cross-validated by question: each question scored by a model fitted on the other folds.",
        "per_question_file": str(questions_file(dataset).relative_to(RESULTS.parent.parent)),
    })
    print(path)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("dataset", choices=["popqa", "pubhealth"])
    c.add_argument("--limit", type=int)
    c.add_argument("--orders", type=int, default=2, choices=[1, 2])
    a = sub.add_parser("ablate")
    a.add_argument("dataset", nargs="?", default="popqa", choices=["popqa"])
    a.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.command == "collect":
        return collect(args.dataset, args.limit, args.orders)
    return ablate(args.dataset, args.folds)


if __name__ == "__main__":
    sys.exit(main())
