"""The gate's models: training questions, their candidates, the fit.

    python -m bench.gate_fit build     # index the training set, cache each question's candidates' signals
    python -m bench.gate_fit fit       # fit both gates, write them into the shipped calibration file
    python -m bench.gate_fit choose    # the default gate by the rule that loses no answers (results/gate_choice.json)

Which questions and why: chunkrag_eval/gate_study.py. The fit's figures go to results/gate_fit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench.common import RESULTS, SHARED, write_result

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "gate" / "training.jsonl"
CHOICE_CACHE = CACHE.parent / "choice.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gate_fit", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("build", "fit", "choose"))
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--no-write", action="store_true", help="fit: print, do not write the calibration file")
    parser.add_argument("--judge", type=Path, help="build, choose: a judge embedder's graph read on the best three too")
    args = parser.parse_args(argv)
    from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder
    from chunkrag_eval import gate_study

    judge = LocalMiniLMEmbedder(graph=args.judge) if args.judge else None
    if args.command == "choose":
        return choose(args.cache if args.cache != CACHE else CHOICE_CACHE, judge)
    if args.command == "build":
        from chunkrag_core.engines import make_backend
        from chunkrag_core.providers import make_embedder
        from chunkrag_core.providers.local_relevance import shared_relevance_model
        from chunkrag_core.settings import Settings
        from chunkrag_train.pairs import split_of

        settings = Settings.from_env()
        gate_study.build(
            SHARED / "eval",
            args.cache,
            client=make_backend(settings),
            embedder=make_embedder(settings.embedder),
            settings=settings,
            relevance=shared_relevance_model(),
            # The relevance model's own split of its training questions (seed 13, as trained).
            relevance_split=lambda key: split_of(key, 13),
            say=lambda line: print(line, file=sys.stderr, flush=True),
            judge=judge,
        )
        return 0
    from chunkrag_filter.processors.calibration import load_calibration, shipped_path, write_calibration

    fitted = gate_study.fit(gate_study.read_rows(args.cache))
    report = gate_study.fit_report(fitted)
    if not args.no_write:
        current = load_calibration(None)
        day = time.strftime("%Y-%m-%d")
        about = {
            **current.about,
            "gate": "P(some candidate is relevant) from the best raw cosine and the best share of the query's words "
            "and names in one candidate; fitted on NQ-open and SQuAD 2.0 training questions asked of an index "
            f"with and without their answer (`python -m bench.gate_fit fit`, {day}; chunkrag_eval/gate_study.py); "
            f"cut {fitted['gate']['calibrated'].cut}: chosen by the rule that loses no answers (as below); the fit's "
            f"own cut, the highest passing {gate_study.KEEP_ANSWERABLE:.0%} of the answerable training questions, was "
            f"{fitted['gate']['fitted_cut']}",
            "gate_relevance": "the same with the relevance model's best log-odds over the best three candidates, "
            "fitted on the NQ questions the relevance model held out of its training "
            f"(`python -m bench.gate_fit fit`, {day}); cut {fitted['gate_relevance']['calibrated'].cut}: chosen by "
            "the rule that loses no answers (`python -m bench.gate_fit choose`, docs/evaluation.md 'How the default "
            "gate is chosen', results/gate_choice.json); the fit's own cut was "
            f"{fitted['gate_relevance']['fitted_cut']}",
        }
        write_calibration(
            shipped_path(),
            current.retrieval,
            current.judged,
            about,
            current.relevance,
            fitted["gate"]["calibrated"],
            fitted["gate_relevance"]["calibrated"],
        )
    report["load_average"] = [round(v, 2) for v in os.getloadavg()]
    print(write_result("gate_fit", "bench.gate_fit", report))
    return 0


def choose(cache: Path, judge=None) -> int:
    """Index every set the rule reads, read each question's gate signals
    (cached, resumable; with every row cached no cluster is needed), apply
    the rule (chunkrag_eval/gate_choice.py), write each gate's chosen cut."""
    from chunkrag_cli.main import __file__ as cli_file
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.providers.local_relevance import shared_relevance_model
    from chunkrag_core.settings import Settings
    from chunkrag_eval import gate_choice as rule
    from chunkrag_eval.open_corpus import build_corpus, ensure_corpus_index, index_name
    from chunkrag_eval.open_eval import run_context
    from chunkrag_filter.processors.calibration import load_calibration, shipped_path
    from ingest_pipeline.pipeline import ingest, ingest_documents
    from search_extension.retriever import HybridRetriever

    context = run_context(["python", "-m", "bench.gate_fit", "choose"])
    settings = Settings.from_env()
    root, say = SHARED / "eval", lambda line: print(line, file=sys.stderr, flush=True)
    corpus = build_corpus([], root, {"nq": None, "squad": None})
    indices = {"open": index_name(corpus.documents, settings)}
    samples = Path(cli_file).parent / "samples"
    made, asked = rule.every_question(root, corpus.documents, samples)
    indices |= {key: index_name(docs, settings, f"chunkrag-gate-{key.replace('_', '-')}") for key, docs in made.items()}
    indices["samples"] = "chunkrag-gate-samples"
    retrievers: dict = {}
    if rule.unread(asked, cache, judged=judge is not None):
        client, embedder = make_backend(settings), make_embedder(settings.embedder)
        ensure_corpus_index(corpus, client=client, embedder=embedder, settings=settings, index=indices["open"])
        for key, docs in made.items():
            report = ingest_documents(docs, client=client, embedder=embedder, settings=settings, index=indices[key])
            if not report.ok:
                raise RuntimeError(f"indexing {key} failed: {report.errors[:3]}")
            say(f"{indices[key]}: {len(docs)} documents")
        ingest([samples / "corpus"], client=client, embedder=embedder, settings=settings, index=indices["samples"])
        retrievers = {k: HybridRetriever(client, embedder, name, settings.retrieval) for k, name in indices.items()}
    rows = rule.read_all(asked, retrievers, shared_relevance_model(), cache, say, judge)
    calibration = load_calibration(None)
    models = {"retrieval": calibration.gate.model, "crossencoder": calibration.gate_relevance.model}
    if judge is not None:  # the judge's gate as `fit` fitted it (results/gate_fit.json)
        models["judge"] = rule.fitted_model(json.loads((RESULTS / "gate_fit.json").read_text())["gate_judge"]["model"])
    chosen = rule.choose(rows, models)
    ms = sorted(r["relevance_ms"] for r in rows)
    chosen["relevance_ms_per_question"] = {"p50": ms[len(ms) // 2], "p95": ms[int(len(ms) * 0.95)]}
    chosen["indices"] = indices
    chosen["questions"] = len(rows)
    rule.write_each_gate_cut(chosen["each_gate"], shipped_path())
    print(write_result("gate_choice", "bench.gate_fit", {**context, **chosen}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
