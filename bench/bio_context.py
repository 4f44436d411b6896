"""Biography without a grader: does the default filter keep the person's own
passages that "all retrieved" (RAG) puts in the prompt?

    python -m bench.bio_context [--limit 50]

The answer table's Biography column needs a model that judges atomic facts,
and the local 1.5B model accepted invented ones (bench/REPORT.md), so it
does not say whether the filter costs a biography anything. This measure
needs no model. Each FActScore dev record's pool holds ten retrieved
passages, each with the title of the Wikipedia page it came from; passages
titled with the record's own topic are the person's own, the others are
about someone or something else (name-alikes, places). Every record is
indexed and retrieved as `chunkrag table` does (its pool as one document,
the same candidates), then two prompts' contexts are built as its rows
build them, cut to the same character budget (the local model's context,
a biography's answer room):

- `rag`: every retrieved chunk in retrieval order;
- `filter`: the shipped default filter's kept chunks (no model call).

Per record: the characters of the person's own passages in each context,
and of the other passages. Summary: records where the filter's context
holds less of the person's own text than RAG's, more, or the same; the
totals; an exact sign test. Only records with at least one own passage
count for the own-text comparison. Results: `bench/results/bio_context.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from bench.common import SHARED, write_result

INDEX = "bench-bio-context"
BIO = SHARED / "eval" / "bio" / "dev.jsonl"


def own_spans(record: dict) -> list[tuple[int, int]]:
    """Character spans, in the pool text as `datasets.item_from_record` joins
    it, of the passages titled with the record's topic."""
    spans, at = [], 0
    topic = record["topic"].strip().lower()
    for i, passage in enumerate(record["passages"]):
        block = f"{passage['title']}: {passage['text']}".strip()
        if i:
            at += 2  # the blank line between passages
        if passage["title"].strip().lower() == topic:
            spans.append((at, at + len(block)))
        at += len(block)
    return spans


def overlap(start: int, end: int, spans: list[tuple[int, int]]) -> int:
    return sum(max(0, min(end, b) - max(start, a)) for a, b in spans)


def split_chars(chunks, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """(own, other) characters of the chunks' source spans."""
    own = sum(overlap(c.start, c.end, spans) for c in chunks)
    return own, sum(c.end - c.start for c in chunks) - own


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=50, help="first N biography records")
    args = parser.parse_args(argv)

    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.answer_table import (
        BIO_MAX_TOKENS,
        DEFAULT_CONTEXT_TOKENS,
        fit_context,
        mcnemar_exact,
        prepare,
    )
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.runner import index_pools
    from chunkrag_filter.pipeline import FilterOptions
    from chunkrag_filter.processors.answer import context_chars
    from search_extension.retriever import HybridRetriever

    records = [json.loads(line) for line in BIO.read_text().splitlines() if line.strip()][: args.limit]
    _fmt, items, bad = read_items(BIO, "bio", "ambiguous", limit=args.limit)
    if bad or len(items) != len(records):
        raise SystemExit(f"unexpected records in {BIO}: {bad[:3]}")
    settings = Settings.from_env()
    backend, embedder = make_backend(settings), make_embedder(settings.embedder)
    client = backend.client
    client.indices.delete(index=INDEX, ignore_unavailable=True)
    index_pools(items, "bio", client=backend, embedder=embedder, settings=settings, index=INDEX)
    retriever = HybridRetriever(backend, embedder, INDEX, settings.retrieval)
    # The default filter calls no model; the chat model is made lazily and never asked.
    model = make_chat(settings.chat)
    budget = context_chars(DEFAULT_CONTEXT_TOKENS, BIO_MAX_TOKENS)
    options = FilterOptions(answer=False)
    per_record = []
    offsets_checked = offsets_wrong = 0
    for record, item in zip(records, items):
        prepared = prepare(item, "bio", retriever, model, options, cuts=())
        spans = own_spans(record)
        # The spans are read off the chunks' source offsets: each chunk's text
        # must hold its span of the pool (after any contextual header).
        offsets_checked += len(prepared.candidates)
        offsets_wrong += sum(item.pool[c.start : c.end].strip() not in c.text for c in prepared.candidates)
        rag, rag_cut = fit_context(list(prepared.candidates), budget)
        kept, filter_cut = fit_context(list(prepared.filtered["filter"].kept), budget)
        pool_own, pool_other = split_chars(prepared.candidates, spans)
        rag_own, rag_other = split_chars(rag, spans)
        filter_own, filter_other = split_chars(kept, spans)
        per_record.append(
            {
                "id": item.item_id,
                "topic": record["topic"],
                "own_passages": len(spans),
                "candidates": len(prepared.candidates),
                "pool_own_chars": pool_own,
                "pool_other_chars": pool_other,
                "rag_chunks": len(rag),
                "rag_cut": rag_cut,
                "rag_own_chars": rag_own,
                "rag_other_chars": rag_other,
                "filter_chunks": len(kept),
                "filter_cut": filter_cut,
                "filter_own_chars": filter_own,
                "filter_other_chars": filter_other,
            }
        )
    with_own = [r for r in per_record if r["own_passages"]]
    less = sum(r["filter_own_chars"] < r["rag_own_chars"] for r in with_own)
    more = sum(r["filter_own_chars"] > r["rag_own_chars"] for r in with_own)

    def total(key: str, rows=per_record) -> int:
        return sum(r[key] for r in rows)

    summary = {
        "records": len(per_record),
        "records_with_own_passages": len(with_own),
        "own_text_filter_less_than_rag": less,
        "own_text_filter_more_than_rag": more,
        "own_text_same": len(with_own) - less - more,
        "sign_test_p": float(f"{mcnemar_exact(less, more):.3g}"),
        "own_chars": {
            "pool": total("pool_own_chars"),
            "rag": total("rag_own_chars"),
            "filter": total("filter_own_chars"),
        },
        "other_chars": {
            "pool": total("pool_other_chars"),
            "rag": total("rag_other_chars"),
            "filter": total("filter_other_chars"),
        },
        "records_with_no_own_text_in_filter_but_some_in_rag": sum(
            r["filter_own_chars"] == 0 < r["rag_own_chars"] for r in with_own
        ),
        "chunks_whose_offsets_do_not_match_their_text": f"{offsets_wrong} of {offsets_checked}",
        "context_budget_chars": budget,
        "contexts_cut_to_budget": {
            "rag": sum(r["rag_cut"] for r in per_record),
            "filter": sum(r["filter_cut"] for r in per_record),
        },
    }
    payload = {
        "dataset": "shared/eval/bio/dev.jsonl",
        "filter": "the shipped default (FilterOptions(answer=False): no model call)",
        "load_average_end": round(os.getloadavg()[0], 2),
        "summary": summary,
        "per_record": per_record,
    }
    print(json.dumps(summary, indent=2))
    print(write_result("bio_context", "bench.bio_context", payload))
    client.indices.delete(index=INDEX, ignore_unavailable=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
