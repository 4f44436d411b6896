"""The frameworks' own chunk filters against the adapters', side by side.

    python -m bench.frameworks_bench --questions 200 --llm-questions 30

Each PopQA dev question's pool is split as a LangChain user splits text
(``RecursiveCharacterTextSplitter``, 500 characters, no overlap), the pieces
stored in LangChain's ``InMemoryVectorStore`` with the project's MiniLM
(``ChunkragEmbeddings``) and all of them retrieved by its retriever, best
first; then every row below filters the same documents. Measured per row:
answers kept (a gold answer in the kept text, PopQA's rule:
``chunkrag_eval.measures.answer_in_context``), characters kept, model calls
and seconds. Each framework row is also paired with the chunk filter given
the same characters per question (its calibrated scores, best first, within
the row's characters: ``measures.kept_within_budget``), and with cosine
given them. Rows marked ``llm`` run on the first ``--llm-questions`` only
(the local 1.5B model answers one call at a time per slot); every row is
also reported on that subset. The rule threshold of the cosine rows is the
shipped cut's rule (``answer_table.choose_cut``): the highest candidate
within one point of all retrieved and not significantly below it (exact
McNemar, p >= 0.05), here on answers kept since no model answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.common import SHARED, machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED / "eval" / "popqa" / "dev.jsonl"))
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--llm-questions", type=int, default=30, help="0: no row that calls the model")
    parser.add_argument("--rows", help="comma-separated row names (default: all)")
    parser.add_argument("--out", default="bench/results/frameworks_popqa.json")
    args = parser.parse_args(argv)
    load_start, started = os.getloadavg(), time.time()

    from chunkrag_adapters.comparison import ROWS, SPLIT_CHARS, chunkrag_scores, make_parts, retrieved, run_row
    from chunkrag_core.config_file import load_settings
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.filter_comparison import RANKING, REFERENCE, choose_threshold, summarise

    settings = load_settings()
    rows = [r for r in ROWS if args.rows is None or r["name"] in args.rows.split(",")]
    if REFERENCE not in [r["name"] for r in rows] or RANKING not in [r["name"] for r in rows]:
        raise SystemExit(f"--rows must include {REFERENCE} and {RANKING}")
    parts = make_parts(rows, settings)
    _, items, _ = read_items(args.data, "popqa", limit=args.questions)
    docs = retrieved(items, parts["embeddings"])
    thresholds = {
        kind: choose_threshold(items, docs, kind) for kind in ("embeddings_filter", "similarity_postprocessor")
    }
    ranking = parts[f"chunkrag:{RANKING}"]
    scores = [chunkrag_scores(ranking, item.question, [x for x, _ in d]) for item, d in zip(items, docs)]
    outcomes: dict[str, list] = {}
    for row in rows:
        limit = args.llm_questions if row.get("llm") else len(items)
        t = thresholds.get(row["kind"], {}).get("threshold")
        outcomes[row["name"]] = []
        for n, (item, d) in enumerate(zip(items[:limit], docs[:limit])):
            outcomes[row["name"]].append(run_row(row, item.question, d, parts, t))
            if row.get("llm"):
                print(f"{row['name']} {n + 1}/{limit}", file=sys.stderr)
    full = {name: per for name, per in outcomes.items() if len(per) == len(items)}
    payload = {
        "command": " ".join(["python", "-m", "bench.frameworks_bench", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "what": __doc__.split("\n\n", 2)[1].strip(),
        "data": args.data,
        "documents_per_question": round(sum(len(d) for d in docs) / len(docs), 2),
        "split_chars": SPLIT_CHARS,
        "model": settings.chat.model,
        "rule_thresholds": thresholds,
        "rows_declared": list(rows),
        "all_questions": summarise(items, full, docs, scores),
        # No subset with --llm-questions 0: the model rows did not run.
        "llm_subset": summarise(items[: args.llm_questions], outcomes, docs, scores) if args.llm_questions else None,
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")
    print(json.dumps({k: payload[k] for k in ("all_questions", "llm_subset")}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
