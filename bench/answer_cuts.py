"""The shipped cut chosen by answer accuracy, by a rule fixed before the run.

    python -m bench.answer_cuts --popqa 200 --pubhealth 150

The rule (written down before any answer was generated):

- Candidate cuts of the default filter's calibrated ``retrieval`` model:
  0.005, 0.01, 0.02, 0.03, 0.05, 0.09; the reference is "all retrieved"
  (every retrieved chunk of the question's pool, in retrieval order: the
  RAG row of the answer table).
- Dev sets with gradable answers: PopQA dev (answer string match) and
  PubHealth dev (verdict accuracy), the first ``n`` usable records of each
  (``shared/eval``); NQ and SQuAD subsamples only if the time allows.
- For each set and cut the local model answers from the kept chunks, with
  the prompt and the token cap of ``chunkrag eval --generate``
  (``search_extension.ask.answer_for``: ``answer_from_chunks``, 48 tokens;
  ``chunkrag_filter.processors.answer.verdict_from_chunks``), and from all
  retrieved.
- A cut holds on a set when its accuracy is within one point of all
  retrieved and not significantly below it (exact McNemar, p >= 0.05).
  The chosen cut is the highest (the fewest prompt tokens) that holds on
  every set. If none holds, the most permissive candidate (0.005) is
  shipped as "drop only what is clearly irrelevant", and said so.
- Leave one dataset out: the cut is chosen on the other set(s) and
  reported on the held-out one; the shipped cut is chosen on all sets.

Generations are cached (``.cache/generations.sqlite``, shared with
``chunkrag table``), so the cut rows and the table's RAG and filter rows
generate each distinct context once. Results: ``bench/results/answer_cuts.json``
(per-question outcomes for every row, the rule's verdict, tokens per answer).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench.common import SHARED, write_result

INDEX_PREFIX = "chunkrag-table"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--popqa", type=int, default=200, help="first N PopQA dev questions")
    parser.add_argument("--pubhealth", type=int, default=150, help="first N PubHealth dev claims")
    parser.add_argument("--cache", default=".cache/generations.sqlite")
    args = parser.parse_args(argv)

    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.answer_table import (
        CANDIDATE_CUTS,
        REFERENCE,
        GenerationCache,
        choose_cut,
        cut_row,
        leave_one_out,
        run_table,
    )
    from chunkrag_eval.datasets import read_items
    from local_services.llm_server import DEFAULT_CTX

    settings = Settings.from_env()
    client, embedder, model = make_backend(settings), make_embedder(settings.embedder), make_chat(settings.chat)
    cache = GenerationCache(args.cache)
    rows = (REFERENCE, *(cut_row(c) for c in sorted(CANDIDATE_CUTS, reverse=True)))

    def run(name: str, limit: int):
        fmt, items, _ = read_items(SHARED / "eval" / name / "dev.jsonl", "auto", "ambiguous", limit)
        started = time.perf_counter()
        out = run_table(
            items,
            fmt,
            fmt,
            client=client,
            embedder=embedder,
            settings=settings,
            model=model,
            model_name=settings.chat.model,
            cache=cache,
            index=f"{INDEX_PREFIX}-{fmt}",
            rows=rows,
            cuts=CANDIDATE_CUTS,
            context_tokens=DEFAULT_CTX,
            parallel=1,
            on_outcome=lambda o: print(f"{name} [{o.item_id}] {o.row}: {o.correct} {o.prompt_tokens}", file=sys.stderr),
        )
        print(f"{name}: {len(items)} questions, {time.perf_counter() - started:.0f} s", file=sys.stderr)
        return name, out

    # The sets side by side, one answer in flight each: the server's two slots.
    wanted = [(name, n) for name, n in (("popqa", args.popqa), ("pubhealth", args.pubhealth)) if n]
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        runs = dict(pool.map(lambda job: run(*job), wanted))

    sets = {
        name: {row: [bool(o.correct) for o in run.outcomes if o.row == row] for row in rows}
        for name, run in runs.items()
    }
    choice = choose_cut(sets)
    summaries = {name: run.summary() for name, run in runs.items()}
    tokens = {
        name: {
            row: {
                "accuracy": s["accuracy"],
                "prompt_tokens_per_answer": s["prompt_tokens_per_answer"],
                "context_chars_per_question": s["context_chars_per_question"],
                "p_vs_rag": s.get("p_vs_rag"),
                "right_only_here": s.get("right_only_here"),
                "right_only_rag": s.get("right_only_rag"),
            }
            for row, s in summary.items()
        }
        for name, summary in summaries.items()
    }
    payload = {
        "rule": __doc__.split("The rule", 1)[1].split("Generations are cached", 1)[0].strip(),
        "model": settings.chat.model,
        "chosen": {"cut": choice.cut, "held_on_every_set": choice.held, "holding": list(choice.holding)},
        "leave_one_dataset_out": leave_one_out(sets),
        "rows": tokens,
        "sets": {name: run.to_json() for name, run in runs.items()},
    }
    path = write_result("answer_cuts", "bench.answer_cuts", payload)
    print(json.dumps({k: payload[k] for k in ("chosen", "leave_one_dataset_out", "rows")}, indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
