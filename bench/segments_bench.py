"""Relevant segment extraction and contextual headers on long documents.

    python -m bench.segments_bench [--candidates 50] [--limit N] [--keep]
    python -m bench.segments_bench --ensemble [--scales 128,512,2000]   # ensembling rows only

Each SQuAD 2 dev article becomes one document (its paragraphs joined by
blank lines) and is ingested twice: without headers, and with the default
title header. For every answerable question the hybrid search (minmax)
returns the top candidates of the whole corpus; then, at character budgets
of 500, 1,000, 2,000 and 4,000, the context is

- top-k chunks: chunks in rank order while they fit (a chunk that would
  overflow is skipped and smaller ones after it may still fit);
- RSE segments: dsRAG's "balanced" segment extraction with relevance the
  min-max normalised retrieval score (no model call) and the budget as its
  character limit; neighbours fetched from Elasticsearch in one request;
- with ``--ensemble`` (a separate run whose rows are added to the file):
  ensembling (the articles also indexed at ~128, ~512 and ~2,000-token
  chunks, every scale retrieved in one _msearch, de-duplicated by span,
  then top-k within the budget) and ensembling + RSE.

Answer-in-context: any gold answer as a case-insensitive substring of the
context (the chunk or segment texts, headers not included). Retrieval,
neighbour fetches and ingest are real calls to the local Elasticsearch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Sequence

from bench.common import SHARED, median, merge_result, parse_scale_weights, weights_suffix, write_result
from chunkrag_core.settings import CHARS_PER_TOKEN

SQUAD = SHARED / "eval" / "squad" / "squad2_cs224n_dev-v2.0.json"
BUDGETS = (500, 1000, 2000, 4000)
VARIANTS = {"plain": "none", "headers": "title"}
INDEX_PREFIX = "bench-squad-articles"


def load_articles(path=SQUAD, articles: int | None = None):
    """(documents as (doc_id, title, text)), questions as (question, answers);
    with ``articles``, the first that many articles and their questions."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"][:articles]
    documents, questions = [], []
    for article in data:
        text = "\n\n".join(paragraph["context"] for paragraph in article["paragraphs"])
        documents.append((article["title"], article["title"].replace("_", " "), text))
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = sorted({a["text"] for a in qa["answers"]})
                if not qa.get("is_impossible") and answers:
                    questions.append((qa["question"], answers))
    return documents, questions


def top_k_within(chunks: Sequence, budget: int) -> list:
    """Chunks in rank order while they fit the character budget."""
    taken, used = [], 0
    for chunk in chunks:
        size = len(chunk.text)
        if used + size <= budget:
            taken.append(chunk)
            used += size
    return taken


def ingest_variant(client, embedder, settings, index: str, headers: str, documents, keep: bool) -> dict:
    from ingest_pipeline.pipeline import ingest_documents
    from ingest_pipeline.sources import plain_document

    if not keep:
        client.delete_index(index)
    variant = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, headers=headers))
    docs = [plain_document(doc_id, text, "squad", title=title) for doc_id, title, text in documents]
    report = ingest_documents(docs, client=client, embedder=embedder, settings=variant, index=index, progress=False)
    if not report.ok:
        raise RuntimeError(report.errors[:3])
    return {
        "headers": headers,
        "documents": report.documents,
        "unchanged": report.unchanged,
        "sentences": report.sentences,
        "chunks": report.chunks,
        "scaled_chunks": report.scaled_chunks,
        "seconds": report.seconds,
        "sentences_per_s": round(report.sentences / report.seconds, 1) if report.seconds and report.sentences else None,
        "chunk_chars_p50": report.chunk_lengths.p50,
        "single_sentence_share": report.chunk_lengths.single_sentence_share,
    }


