"""``chunkrag``: the command line. Each command decodes its arguments, calls
one library function and prints what came back."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Sequence

from chunkrag_core.settings import Settings, SettingsError, parse_scales


def build_parser() -> argparse.ArgumentParser:
    # The filter's flags are made from its options' one declaration.
    from search_extension.options import add_arguments as add_filter_arguments

    parser = argparse.ArgumentParser(
        prog="chunkrag", description="ChunkRAG on Elasticsearch: ingest documents as semantic chunks and search them."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ingest = commands.add_parser("ingest", help="chunk, embed and index .txt/.md/.jsonl files or folders")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--index", help="index name (default: $CHUNKRAG_INDEX or 'chunkrag')")
    ingest.add_argument(
        "--similarity-threshold", type=float, help="new chunk where consecutive-sentence cosine drops below this (0.8)"
    )
    ingest.add_argument("--max-chars", type=int, help="longest chunk in characters (500)")
    ingest.add_argument(
        "--percentile",
        type=float,
        help=(
            "break where the distance between consecutive sentences is above this percentile of the document's own "
            "(e.g. 95) instead of below --similarity-threshold"
        ),
    )
    ingest.add_argument(
        "--min-chars", type=int, help="a chunk shorter than this is not closed at a similarity drop (0)"
    )
    ingest.add_argument(
        "--headers",
        choices=["title+section", "title", "section", "none"],
        help="contextual chunk headers (title+section)",
    )
    ingest.add_argument("--scales", help=SCALES_HELP + " (default $CHUNKRAG_SCALES, or none)")
    ingest.add_argument(
        "--llm-titles",
        action="store_true",
        help="the chat model writes a title for each document that has none (one call per such document; cached)",
    )
    ingest.add_argument(
        "--summaries",
        action="store_true",
        help=(
            "the chat model writes a short summary of each document into its chunks' headers "
            "(one call per document; cached)"
        ),
    )
    ingest.add_argument(
        "--semantic-sections",
        action="store_true",
        help=(
            "the chat model names the sections of each document without headings "
            "(one call per ~8,000 characters; cached)"
        ),
    )
    ingest.add_argument(
        "--workers",
        action="store_true",
        help=(
            "send batches of documents to the Celery workers (`chunkrag workers`, broker $REDIS_URL), which chunk, "
            "embed and write them (default $CHUNKRAG_WORKER_INGEST, or in this process)"
        ),
    )
    ingest.add_argument("--json", action="store_true", help="print the report as JSON")
    ingest.add_argument("--no-progress", action="store_true")
    ingest.set_defaults(handler=cmd_ingest)

    search = commands.add_parser("search", help="hybrid search over a chunk index")
    search.add_argument("query")
    search.add_argument("--index")
    add_filter_arguments(search, "search")
    search.add_argument("--size", type=int, default=None)
    search.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="JSON",
        help='an Elasticsearch filter clause, e.g. \'{"term": {"doc_id": "a"}}\'',
    )
    search.add_argument("--collapse", metavar="FIELD", help="best chunk per value of FIELD, e.g. doc_id")
    _scales_argument(search)
    search.add_argument("--json", action="store_true")
    search.set_defaults(handler=cmd_search)

    ask = commands.add_parser("ask", help="retrieve, filter chunks with the LLM judge, and answer from what was kept")
    ask.add_argument("question")
    ask.add_argument("--index")
    add_filter_arguments(ask, "ask")
    _scales_argument(ask)
    ask.set_defaults(handler=cmd_ask)

    serve = commands.add_parser(
        "serve", help="run the Elasticsearch-compatible gateway (ext.chunkrag in _search, /v1/ask)"
    )
    serve.add_argument("--host", help="default: $CHUNKRAG_GATEWAY_HOST or 127.0.0.1")
    serve.add_argument("--port", type=int, help="default: $CHUNKRAG_GATEWAY_PORT or 8400")
    serve.add_argument("--access-log", action="store_true", help="log every request (costs ~0.2 ms of CPU each)")
    serve.set_defaults(handler=cmd_serve)

    evaluation = commands.add_parser(
        "eval",
        help="run retrieval and the chunk filter over an evaluation file (popqa, pubhealth, bio format) and measure it",
    )
    evaluation.add_argument("file", help="a JSON-lines file in the popqa, pubhealth or bio format of shared/eval")
    evaluation.add_argument(
        "--format",
        default="auto",
        choices=["auto", "popqa", "pubhealth", "bio", "wikiqa", "healthver", "climate_fever"],
        help=(
            "wikiqa, healthver and climate_fever are sentence-level relevance sets: "
            "the judge's ROC AUC and F1 against cosine and BM25"
        ),
    )
    evaluation.add_argument(
        "--judge-sample",
        type=int,
        help="sentence sets: judge a seeded random sample of this many items (cosine and BM25 always score all)",
    )
    evaluation.add_argument(
        "--pool",
        default="ambiguous",
        choices=["ambiguous", "correct", "incorrect"],
        help="which context pool of each record is indexed",
    )
    evaluation.add_argument("--limit", type=int, help="only the first N usable records")
    evaluation.add_argument("--index", help="evaluation index (default chunkrag-eval-<format>)")
    add_filter_arguments(evaluation, "eval")
    evaluation.add_argument(
        "--generate",
        action="store_true",
        help="also write an answer (PopQA) or verdict (PubHealth) from the kept chunks and grade it",
    )
    _scales_argument(evaluation, ingest=True)
    evaluation.add_argument(
        "--judge", choices=["threads", "celery"], help="where judging runs (default $CHUNKRAG_WORKER_JUDGE or threads)"
    )
    evaluation.add_argument("--out", help="write the summary and per-question outcomes to this JSON file")
    evaluation.add_argument("--plots", metavar="DIR", help="write PNG figures to DIR")
    evaluation.set_defaults(handler=cmd_eval)

    table = commands.add_parser(
        "table",
        help="the answer table: answers from no retrieval, all retrieved, top-k and the filter, graded and paired",
    )
    table.add_argument("file", nargs="+", help="JSON-lines files in the popqa, pubhealth or bio format of shared/eval")
    table.add_argument("--limit", help="the first N usable records of each file, or per format: popqa=200,bio=10")
    table.add_argument(
        "--judge-limit", help="the row with the LLM judge on the first N questions only (N, or per format)"
    )
    table.add_argument("--judge-top", type=int, default=9, help="candidates the judge sees in that row")
    table.add_argument(
        "--rows", default="no_retrieval,rag,topk,filter,filter_judge", help="comma-separated rows, in table order"
    )
    table.add_argument("--index-prefix", default="chunkrag-table", help="pools are indexed in <prefix>-<format>")
    table.add_argument(
        "--cache", default=".cache/generations.sqlite", help="answers already generated for the same prompt (sqlite)"
    )
    table.add_argument("--out", help="write the table (markdown) here and the outcomes beside it (.json)")
    table.set_defaults(handler=cmd_table)

    calibrate = commands.add_parser(
        "calibrate",
        help="fit the chunk filter's calibration (models and cut) on labelled questions and write the file "
        "CHUNKRAG_CALIBRATION_FILE selects",
    )
    calibrate.add_argument(
        "--labelled",
        action="append",
        default=[],
        metavar="FILE",
        help='your labelled JSONL: {"question", "documents": [{"text", "title"}], "answers" or "relevant"} a line',
    )
    calibrate.add_argument(
        "--eval-set",
        action="append",
        default=[],
        choices=["popqa", "nq", "squad", "scifact", "wikiqa", "healthver", "climate_fever"],
        help="a labelled set of the evaluation data (shared/eval, --eval-root)",
    )
    calibrate.add_argument("--eval-root", default="../shared/eval", help="the evaluation data directory")
    calibrate.add_argument("--limit", type=int, help="questions per evaluation set (a seeded sample)")
    calibrate.add_argument(
        "--judge",
        action="store_true",
        help="also fit the model with the configured chat model's share (one listwise call per question)",
    )
    calibrate.add_argument("--target", type=float, default=0.92, help="answers in the pool the cut keeps (mean)")
    calibrate.add_argument("--index", default="chunkrag-calibrate", help="index the labelled documents go to")
    calibrate.add_argument("--out", help="the file to write (default: $CHUNKRAG_CALIBRATION_FILE)")
    calibrate.set_defaults(handler=cmd_calibrate)

    cluster = commands.add_parser("cluster", help="show the cluster's health and the features this project will use")
    cluster.set_defaults(handler=cmd_cluster)

    demo = commands.add_parser("demo", help="start the services, ingest the bundled sample, run a few searches")
    demo.add_argument(
        "--no-services", action="store_true", help="use running services ($ES_URL) instead of starting local ones"
    )
    demo.add_argument("--index", default="chunkrag-demo")
    demo.add_argument(
        "--no-filter",
        action="store_true",
        help="searches only: skip the LLM chunk filter (which needs the model server)",
    )
    demo.add_argument(
        "--filter-questions",
        type=int,
        default=2,
        help="how many sample questions go through the chunk filter (each costs model calls)",
    )
    demo.set_defaults(handler=cmd_demo)

    workers = commands.add_parser(
        "workers", help="run a Celery worker that judges chunks for the gateway (broker: $REDIS_URL)"
    )
    workers.add_argument("--concurrency", type=int, help="judging processes (default: $CHUNKRAG_CHAT_PARALLEL, 2)")
    workers.add_argument("--loglevel", default="INFO")
    workers.set_defaults(handler=cmd_workers)

    from local_services.cli import register

    register(commands)
    return parser


SCALES_HELP = (
    "multi-scale ensembling: also index each document at these chunk sizes in tokens, e.g. 128,512,2000 "
    "('default' for those, 'off' for none)"
)


def _scales_argument(parser: argparse.ArgumentParser, *, ingest: bool = False) -> None:
    # --ensemble itself is a filter option (made from its declaration); the scales are a setting.
    where = "indexed and ensembled" if ingest else "ensembled"
    parser.add_argument(
        "--scales", help=f"with --ensemble, the scales {where} (default $CHUNKRAG_SCALES, else 128,512,2000)"
    )


def ensemble_scales(resolved, settings: Settings) -> tuple[int, ...] | None:
    """The scales to ensemble with ``--ensemble`` (None without it): the
    settings' (``--scales``, $CHUNKRAG_SCALES), else the default ones."""
    from search_extension.options import ensemble_scales as scales_for

    return scales_for(resolved.ensemble, settings.chunking.scales)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from search_extension.options import OptionError

    try:
        return args.handler(args)
    except SettingsError as exc:
        print(f"chunkrag: configuration error: {exc}", file=sys.stderr)
        return 2
    except OptionError as exc:
        print(f"chunkrag: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a clear one-line reason beats a traceback for a CLI user
        if os.environ.get("CHUNKRAG_DEBUG"):
            raise
        print(f"chunkrag: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    chunking = settings.chunking
    if getattr(args, "similarity_threshold", None) is not None:
        chunking = dataclasses.replace(chunking, similarity_threshold=args.similarity_threshold)
    if getattr(args, "max_chars", None) is not None:
        chunking = dataclasses.replace(chunking, max_chars=args.max_chars)
    if getattr(args, "percentile", None) is not None:
        chunking = dataclasses.replace(chunking, breakpoint="percentile", breakpoint_percentile=args.percentile)
    if getattr(args, "min_chars", None) is not None:
        chunking = dataclasses.replace(chunking, min_chars=args.min_chars)
    if getattr(args, "headers", None) is not None:
        chunking = dataclasses.replace(chunking, headers=args.headers)
    if getattr(args, "scales", None) is not None:
        chunking = dataclasses.replace(chunking, scales=parse_scales(args.scales))
    if getattr(args, "llm_titles", False):
        chunking = dataclasses.replace(chunking, llm_titles=True)
    if getattr(args, "summaries", False):
        chunking = dataclasses.replace(chunking, summaries=True)
    if getattr(args, "semantic_sections", False):
        chunking = dataclasses.replace(chunking, sectioning="llm")
    return dataclasses.replace(settings, index=getattr(args, "index", None) or settings.index, chunking=chunking)


def _backend(settings: Settings):
    """The search backend SEARCH_BACKEND names (Elasticsearch or OpenSearch), healthy."""
    from chunkrag_core.engines import make_backend

    backend = make_backend(settings)
    backend.health()
    return backend


def cmd_ingest(args: argparse.Namespace) -> int:
    from chunkrag_cli.output import ingest_report_json, print_ingest_report
    from chunkrag_core.providers import make_embedder
    from ingest_pipeline.pipeline import ingest

    settings = _settings(args)
    progress = False if args.no_progress else None
    if args.workers or settings.workers.ingest:
        from workers.errors import QueueUnavailable, WorkersUnavailable
        from workers.ingest_dispatch import ingest_on_workers

        try:
            report = ingest_on_workers(args.paths, client=_backend(settings), settings=settings, progress=progress)
        except (WorkersUnavailable, QueueUnavailable) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    else:
        report = ingest(
            args.paths,
            client=_backend(settings),
            embedder=make_embedder(settings.embedder),
            settings=settings,
            progress=progress,
        )
    if args.json:
        print(ingest_report_json(report))
    else:
        print_ingest_report(report, sys.stdout)
    return 0 if report.ok else 1


def cmd_search(args: argparse.Namespace) -> int:
    from chunkrag_cli.output import hits_json, print_hits
    from chunkrag_core.providers import make_embedder
    from search_extension.retriever import HybridRetriever

    settings = _settings(args)
    try:
        filters = [json.loads(raw) for raw in args.filter]
    except json.JSONDecodeError as exc:
        print(f"chunkrag: --filter is not JSON: {exc}", file=sys.stderr)
        return 2
    retriever = HybridRetriever(
        _backend(settings), make_embedder(settings.embedder), settings.index, settings.retrieval
    )
    resolved = filter_options_from_args(args, "search")
    scales, mode = ensemble_scales(resolved, settings), resolved.mode
    if scales is not None:
        result = retriever.search_ensemble(
            args.query, scales=scales, mode=mode, size=args.size, filters=filters, collapse_field=args.collapse
        )
    else:
        result = retriever.search(args.query, mode=mode, size=args.size, filters=filters, collapse_field=args.collapse)
    if args.json:
        print(hits_json(result))
    else:
        print_hits(args.query, result, sys.stdout)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from chunkrag_cli.output import print_ask
    from chunkrag_core.providers import make_chat, make_embedder
    from search_extension.ask import DEFAULT_CANDIDATES, ask
    from search_extension.retriever import HybridRetriever

    settings = _settings(args)
    resolved = filter_options_from_args(args, "ask")
    retriever = HybridRetriever(
        _backend(settings), make_embedder(settings.embedder), settings.index, settings.retrieval
    )
    result = ask(
        args.question,
        retriever=retriever,
        model=make_chat(settings.chat),
        options=resolved.filter,
        candidates=resolved.candidates or DEFAULT_CANDIDATES,
        parallel=settings.chat.parallel,
        model_name=settings.chat.model,
        segments=resolved.segments,
        ensemble=ensemble_scales(resolved, settings),
    )
    print_ask(result, sys.stdout)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from search_extension.gateway import create_app
    from search_extension.gateway.allocator import limit_malloc_arenas
    from search_extension.gateway.server import uvicorn_options

    # Before any thread starts: RSS stays flat under load (allocator.py).
    limit_malloc_arenas()
    settings = Settings.from_env()
    gateway = dataclasses.replace(
        settings.gateway, host=args.host or settings.gateway.host, port=args.port or settings.gateway.port
    )
    # HTTPS with CHUNKRAG_GATEWAY_SSL_CERTFILE and _KEYFILE.
    uvicorn.run(
        create_app(dataclasses.replace(settings, gateway=gateway)),
        host=gateway.host,
        port=gateway.port,
        access_log=args.access_log,
        **uvicorn_options(gateway),
    )
    return 0


def filter_options_from_args(args: argparse.Namespace, command: str):
    """The resolved options (ChunkragOptions) the filter flags of ``command``
    set; an unset flag keeps the declared default, and the rules (a judging
    flag turns the judge on for the best nine, ``--calibration``, whether an
    answer is written) are the same as the gateway's."""
    from search_extension.options import from_arguments

    return from_arguments(args, command).resolve(surface=command)


def _judge_many(settings: Settings, judge: str, model):
    """Where `eval` judges: on the Celery workers (a failure to reach them
    fails the run: an evaluation must not quietly judge elsewhere), or in
    threads here (``settings.chat.parallel`` at once)."""
    if judge == "celery":
        from workers.dispatch import celery_judge_many

        return celery_judge_many(settings=settings)
    from chunkrag_filter.judging import judge_in_threads

    return judge_in_threads(model, threads=settings.chat.parallel, model_name=settings.chat.model)


def cmd_eval(args: argparse.Namespace) -> int:
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.report import print_outcome, write_report
    from chunkrag_eval.runner import evaluate
    from chunkrag_filter.pipeline import resolve_calibration

    settings = _settings(args)
    if args.format in ("wikiqa", "healthver", "climate_fever"):
        return _eval_sentences(args, settings)
    resolved = filter_options_from_args(args, "eval")
    ensemble = ensemble_scales(resolved, settings)
    if ensemble is not None:
        # The pools are indexed here, so at the scales ensembled.
        settings = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=ensemble))
    fmt, items, bad = read_items(args.file, args.format, args.pool, args.limit)
    for record in bad:
        print(f"skipped line {record.line}: {record.reason}", file=sys.stderr)
    options = resolved.filter
    model = make_chat(settings.chat)
    report = evaluate(
        items,
        fmt,
        client=_backend(settings),
        embedder=make_embedder(settings.embedder),
        settings=settings,
        model=model,
        options=options,
        judge_many=_judge_many(settings, args.judge or settings.workers.judge, model),
        index=args.index or f"chunkrag-eval-{fmt}",
        generate=args.generate,
        on_question=lambda outcome: print_outcome(outcome, sys.stderr),
        segments=resolved.segments,
        ensemble=ensemble,
    )
    summary = {
        **report.summary(),
        "skipped_records": len(bad),
        "options": {
            "method": options.scoring.method,
            "orders": options.scoring.orders,
            "judge_top": options.judge_top,
            "calibrated": options.calibration is not None,
            "prior_weight": options.prior_weight,
            "threshold": options.threshold,
            "fixed_threshold": resolve_calibration(options)[1],
            "redundancy": options.redundancy_threshold is not None,
            "judge": args.judge or settings.workers.judge,
            "model": settings.chat.model,
            "ensemble_scales": list(ensemble) if ensemble is not None else None,
        },
    }
    if args.out:
        write_report(args.out, summary, report)
    if args.plots:
        from chunkrag_eval.plots import write_plots

        for path in write_plots(report, args.plots, options=summary["options"]):
            print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(summary, indent=2))
    return 0


