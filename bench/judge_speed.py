"""The local judge's speed: llama-cpp-python's Python server (the previous
runtime, `--logits_all`) against llama.cpp's own `llama-server`, on the same
listwise prompts, the same model file and the same client code.

    CHUNKRAG_LLM_RUNTIME=python CHUNKRAG_LLM_PORT=8089 chunkrag services up --only llm
    python -m bench.judge_speed --old-url http://127.0.0.1:8089/v1 --new-url http://127.0.0.1:8088/v1

Prompts: every listwise batch the filter sends for a seeded sample of PopQA
dev questions (their pools retrieved from the evaluation index, as
`chunkrag eval` does). Each run sends every prompt to each server in turn
(old, new, old, new...), one at a time, so both see the same machine load;
then the same prompts two at a time, to show what parallel slots add. The
shares each server gives are compared: same model, same scores within noise.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench.common import SHARED, median, write_result
from chunkrag_core.chunk import Chunk


def prompts_for(count: int, seed: int) -> list[tuple[str, list[list[str]]]]:
    """(question, listwise batches of chunk texts) for ``count`` sampled questions."""
    from chunkrag_core.engines import make_backend
    from chunkrag_core.engines.schema import DOC_ID
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.runner import MAX_CANDIDATES, doc_id_for, index_pools
    from chunkrag_filter.judging import scoring_batches
    from chunkrag_filter.processors.redundancy import drop_redundant
    from chunkrag_filter.processors.relevance import MAX_LISTWISE_BATCH
    from search_extension.retriever import HybridRetriever

    settings = Settings.from_env()
    _, items, _ = read_items(SHARED / "eval" / "popqa" / "dev.jsonl", "popqa", "ambiguous", None)
    chosen = sorted(random.Random(seed).sample(items, count), key=lambda i: i.item_id)
    client, embedder = make_backend(settings), make_embedder(settings.embedder)
    index = "chunkrag-eval-popqa"
    index_pools(chosen, "popqa", client=client, embedder=embedder, settings=settings, index=index)
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    out = []
    for item in chosen:
        found = retriever.search(
            item.question,
            size=MAX_CANDIDATES,
            filters=[{"term": {DOC_ID: doc_id_for("popqa", item)}}],
            include_vectors=True,
        )
        candidates: list[Chunk] = drop_redundant(list(found.chunks), 0.9)[0]
        out.append(
            (
                item.question,
                [[candidates[i].text for i in part] for part in scoring_batches(len(candidates), MAX_LISTWISE_BATCH)],
            )
        )
    return out


def one_call(model, question: str, texts: list[str]) -> tuple[float, list[float | None], int]:
    from chunkrag_filter.processors.relevance import ScoringOptions, judge_listwise

    started = time.perf_counter()
    judgements = judge_listwise(question, texts, model, ScoringOptions(method="listwise"))
    return time.perf_counter() - started, [j.base for j in judgements], judgements[0].prompt_tokens


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-url", default="http://127.0.0.1:8089/v1")
    parser.add_argument("--new-url", default="http://127.0.0.1:8088/v1")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)

    from chunkrag_core.providers.chat import OpenAICompatibleChat

    servers = {
        "old": OpenAICompatibleChat("qwen2.5-coder-1.5b-instruct", args.old_url, timeout_s=300),
        "new": OpenAICompatibleChat("qwen2.5-coder-1.5b-instruct", args.new_url, timeout_s=300),
    }
    prompts = prompts_for(args.questions, args.seed)
    calls = [(q, texts) for q, batches in prompts for texts in batches]
    print(f"{len(prompts)} questions, {len(calls)} listwise calls per server per run", file=sys.stderr)
    for name, model in servers.items():  # warm-up: load pages, fill caches
        one_call(model, *calls[0])

    runs = []
    shares = {"old": [], "new": []}
    tokens = []
    for run in range(args.runs):
        per_call = {"old": [], "new": []}
        for question, texts in calls:
            for name in ("old", "new") if run % 2 == 0 else ("new", "old"):
                # A prompt the server has seen is nearly free to llama-server (its RAM
                # prompt cache): each run and phase asks a question it has not seen.
                seconds, scores, prompt_tokens = one_call(servers[name], f"{question} (run {run})", texts)
                per_call[name].append(seconds)
                if run == 0:
                    shares[name].append(scores)
                    if name == "new":
                        tokens.append(prompt_tokens)
        per_question = {
            name: [sum(per_call[name][i] for i in idx) for idx in _question_indices(prompts)] for name in per_call
        }
        parallel = {}
        for name, model in servers.items():
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=2) as pool:
                list(pool.map(lambda c: one_call(model, f"{c[0]} (run {run}, two at a time)", c[1]), calls))
            parallel[name] = len(calls) / (time.perf_counter() - started)
        runs.append(
            {
                "s_per_call_p50": {n: median(v) for n, v in per_call.items()},
                "s_per_question_p50": {n: median(v) for n, v in per_question.items()},
                "calls_per_s_two_at_a_time": {n: round(v, 3) for n, v in parallel.items()},
            }
        )
        print(runs[-1], file=sys.stderr)

    differences = [
        abs(a - b)
        for old, new in zip(shares["old"], shares["new"])
        for a, b in zip(old, new)
        if a is not None and b is not None
    ]
    agree = sum(_argmax(o) == _argmax(n) for o, n in zip(shares["old"], shares["new"]))
    result = {
        "questions": len(prompts),
        "listwise_calls_per_run": len(calls),
        "runs": runs,
        "prompt_tokens_per_call_p50": statistics.median(tokens) if tokens else None,
        "s_per_call_p50": {n: median([r["s_per_call_p50"][n] for r in runs]) for n in servers},
        "s_per_question_p50": {n: median([r["s_per_question_p50"][n] for r in runs]) for n in servers},
        "calls_per_s_two_at_a_time": {n: median([r["calls_per_s_two_at_a_time"][n] for r in runs]) for n in servers},
        "scores_same_model": {
            "mean_abs_share_difference": round(statistics.fmean(differences), 4) if differences else None,
            "max_abs_share_difference": round(max(differences), 4) if differences else None,
            "same_top_passage": f"{agree} of {len(calls)}",
        },
    }
    result["speedup_per_call"] = round(result["s_per_call_p50"]["old"] / result["s_per_call_p50"]["new"], 3)
    result["speedup_per_question"] = round(result["s_per_question_p50"]["old"] / result["s_per_question_p50"]["new"], 3)
    result["speedup_two_at_a_time"] = round(
        result["calls_per_s_two_at_a_time"]["new"] / result["calls_per_s_two_at_a_time"]["old"], 3
    )
    result["servers"] = {
        "old": f"llama-cpp-python 0.3.36 Python server, --logits_all true, {args.old_url}",
        "new": f"llama-server from the same sdist's llama.cpp, 2 slots, {args.new_url}",
    }
    path = write_result("judge_speed", "bench.judge_speed", result)
    print(path)
    return 0


def _question_indices(prompts) -> list[list[int]]:
    out, at = [], 0
    for _, batches in prompts:
        out.append(list(range(at, at + len(batches))))
        at += len(batches)
    return out


def _argmax(scores: list[float | None]) -> int | None:
    known = [(s, i) for i, s in enumerate(scores) if s is not None and not math.isnan(s)]
    return max(known)[1] if known else None


if __name__ == "__main__":
    sys.exit(main())
