r"""Ingest SciFact end to end and compare with the embedder's raw limit.

    python -m bench.ingest_bench [--runs 3] [--limit N]
    CHUNKRAG_CHUNK_HEADERS=title python -m bench.ingest_bench --no-raw \
        --name ingest_headers_title --index bench-scifact-title

The chunking settings come from the environment (as for `chunkrag ingest`)
and are written into the result, so a variant (headers, percentile
breakpoints, ensembling scales) is one more run with its own --name.

`pipeline` runs the real ingest (read, split, embed, chunk, write to
Elasticsearch) into a fresh index; `raw` embeds the same sentences with the
same model and nothing else, in the best batch size found for it: the
physical limit the pipeline is measured against. Each run is its own process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from bench.common import SHARED, median, peak_rss_mb, run_child, write_result

CORPUS = SHARED / "eval" / "scifact" / "beir_derived" / "corpus.jsonl"
INDEX = "bench-scifact"
# Batch sizes tried for the raw limit on a sample before the full timed run.
RAW_BATCH_SIZES = (1, 4, 8, 16, 32)
RAW_SAMPLE_SENTENCES = 2000


def scifact_documents(limit: int | None):
    from ingest_pipeline.sources import parse_jsonl

    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    if limit:
        lines = lines[:limit]
    records = (json.loads(line) for line in lines)
    text = "\n".join(json.dumps({"id": r["_id"], "title": r["title"], "text": r["text"]}) for r in records)
    return list(parse_jsonl(text, str(CORPUS)))


def ensure_scifact_index(settings, index: str, documents: int) -> int:
    """The first ``documents`` SciFact abstracts ingested into ``index`` with
    ``settings`` unless it exists already; its chunk count."""
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from ingest_pipeline.pipeline import ingest_documents

    client = make_backend(settings)
    if not client.index_exists(index):
        print(f"ingesting the first {documents} SciFact abstracts into {index}…", file=sys.stderr)
        ingest_documents(
            scifact_documents(documents),
            client=client,
            embedder=make_embedder(settings.embedder),
            settings=settings,
            index=index,
            progress=False,
        )
        client.refresh(index)
    return client.count(index)


def one_pipeline_run(limit: int | None, index: str) -> dict:
    """One ingest into a fresh ``index``, timed from the first document (the
    model's and NLTK's loading included: what one `chunkrag ingest` pays)."""
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from ingest_pipeline.pipeline import ingest_documents

    settings = Settings.from_env()
    client = make_backend(settings)
    client.delete_index(index)
    documents = scifact_documents(limit)
    embedder = make_embedder(settings.embedder)
    began = time.perf_counter()
    report = ingest_documents(
        documents, client=client, embedder=embedder, settings=settings, index=index, progress=False
    )
    wall = time.perf_counter() - began
    assert report.ok, report.errors[:5]
    return {
        "docs": report.documents,
        "sentences": report.sentences,
        "chunks": report.chunks,
        "scaled_chunks": report.scaled_chunks,
        "wall_s": round(wall, 2),
        "pipeline_sentences_per_s": round(report.sentences / wall, 1),
        "peak_rss_mb": peak_rss_mb(),
        "chunk_lengths": {k: getattr(report.chunk_lengths, k) for k in report.chunk_lengths.__slots__},
    }


def one_raw_run(limit: int | None) -> dict:
    from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder
    from chunkrag_core.settings import ChunkingSettings
    from ingest_pipeline.sentences import bounded_sentence_spans

    chunking = ChunkingSettings()
    sentences = [
        d.text[s:e]
        for d in scifact_documents(limit)
        for section in d.sections
        for s, e in bounded_sentence_spans(d.text, section.start, section.end, chunking.max_chars)
    ]
    sample = sentences[:RAW_SAMPLE_SENTENCES]
    rates = {}
    for batch_size in RAW_BATCH_SIZES:
        embedder = LocalMiniLMEmbedder(batch_size=batch_size)
        embedder.embed(sample[:64])  # load and warm up
        began = time.perf_counter()
        embedder.embed(sample)
        rates[batch_size] = len(sample) / (time.perf_counter() - began)
    best = max(rates, key=rates.get)
    embedder = LocalMiniLMEmbedder(batch_size=best)
    embedder.embed(sample[:64])
    began = time.perf_counter()
    embedder.embed(sentences)
    wall = time.perf_counter() - began
    return {
        "sentences": len(sentences),
        "batch_size": best,
        "sample_rates": {str(k): round(v, 1) for k, v in rates.items()},
        "wall_s": round(wall, 2),
        "raw_embed_sentences_per_s": round(len(sentences) / wall, 1),
    }


def main(argv=None) -> int:
    from chunkrag_core.settings import Settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="first N documents only (for a quick look)")
    parser.add_argument("--one-run", choices=["pipeline", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--index", default=INDEX)
    parser.add_argument("--name", default=None, help="results file name (default ingest; ingest_first_N with --limit)")
    parser.add_argument("--no-raw", action="store_true", help="no raw-embedder runs (a variant beside ingest.json's)")
    args = parser.parse_args(argv)
    limit = ["--limit", str(args.limit)] if args.limit else []

    if args.one_run == "pipeline":
        print(json.dumps(one_pipeline_run(args.limit, args.index)))
        return 0
    if args.one_run == "raw":
        print(json.dumps(one_raw_run(args.limit)))
        return 0

    pipeline_runs, raw_runs = [], []
    # Alternate the two so a slow spell of the machine hits both alike; raw
    # first, so it never shares the CPU with merges left by a pipeline run.
    for run in range(args.runs):
        if not args.no_raw:
            raw_runs.append(run_child("bench.ingest_bench", ["--one-run", "raw", *limit]))
            print(f"raw run {run + 1}: {raw_runs[-1]['raw_embed_sentences_per_s']} sentences/s", file=sys.stderr)
        pipeline_runs.append(run_child("bench.ingest_bench", ["--one-run", "pipeline", "--index", args.index, *limit]))
        print(f"pipeline run {run + 1}: {pipeline_runs[-1]['pipeline_sentences_per_s']} sentences/s", file=sys.stderr)
    last = pipeline_runs[-1]
    pipeline_rate = median([r["pipeline_sentences_per_s"] for r in pipeline_runs])
    raw_rate = median([r["raw_embed_sentences_per_s"] for r in raw_runs]) if raw_runs else None
    result = {
        "corpus": str(CORPUS.relative_to(SHARED)) + (f" (first {args.limit})" if args.limit else ""),
        "runs": args.runs,
        "docs": last["docs"],
        "sentences": last["sentences"],
        "chunks": last["chunks"],
        "scaled_chunks": last["scaled_chunks"],
        "wall_s": median([r["wall_s"] for r in pipeline_runs]),
        "pipeline_sentences_per_s": pipeline_rate,
        "peak_rss_mb": median([r["peak_rss_mb"] for r in pipeline_runs]),
        "raw_embed_sentences_per_s": raw_rate,
        "pipeline_over_raw": round(pipeline_rate / raw_rate, 3) if raw_rate else None,
        "raw_batch_size": raw_runs[-1]["batch_size"] if raw_runs else None,
        "index": args.index,
        "chunking": dataclasses.asdict(Settings.from_env().chunking),  # from the environment, as the runs read it
        "chunk_lengths": last["chunk_lengths"],
        "per_run": {"pipeline": pipeline_runs, "raw": raw_runs},
    }
    name = args.name or ("ingest" if not args.limit else f"ingest_first_{args.limit}")
    print(write_result(name, "bench.ingest_bench", result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