def score_questions(
    questions, retrieve, fetch, presets, top_name: str, rse_prefix: str, candidates: int, at_budget=None
):
    """Answer-in-context at every budget for top-k and each RSE preset over
    the candidates ``retrieve(question, size)`` returns (made ready for each
    budget by ``at_budget(found, budget)`` when given); rows and timings."""
    from chunkrag_eval.measures import answer_in_context
    from search_extension.segments import SegmentSettings, extract_segments

    methods = {top_name: [0] * len(BUDGETS)}
    for penalty, minimum in presets:
        methods[f"{rse_prefix}_p{penalty:g}_min{minimum:g}"] = [0] * len(BUDGETS)
    used = {name: [[] for _ in BUDGETS] for name in methods}
    search_ms, rse_ms = [], []
    for question, answers in questions:
        started = time.perf_counter()
        found = retrieve(question, candidates)
        search_ms.append((time.perf_counter() - started) * 1000)
        for b, budget in enumerate(BUDGETS):
            ready = at_budget(found, budget) if at_budget is not None else found
            chosen = top_k_within(ready, budget)
            methods[top_name][b] += answer_in_context(" ".join(c.text for c in chosen), answers)
            used[top_name][b].append(sum(len(c.text) for c in chosen))
            for penalty, minimum in presets:
                rse = SegmentSettings(
                    max_total_chars=budget, irrelevant_chunk_penalty=penalty, min_segment_value=minimum
                )
                started = time.perf_counter()
                segments = extract_segments(ready, fetch, rse)
                rse_ms.append((time.perf_counter() - started) * 1000)
                name = f"{rse_prefix}_p{penalty:g}_min{minimum:g}"
                methods[name][b] += answer_in_context(" ".join(s.text for s in segments), answers)
                used[name][b].append(sum(s.end - s.start for s in segments))
    n = len(questions)
    rows = {
        name: {
            str(budget): {
                "answer_in_context": round(hits[b] / n, 4),
                "mean_context_chars": round(sum(used[name][b]) / n, 1),
            }
            for b, budget in enumerate(BUDGETS)
        }
        for name, hits in methods.items()
    }
    return rows, {"search_ms_median": median(search_ms), "rse_ms_median": median(rse_ms), "rse_calls": len(rse_ms)}


def main(argv=None) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings, parse_scales
    from search_extension.neighbours import position_fetcher
    from search_extension.retriever import HybridRetriever
    from search_extension.segments import SegmentSettings

    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=50, help="chunks retrieved per question")
    parser.add_argument("--limit", type=int, help="first N answerable questions only (a quick check)")
    parser.add_argument(
        "--articles",
        type=int,
        help=(
            "first N articles only, and their questions (a quick check; with --name, so the results file is not "
            "overwritten)"
        ),
    )
    parser.add_argument(
        "--keep", action="store_true", help="reuse the indices if present (ingest timing then means nothing)"
    )
    parser.add_argument(
        "--rse",
        default="0.18:0.5",
        help=(
            "RSE settings to report as penalty:minimum_value pairs, comma-separated (0.18:0.5 is dsRAG's balanced "
            "preset)"
        ),
    )
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help=(
            "only the multi-scale ensembling rows (ensembling, ensembling + RSE), added to the results file beside "
            "the rows already there"
        ),
    )
    parser.add_argument(
        "--scales", default="128,512,2000", help="with --ensemble: the scales indexed and ensembled, in tokens"
    )
    parser.add_argument(
        "--scale-weights",
        help=(
            "with --ensemble: per-scale weights after normalisation, e.g. 128:0.5,512:0.25,2000:0.25 (default 1 each; "
            "the rows' names then say them)"
        ),
    )
    parser.add_argument("--name", default="segments")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    client = make_backend(settings)
    embedder = make_embedder(settings.embedder)
    documents, questions = load_articles(articles=args.articles)
    if args.limit:
        questions = questions[: args.limit]
    presets = [tuple(float(v) for v in spec.split(":")) for spec in args.rse.split(",")]
    if args.ensemble:
        return ensemble_main(args, client, embedder, settings, documents, questions, presets, parse_scales(args.scales))

    ingest, rows, timings = {}, {}, {}
    for variant, headers in VARIANTS.items():
        index = f"{INDEX_PREFIX}-{variant}"
        ingest[variant] = ingest_variant(client, embedder, settings, index, headers, documents, args.keep)
        retriever = HybridRetriever(client, embedder, index, settings.retrieval)
        fetch = position_fetcher(client, index)

        def retrieve(question, size):
            return retriever.search(question, size=size).chunks

        found, timings[variant] = score_questions(
            questions, retrieve, fetch, presets, f"top_k_{variant}", f"rse_{variant}", args.candidates
        )
        rows.update(found)
        print(json.dumps({variant: found}, indent=1), flush=True)

    path = write_result(
        args.name,
        "bench.segments_bench",
        {
            "dataset": (
                f"SQuAD 2.0 dev (cs224n split): {len(documents)} articles as whole documents, paragraphs joined by "
                "blank lines"
            ),
            "questions": len(questions),
            "candidates": args.candidates,
            "retrieval_mode": settings.retrieval.mode,
            "budgets_chars": list(BUDGETS),
            "rse_settings": {
                **dataclasses.asdict(SegmentSettings()),
                "max_total_chars": "the budget",
                "irrelevant_chunk_penalty:min_segment_value": [f"{p:g}:{m:g}" for p, m in presets],
                "relevance": "min-max normalised retrieval score",
            },
            "ingest": ingest,
            "timings": timings,
            "results": rows,
        },
    )
    print(f"wrote {path}")
    return 0


