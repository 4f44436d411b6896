"""Does the local model repeat itself? The RAG answers of an answer-table run
sent again, in reverse order and with no generation cache, and compared.

    python -m bench.answer_repeat bench/results/answer_full_pubhealth.json --limit 94

The table's JSON holds each question's RAG answer; here the same questions
are retrieved again from the table's index (`chunkrag table` indexed their
pools), the RAG row's prompt rebuilt (`answer_row`) and sent to the
configured model (`CHUNKRAG_CHAT_BASE_URL`) one at a time, last question
first. An answer that differs from the table's is counted, and so is a
grade that flips. Results: ``bench/results/answer_repeat_<set>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import SHARED, write_result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="the JSON an answer-table run wrote beside its markdown (--out)")
    parser.add_argument("--limit", type=int, default=94, help="the first N questions of the table")
    parser.add_argument("--row", default="rag", help="the row whose answers are sent again")
    args = parser.parse_args(argv)

    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.answer_table import MeteredChat, answer_row, prepare
    from chunkrag_eval.datasets import read_items
    from chunkrag_filter.pipeline import FilterOptions
    from local_services.llm_server import DEFAULT_CTX
    from search_extension.retriever import HybridRetriever

    table = json.loads(Path(args.table).read_text(encoding="utf-8"))
    (name, run), *_ = table["sets"].items()
    first = {q["item_id"]: q for q in run["questions"] if q["row"] == args.row}
    settings = Settings.from_env()
    client, embedder, model = make_backend(settings), make_embedder(settings.embedder), make_chat(settings.chat)
    _, items, _ = read_items(SHARED / "eval" / name / "dev.jsonl", "auto", "ambiguous")
    items = [item for item in items if item.item_id in first][: args.limit]
    retriever = HybridRetriever(client, embedder, run["index"], settings.retrieval)
    options = FilterOptions(answer=False)
    chat = MeteredChat(model, None, settings.chat.model)
    differ = []
    for item in reversed(items):
        prepared = prepare(item, name, retriever, model, options, ())
        again = answer_row(
            prepared, args.row, run["kind"], chat, options=options, judge_top=9, context_tokens=DEFAULT_CTX
        )
        before = first[item.item_id]
        if again.text != before["text"] or again.prompt_tokens != before["prompt_tokens"]:
            differ.append(
                {
                    "item_id": item.item_id,
                    "first": before["text"],
                    "again": again.text,
                    "prompt_tokens": [before["prompt_tokens"], again.prompt_tokens],
                    "grade": [before["correct"], again.correct],
                }
            )
        print(
            f"[{item.item_id}] {'same' if not differ or differ[-1]['item_id'] != item.item_id else 'DIFFERS'}",
            file=sys.stderr,
        )
    payload = {
        "table": args.table,
        "set": name,
        "row": args.row,
        "model": settings.chat.model,
        "questions": len(items),
        "order": "reversed, one request at a time, no generation cache",
        "answers_differ": len(differ),
        "grades_differ": sum(d["grade"][0] != d["grade"][1] for d in differ),
        "differences": differ,
    }
    path = write_result(f"answer_repeat_{name}", "bench.answer_repeat", payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "differences"}, indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
