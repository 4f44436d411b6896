"""Does judging scale with Celery workers when the model is remote?

    python -m bench.worker_scaling --latency 0.4 --questions 48 --runs 3

A scripted OpenAI-compatible server (tests/support/scripted_openai.py: real
HTTP, a scripted listwise answer) stands in for a remote model that takes
``--latency`` seconds per call, whatever the load. ``--clients`` questions
are in flight at once, each judging 18 chunks (two listwise batches, two
tasks) through the real dispatcher on 1, 2 and 4 real worker processes
(one pool process each). Reported: questions per second, median of the
runs, and the ratio to one worker.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import median, write_result

CHUNKS_PER_QUESTION = 18


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.4)
    parser.add_argument("--questions", type=int, default=48)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args(argv)

    import redis

    from chunkrag_core.chunk import Chunk
    from chunkrag_core.settings import Settings
    from chunkrag_filter.processors.relevance import ScoringOptions
    from local_services.celery_workers import CeleryWorkers
    from tests.support.scripted_openai import ScriptedOpenAI, listwise_choice
    from workers.dispatch import celery_judge_many

    answer = listwise_choice("answer")

    def slow(request):
        time.sleep(args.latency)
        return answer(request)

    counts = [int(n) for n in args.workers.split(",")]
    rows = {n: [] for n in counts}
    with ScriptedOpenAI(default=slow) as server:
        base = Settings.from_env()
        redis_url = base.redis_url.rsplit("/", 1)[0] + "/15"
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "CHUNKRAG_CHAT_BASE_URL": server.base_url,
            "CHUNKRAG_WORKER_QUERY_BUDGET_S": "600",
        }
        settings = Settings.from_env(env)
        options = ScoringOptions(method="listwise")
        for run in range(args.runs):
            for n in counts if run % 2 == 0 else list(reversed(counts)):
                # A fresh queue and no score cache hits: every question is new.
                redis.Redis.from_url(redis_url).flushdb()
                with tempfile.TemporaryDirectory() as logs, CeleryWorkers(env, Path(logs), concurrency=1) as pool:
                    pool.start(n)
                    judge_many = celery_judge_many(settings=settings)

                    def one(q: int) -> None:
                        chunks = [
                            Chunk(
                                f"run{run}-w{n}-q{q}",
                                i,
                                f"passage {i} of question {q}" + (" answer" if i == 3 else ""),
                                0,
                                10,
                            )
                            for i in range(CHUNKS_PER_QUESTION)
                        ]
                        judgements = judge_many(f"question {q} run {run} workers {n}", chunks, options)
                        if any(j.combined is None for j in judgements):
                            raise RuntimeError(
                                f"question {q}: unjudged chunks "
                                f"{[j.notes for j in judgements if j.combined is None][:1]}"
                            )

                    started = time.perf_counter()
                    with ThreadPoolExecutor(max_workers=args.clients) as clients:
                        list(clients.map(one, range(args.questions)))
                    rate = args.questions / (time.perf_counter() - started)
                rows[n].append(round(rate, 3))
                print(f"run {run}: {n} worker(s): {rate:.2f} questions/s", file=sys.stderr)
    result = {
        "model_latency_s": args.latency,
        "questions_per_run": args.questions,
        "clients": args.clients,
        "chunks_per_question": CHUNKS_PER_QUESTION,
        "tasks_per_question": 2,
        "questions_per_s": {str(n): median(v) for n, v in rows.items()},
        "runs": {str(n): v for n, v in rows.items()},
    }
    one_worker = result["questions_per_s"][str(counts[0])]
    result["ratio_to_one_worker"] = {str(n): round(result["questions_per_s"][str(n)] / one_worker, 3) for n in counts}
    path = write_result("worker_scaling", "bench.worker_scaling", result)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