def _eval_sentences(args: argparse.Namespace, settings: Settings) -> int:
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_eval.sentences import evaluate_sentences

    options = filter_options_from_args(args, "eval").filter.scoring
    result = evaluate_sentences(
        args.format,
        args.file,
        client=_backend(settings),
        embedder=make_embedder(settings.embedder),
        model=make_chat(settings.chat),
        options=options,
        judge_sample=args.judge_sample,
        progress=lambda line: print(line, file=sys.stderr, end="\r"),
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    print(json.dumps(result, indent=2))
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_eval.answer_table import GenerationCache, limit_for, parse_limits, run_table, table_markdown
    from chunkrag_eval.datasets import read_items
    from local_services.llm_server import DEFAULT_CTX

    settings = _settings(args)
    rows = tuple(r.strip() for r in args.rows.split(",") if r.strip())
    client, embedder, model = _backend(settings), make_embedder(settings.embedder), make_chat(settings.chat)
    cache = GenerationCache(args.cache) if args.cache else None
    limits, judge_limits = parse_limits(args.limit), parse_limits(args.judge_limit)
    runs = {}
    for path in args.file:
        fmt, items, bad = read_items(path, "auto", "ambiguous")
        items = items[: limit_for(limits, fmt)]
        for record in bad:
            print(f"{path}: skipped line {record.line}: {record.reason}", file=sys.stderr)
        started = time.perf_counter()
        run = run_table(
            items,
            fmt,
            fmt,
            client=client,
            embedder=embedder,
            settings=settings,
            model=model,
            model_name=settings.chat.model,
            cache=cache,
            index=f"{args.index_prefix}-{fmt}",
            rows=rows,
            judge_top=args.judge_top,
            row_limits={"filter_judge": limit_for(judge_limits, fmt) or len(items)},
            # The local llama-server's context per slot; a cloud model has more.
            context_tokens=DEFAULT_CTX,
            parallel=settings.chat.parallel,
            on_outcome=lambda o: print(
                f"[{o.item_id}] {o.row}: {o.calls} calls, {o.prompt_tokens} tokens, "
                f"{'right' if o.correct else 'wrong' if o.correct is not None else o.score}",
                file=sys.stderr,
                flush=True,
            ),
        )
        print(f"{fmt}: {len(items)} questions in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        runs[fmt] = run
    markdown = table_markdown({name: run.summary() for name, run in runs.items()}, rows)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(markdown, encoding="utf-8")
        payload = {"model": settings.chat.model, "sets": {name: run.to_json() for name, run in runs.items()}}
        out.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    print(markdown)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_eval.calibrate import LabelledDataError, calibrate, read_labelled_jsonl
    from chunkrag_eval.labelled import read_labelled

    settings = _settings(args)
    out = args.out or settings.calibration_file
    if not out:
        print("name the file to write: --out PATH (or set CHUNKRAG_CALIBRATION_FILE)", file=sys.stderr)
        return 2
    if not args.labelled and not args.eval_set:
        print("give labelled questions: --labelled FILE and/or --eval-set NAME", file=sys.stderr)
        return 2
    if not 0 < args.target <= 1:
        print(f"--target must be in (0, 1], got {args.target}", file=sys.stderr)
        return 2
    queries = []
    try:
        for path in args.labelled:
            read, skipped = read_labelled_jsonl(path, dataset=Path(path).stem)
            for note in skipped:
                print(f"{path}: skipped {note}", file=sys.stderr)
            queries += read
        for name in args.eval_set:
            queries += read_labelled(name, args.eval_root, args.limit)
    except (LabelledDataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    judge_many = None
    if args.judge:
        judge_many = _judge_many(settings, "threads", make_chat(settings.chat))
    result = calibrate(
        queries,
        out,
        client=_backend(settings),
        embedder=make_embedder(settings.embedder),
        settings=settings,
        index=args.index,
        judge_many=judge_many,
        target=args.target,
        about={
            "command": "chunkrag calibrate " + " ".join(sys.argv[2:]),
            "date": time.strftime("%Y-%m-%d"),
            "chat_model": settings.chat.model if args.judge else None,
        },
        progress=lambda n, total: print(f"{n}/{total}", file=sys.stderr, end="\r"),
    )
    print(json.dumps(result, indent=2))
    if os.path.abspath(out) != os.path.abspath(settings.calibration_file or "/"):
        print(f"the filter reads it with CHUNKRAG_CALIBRATION_FILE={result['file']}", file=sys.stderr)
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    settings = _settings(args)
    backend = _backend(settings)
    health = backend.cluster_health()
    capabilities = backend.capabilities()
    print(f"{backend.engine} at {backend.display_url}: {health.status}, {health.nodes} node(s)")
    for name, value in dataclasses.asdict(capabilities).items():
        print(f"  {name}: {value}")
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    settings = _settings(args)  # a bad setting fails here, not in every pool process
    concurrency = args.concurrency or settings.chat.parallel
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.app",
        "worker",
        f"--loglevel={args.loglevel}",
        f"--concurrency={concurrency}",
        "--pool=prefork",
    ]
    # exec: signals (Ctrl-C, a service manager's SIGTERM) reach Celery itself.
    os.execv(sys.executable, command)
    return 0  # not reached


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job end to end on the bundled public-domain sample."""
    from chunkrag_cli.output import print_hits, print_ingest_report
    from chunkrag_core.providers import make_embedder
    from ingest_pipeline.pipeline import ingest
    from search_extension.retriever import HybridRetriever

    if not args.no_services:
        from local_services.cli import app_environ
        from local_services.cli import main as services_main

        if services_main(["up"]) != 0:
            return 1
        # The local model only when no other OpenAI-compatible server is configured.
        if (
            not args.no_filter
            and not os.environ.get("CHUNKRAG_CHAT_BASE_URL")
            and services_main(["up", "--only", "llm"]) != 0
        ):
            return 1
        # The app (and the demo's worker) know the services by URL: those just started, on their ports.
        os.environ.update(app_environ())
    settings = _settings(args)
    client = _backend(settings)
    embedder = make_embedder(settings.embedder)
    samples = resources.files("chunkrag_cli") / "samples"
    with resources.as_file(samples) as folder:
        report = ingest([folder / "corpus"], client=client, embedder=embedder, settings=settings, progress=False)
        questions = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    print_ingest_report(report, sys.stdout)
    retriever = HybridRetriever(client, embedder, settings.index, settings.retrieval)
    found = 0
    for item in questions:
        result = retriever.search(item["question"], size=3)
        print_hits(item["question"], result, sys.stdout)
        found += any(item["expect_phrase"] in chunk.text for chunk in result.chunks)
    print(f"\nthe passage holding the answer was in the top 3 for {found} of {len(questions)} questions")
    if not args.no_filter:
        _demo_filter(settings, embedder, [q["question"] for q in questions[: args.filter_questions]])
    return 0 if report.ok else 1


def _demo_filter(settings: Settings, embedder, questions: list[str]) -> None:
    """The chunk filter as a search tool sees it: a real Celery worker judges
    with the configured model (the local one by default), the gateway speaks
    `_search`, and the official Elasticsearch client asks it."""
    import tempfile
    from pathlib import Path

    from elasticsearch import Elasticsearch

    from chunkrag_cli.output import print_gateway_search
    from local_services.celery_workers import CeleryWorkers
    from search_extension.gateway import create_app
    from search_extension.gateway.server import serve_in_thread

    settings = dataclasses.replace(settings, workers=dataclasses.replace(settings.workers, judge="celery"))
    # The default filter scores from the retrieval signals alone (no judge
    # call); the demo turns the LLM judge on to show it working on a worker.
    print(
        "\nthe chunk filter with the LLM judge on (ext.chunkrag.judge_top), through the gateway and a Celery worker, "
        f"with {settings.chat.model} at {settings.chat.base_url}:"
    )
    with (
        tempfile.TemporaryDirectory() as logs,
        CeleryWorkers({**os.environ, "REDIS_URL": settings.redis_url}, Path(logs)) as workers,
    ):
        workers.start(1)
        with serve_in_thread(create_app(settings, embedder=embedder)) as url:
            client = Elasticsearch(
                url, request_timeout=settings.workers.query_budget_s + 2 * settings.chat.timeout_s, max_retries=0
            )
            for question in questions:
                body = {
                    "query": {"match": {"text": question}},
                    "size": 3,
                    "ext": {"chunkrag": {"candidates": 6, "judge_top": 6, "include_dropped": True, "answer": True}},
                }
                print_gateway_search(question, client.search(index=settings.index, body=body), sys.stdout)
