"""What the chat-model document context costs per document, with the real model.

    python -m bench.context_bench [--articles 3] [--untitled]

The first ``--articles`` SQuAD 2.0 dev articles (paragraphs joined, no
headings: the documents semantic sectioning is for) go through the
document-context stage with the configured chat model (the local one by
default): a summary and semantic sections, and a written title with
``--untitled`` (the articles' own titles dropped). No cache, so every answer
is a real call. Per document: calls, seconds, fallbacks, the sections found
against the article's paragraph count (its own structure, which the model
does not see as headings), and what the model wrote.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from bench.common import median, write_result
from bench.segments_bench import load_articles


def main(argv=None) -> int:
    from chunkrag_core.providers import make_chat
    from chunkrag_core.settings import Settings
    from ingest_pipeline.document_context import ContextFailure, add_context
    from ingest_pipeline.sources import plain_document

    parser = argparse.ArgumentParser()
    parser.add_argument("--articles", type=int, default=3)
    parser.add_argument("--untitled", action="store_true", help="drop the articles' titles, so a title is written too")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    chunking = dataclasses.replace(settings.chunking, summaries=True, sectioning="llm", llm_titles=args.untitled)
    articles, _ = load_articles(articles=args.articles)
    documents = [
        plain_document(doc_id, text, "squad", title="" if args.untitled else title) for doc_id, title, text in articles
    ]
    outcomes = add_context(
        documents, chunking, model=make_chat(settings.chat), model_name=settings.chat.model, cache=None
    )

    rows = []
    for (doc_id, _, text), outcome in zip(articles, outcomes):
        if isinstance(outcome, ContextFailure):
            rows.append({"doc_id": doc_id, "failed": outcome.reason})
            continue
        document = outcome.document
        rows.append(
            {
                "doc_id": doc_id,
                "chars": len(text),
                "paragraphs": text.count("\n\n") + 1,
                "calls": outcome.calls,
                "seconds": round(outcome.seconds, 1),
                "fallbacks": list(outcome.fallbacks),
                "sections": len(document.sections),
                "section_titles": [" / ".join(s.path) for s in document.sections][:12],
                "title": document.title,
                "summary": document.summary,
            }
        )
        print(
            f"{doc_id}: {outcome.calls} calls, {outcome.seconds:.0f} s, {len(document.sections)} sections, fallbacks "
            f"{list(outcome.fallbacks)}",
            file=sys.stderr,
        )
    done = [r for r in rows if "failed" not in r]
    print(
        write_result(
            "document_context",
            "bench.context_bench",
            {
                "dataset": (
                    "SQuAD 2.0 dev (cs224n split), first articles as whole documents, paragraphs joined by blank lines"
                ),
                "model": settings.chat.model,
                "base_url": settings.chat.base_url,
                "asked": {"summaries": True, "sectioning": "llm", "llm_titles": args.untitled},
                "documents": len(rows),
                "failed": len(rows) - len(done),
                "median_calls_per_document": median([r["calls"] for r in done]) if done else None,
                "median_seconds_per_document": median([r["seconds"] for r in done]) if done else None,
                "median_seconds_per_1000_chars": median([r["seconds"] * 1000 / r["chars"] for r in done])
                if done
                else None,
                "documents_with_a_fallback": sum(1 for r in done if r["fallbacks"]),
                "per_document": rows,
            },
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
