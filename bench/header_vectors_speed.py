r"""Ingest speed of each way of making chunk vectors, against the raw embedder.

    python -m bench.header_vectors_speed [--limit 500] [--rounds 2]

Each round runs, each in a fresh process and one after the other: the raw
embedder (the same sentences, the settings' model and batch size, nothing
else), then ingest (read, split, embed, chunk, write to Elasticsearch, as
``bench.ingest_bench`` runs it) with default headers and
``CHUNKRAG_CHUNK_VECTORS=mix`` as it ships since 2026-11-25 (length pooling,
header weight 0.25), as first measured (mean pooling, weight 0.5: any weight
above 0 embeds the same texts), ``mix`` at weight 0 (no header embedded) and
``reembed``. On a
shared machine whose load drifts over minutes, alternating in rounds lets
a slow spell hit every variant alike; each variant's ratio to raw is taken
within its round, and the medians over rounds are reported with the load
average seen before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from bench.common import median, write_result

VARIANTS = {
    # the default since 2026-11-25 (results/header_vectors_heldout.json)
    "mix_len_w0.25": {
        "CHUNKRAG_CHUNK_VECTORS": "mix",
        "CHUNKRAG_CHUNK_HEADER_WEIGHT": "0.25",
        "CHUNKRAG_CHUNK_MIX_POOLING": "length",
    },
    "mix_w0.5": {
        "CHUNKRAG_CHUNK_VECTORS": "mix",
        "CHUNKRAG_CHUNK_HEADER_WEIGHT": "0.5",
        "CHUNKRAG_CHUNK_MIX_POOLING": "mean",
    },
    "mix_w0": {"CHUNKRAG_CHUNK_VECTORS": "mix", "CHUNKRAG_CHUNK_HEADER_WEIGHT": "0"},
    "reembed": {"CHUNKRAG_CHUNK_VECTORS": "reembed"},
}
INDEX = "bench-scifact-vectors-speed"


def one_raw_run(limit: int) -> dict:
    from bench.ingest_bench import scifact_documents
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from ingest_pipeline.sentences import bounded_sentence_spans

    settings = Settings.from_env()
    chunking = settings.chunking
    sentences = [
        d.text[s:e]
        for d in scifact_documents(limit)
        for section in d.sections
        for s, e in bounded_sentence_spans(d.text, section.start, section.end, chunking.max_chars, chunking.language)
    ]
    embedder = make_embedder(settings.embedder)
    embedder.embed(sentences[:64])  # load and warm up, as the pipeline's first batch does not get
    began = time.perf_counter()
    embedder.embed(sentences)
    wall = time.perf_counter() - began
    return {
        "sentences": len(sentences),
        "batch_size": settings.embedder.batch_size,
        "wall_s": round(wall, 2),
        "sentences_per_s": round(len(sentences) / wall, 1),
    }


def child(kind: str, limit: int, env: dict[str, str], extra: tuple[str, ...] = ()) -> dict:
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-m", "bench.header_vectors_speed", "--one", kind, "--limit", str(limit), *extra],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # The process's own CPU seconds (the cluster's indexing is not in them):
    # steadier than the wall clock when other jobs share the cores.
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**result, "cpu_s": round(cpu_s, 2), "load_1m_before": round(load, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=500, help="first N SciFact documents")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--name", default="header_vectors_speed")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="load NLTK, Punkt and the model before the pipeline's clock starts, as the raw run does for the model",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"which to time beside raw (default: all of {', '.join(VARIANTS)})",
    )
    parser.add_argument("--one", choices=["raw", "pipeline"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    chosen = {name: VARIANTS[name] for name in args.variants.split(",")}

    if args.one == "raw":
        print(json.dumps(one_raw_run(args.limit)))
        return 0
    if args.one == "pipeline":
        from bench.ingest_bench import one_pipeline_run

        result = one_pipeline_run(args.limit, INDEX, warm=args.warm)
        print(json.dumps({**result, "sentences_per_s": result["pipeline_sentences_per_s"]}))
        return 0

    runs: dict[str, list[dict]] = {"raw": [], **{name: [] for name in chosen}}
    for round_number in range(args.rounds):
        runs["raw"].append(child("raw", args.limit, {}))
        for name, env in chosen.items():
            runs[name].append(child("pipeline", args.limit, env, ("--warm",) if args.warm else ()))
        print(
            f"round {round_number + 1}: "
            + ", ".join(f"{name} {rows[-1]['sentences_per_s']}" for name, rows in runs.items()),
            file=sys.stderr,
        )
        write_result(args.name, "bench.header_vectors_speed", summary(runs, args))
    print(json.dumps(summary(runs, args)["variants"], indent=2))
    return 0


def summary(runs: dict[str, list[dict]], args) -> dict:
    raw_rates = [r["sentences_per_s"] for r in runs["raw"]]
    variants = {}
    raw_cpu = [r["cpu_s"] for r in runs["raw"]]
    for name in [name for name in runs if name != "raw"]:
        rates = [r["sentences_per_s"] for r in runs[name]]
        per_round = [rate / raw for rate, raw in zip(rates, raw_rates)]
        # CPU seconds of the raw run over the variant's, within the round
        # (includes the pipeline's start-up, which the raw run's warm-up
        # excludes from its wall clock but not from its CPU).
        cpu_per_round = [raw / r["cpu_s"] for raw, r in zip(raw_cpu, runs[name])]
        variants[name] = {
            "env": VARIANTS[name],
            "sentences_per_s": median(rates),
            "over_raw_within_round": median(per_round),
            "over_raw_within_round_per_run": [round(x, 3) for x in per_round],
            "over_raw_cpu_within_round": median(cpu_per_round),
            "over_raw_cpu_within_round_per_run": [round(x, 3) for x in cpu_per_round],
            "chunks": runs[name][-1]["chunks"],
        }
    return {
        "corpus": f"eval/scifact/beir_derived/corpus.jsonl (first {args.limit} documents)",
        "rounds": len(raw_rates),
        "warm": args.warm,
        "headers": "title+section (the default; on SciFact the title)",
        "sentences": runs["raw"][-1]["sentences"],
        "raw_embed_sentences_per_s": median(raw_rates),
        "raw_batch_size": runs["raw"][-1]["batch_size"],
        "variants": variants,
        "per_run": runs,
        "note": (
            f"niceness {os.nice(0)} on a 2-core machine; load_1m_before is the 1-minute load average before each "
            "run; cpu_s the run's own CPU seconds (user + system)"
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
