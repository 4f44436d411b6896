"""The chunk filter on an evaluation set, with the local model on real
Celery workers: what `chunkrag eval` reports, plus the time per question
with one and with two worker processes.

    python -m bench.filter_bench popqa --limit 40 --timing-limit 8
    python -m bench.filter_bench pubhealth --limit 30 --timing-limit 8

Each run uses a Redis database of its own, flushed first, so no score comes
from the cache of an earlier run. The two timing runs judge the same first
``--timing-limit`` questions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import RESULTS, SHARED, write_result
from chunkrag_core.engines import make_backend
from chunkrag_core.providers import make_chat, make_embedder
from chunkrag_core.settings import Settings
from chunkrag_eval.datasets import read_items
from chunkrag_eval.report import print_outcome, write_report
from chunkrag_eval.runner import evaluate
from chunkrag_filter.pipeline import FilterOptions
from chunkrag_filter.processors.relevance import ScoringOptions
from local_services.celery_workers import CeleryWorkers
from workers.dispatch import celery_judge_many

# Redis databases used by the runs (0 is the default one users have).
MAIN_DB, TIMING_DB = 13, 14


def run(dataset: str, items, *, workers: int, redis_db: int, options: FilterOptions, generate: bool, label: str):
    base = Settings.from_env()
    redis_url = base.redis_url.rsplit("/", 1)[0] + f"/{redis_db}"
    env = {**os.environ, "REDIS_URL": redis_url}
    settings = dataclasses.replace(base, redis_url=redis_url)
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    with tempfile.TemporaryDirectory() as logs, CeleryWorkers(env, Path(logs), concurrency=1) as pool:
        pool.start(workers)
        print(f"--- {label}: {len(items)} questions, {workers} worker(s)", file=sys.stderr)
        return evaluate(
            items,
            dataset,
            client=make_backend(settings),
            embedder=make_embedder(settings.embedder),
            settings=settings,
            model=make_chat(settings.chat),
            options=options,
            judge_many=celery_judge_many(settings=settings),
            index=f"chunkrag-eval-{dataset}",
            generate=generate,
            on_question=lambda q: print_outcome(q, sys.stderr),
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset", choices=["popqa", "pubhealth", "bio"])
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--timing-limit", type=int, default=8)
    parser.add_argument("--method", default="listwise")
    parser.add_argument("--prior-weight", type=float, default=0.0)
    parser.add_argument("--generate", action="store_true")
    parser.add_argument("--name", help="result file name (default filter_<dataset>_dev)")
    parser.add_argument(
        "--timing-only",
        action="store_true",
        help="only the 1- and 2-worker timing runs, written into the existing result file",
    )
    args = parser.parse_args(argv)

    _, items, bad = read_items(SHARED / "eval" / args.dataset / "dev.jsonl", args.dataset, "ambiguous", args.limit)
    options = FilterOptions(scoring=ScoringOptions(method=args.method), prior_weight=args.prior_weight, answer=False)
    name = args.name or f"filter_{args.dataset}_dev"
    timing_items = items[: args.timing_limit]
    # Timed back to back, on the same questions, each with an empty cache, so
    # both see the same machine load (the main run is too long for that).
    timing = {}
    for workers in (1, 2):
        timed = run(
            args.dataset,
            timing_items,
            workers=workers,
            redis_db=TIMING_DB,
            options=options,
            generate=False,
            label=f"timing, {workers} worker(s)",
        )
        timing[f"{workers}_worker{'s' if workers > 1 else ''}"] = round(
            statistics.median(q.seconds for q in timed.questions), 2
        )
    timing["questions_timed"] = len(timing_items)
    if args.timing_only:
        path = RESULTS / f"{name}.json"
        payload = json.loads(path.read_text())
        payload["p50_s_per_question"] = timing
        payload["timing_command"] = " ".join(["python", "-m", "bench.filter_bench", *sys.argv[1:]])
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    else:
        main_run = run(
            args.dataset, items, workers=1, redis_db=MAIN_DB, options=options, generate=args.generate, label="main"
        )
        summary = main_run.summary()
        details = RESULTS / f"{name}.questions.json"
        write_report(details, summary, main_run)
        path = write_result(
            name,
            "bench.filter_bench",
            {
                "dataset": f"{args.dataset}/dev.jsonl (first {len(items)} records; pool: contexts.ambiguous)",
                "model": Settings.from_env().chat.model,
                "options": {
                    "method": args.method,
                    "prior_weight": args.prior_weight,
                    "threshold": "dynamic",
                    "redundancy": 0.9,
                    "min_score": options.min_score,
                },
                **{
                    k: summary[k]
                    for k in (
                        "questions",
                        "answer_in_context_before",
                        "answer_in_context_after",
                        "answer_in_context_kept_share",
                        "baseline_cosine_answer_in_context_after",
                        "context_chars_before",
                        "context_chars_after",
                        "context_chars_kept_share",
                        "model_calls_per_question",
                        "naive_model_calls_per_question",
                        "prompt_tokens_per_question",
                        "accuracy",
                        "graded",
                        "candidates_per_question",
                        "kept_per_question",
                        "nothing_relevant_rate",
                    )
                },
                "calls_reduction_vs_naive": round(
                    summary["naive_model_calls_per_question"] / summary["model_calls_per_question"], 2
                )
                if summary["model_calls_per_question"]
                else None,
                "p50_s_per_question": timing,
                "p50_s_per_question_main_run_1_worker": summary["seconds_per_question"].get("p50"),
                "skipped_records": len(bad),
                "per_question_file": str(details.relative_to(RESULTS.parent.parent)),
            },
        )
    print(json.dumps(json.loads(path.read_text()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