def ensemble_main(args, client, embedder, settings, documents, questions, presets, scales) -> int:
    """The ensembling rows: the articles indexed (without headers, like
    `plain`) at the base scale and at ``scales`` in one index; candidates
    from one ensemble search (every scale in one _msearch, de-duplicated by
    span); then top-k spans within the budget, and RSE over them."""
    from search_extension.ensemble import merge_spans
    from search_extension.neighbours import position_fetcher
    from search_extension.retriever import HybridRetriever

    index = f"{INDEX_PREFIX}-ensemble"
    scaled = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=scales))
    ingest = ingest_variant(client, embedder, scaled, index, "none", documents, args.keep)
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    # One search per question; the spans are de-duplicated under each budget
    # (a chunk longer than the budget could never be used, so it must not
    # hide the smaller chunks inside it).
    weights = parse_scale_weights(args.scale_weights)

    def retrieve(question, size):
        return retriever.ensemble_candidates(question, scales=scales, size=size, weights=weights).chunks

    def at_budget(ranked, budget):
        return merge_spans(ranked, args.candidates, budget)

    suffix = weights_suffix(weights)
    rows, timings = score_questions(
        questions,
        retrieve,
        position_fetcher(client, index),
        presets,
        f"ensemble{suffix}_plain",
        f"ensemble{suffix}_rse_plain",
        args.candidates,
        at_budget,
    )
    print(json.dumps(rows, indent=1), flush=True)
    path = merge_result(
        args.name,
        "bench.segments_bench",
        f"ensembling{suffix}",
        {
            "articles": len(documents),
            "questions": len(questions),
            "candidates": args.candidates,
            "scales_tokens": list(scales),
            "scale_weights": weights or "1 each",
            "chars_per_token": CHARS_PER_TOKEN,
            "rows": {
                "ensemble_plain": (
                    "top-k over the ensemble's spans (every scale, one _msearch, min-max per scale, de-duplicated by "
                    "span with the budget as the span cap), in rank order while they fit"
                ),
                "ensemble_rse_plain_*": (
                    "RSE (same presets, budget as max_total_chars) over the ensemble's spans; segments stay within "
                    "one scale"
                ),
            },
            "ingest": ingest,
            "timings": timings,
        },
        "results",
        rows,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
