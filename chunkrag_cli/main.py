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
from typing import Callable, Sequence, TextIO

from chunkrag_core.providers.chat import ChatError
from chunkrag_core.settings import Settings, SettingsError


def build_parser() -> argparse.ArgumentParser:
    # The filter's flags are made from its options' one declaration.
    from ingest_pipeline.options import add_arguments as add_ingest_arguments
    from search_extension.options import add_arguments as add_filter_arguments

    parser = argparse.ArgumentParser(
        prog="chunkrag", description="ChunkRAG on Elasticsearch: ingest documents as semantic chunks and search them."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ingest = commands.add_parser("ingest", help="chunk, embed and index .txt/.md/.jsonl files or folders")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--index", help="index name (default: $CHUNKRAG_INDEX or 'chunkrag')")
    # The ingest flags are made from their one declaration.
    add_ingest_arguments(ingest)
    ingest.add_argument("--json", action="store_true", help="print the report as JSON")
    ingest.add_argument("--no-progress", action="store_true")
    ingest.set_defaults(handler=cmd_ingest)

    sync = commands.add_parser(
        "sync",
        help="build, or bring up to date, the companion chunk index of an index you already have (docs/sync.md)",
    )
    sync.add_argument("source", help="the index (or alias) whose text fields to keep chunked")
    sync.add_argument("--companion", help="the companion chunk index (default: SOURCE-chunkrag)")
    sync.add_argument(
        "--fields", help="text fields to sync, comma-separated (default: every text field of the mapping)"
    )
    sync.add_argument(
        "--title-field", help="the field used as each passage's title (default: title, name, subject or headline)"
    )
    sync.add_argument(
        "--workers",
        action="store_true",
        help="chunk, embed and write on the Celery workers (`chunkrag workers`); reading and deletions stay here",
    )
    sync.add_argument(
        "--every", type=float, metavar="SECONDS", help="run again this many seconds after each pass, until stopped"
    )
    sync.add_argument("--json", action="store_true", help="print each pass's report as JSON")
    sync.add_argument(
        "--no-progress", action="store_true", help="no progress bar (shown on stderr when it is a terminal)"
    )
    sync.set_defaults(handler=cmd_sync)

    search = commands.add_parser(
        "search", help="hybrid search over a chunk index; on any other index, your search and the kept passages"
    )
    search.add_argument("query")
    search.add_argument("--index")
    add_filter_arguments(search, "search")
    _post_search_arguments(search)
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

    ask = commands.add_parser(
        "ask",
        help="retrieve, keep the relevant chunks (by default scored from the retrieval signals, no LLM judge; "
        "--judge-top N asks the judge), and answer from what was kept",
    )
    ask.add_argument("question")
    ask.add_argument("--index")
    add_filter_arguments(ask, "ask")
    _post_search_arguments(ask)
    ask.add_argument("--size", type=int, default=None, help="post-search: the hits asked for (default 10)")
    ask.add_argument(
        "--json",
        action="store_true",
        help="print the response as JSON: the gateway's /v1/ask response (post-search: its _search response)",
    )
    _scales_argument(ask)
    ask.set_defaults(handler=cmd_ask)

    serve = commands.add_parser(
        "serve", help="run the Elasticsearch-compatible gateway (ext.chunkrag in _search, /v1/ask)"
    )
    serve.add_argument("--host", help="default: $CHUNKRAG_GATEWAY_HOST or 127.0.0.1")
    serve.add_argument("--port", type=int, help="default: $CHUNKRAG_GATEWAY_PORT or 8400")
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="one JSON line per request on stdout (also $CHUNKRAG_GATEWAY_ACCESS_LOG); see docs/operations-gateway.md",
    )
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
    evaluation.add_argument(
        "--generate-baselines",
        action="store_true",
        help="with --generate: also answer from all retrieved chunks (one more model call per question) "
        "and pair the filter's accuracy against it",
    )
    _scales_argument(evaluation, ingest=True)
    evaluation.add_argument(
        "--judge", choices=["threads", "celery"], help="where judging runs (default $CHUNKRAG_WORKER_JUDGE or threads)"
    )
    evaluation.add_argument("--out", help="write the summary and per-question outcomes to this JSON file")
    evaluation.add_argument("--plots", metavar="DIR", help="write PNG figures to DIR")
    _open_corpus_arguments(evaluation, table=False)
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
        "--rows",
        default="no_retrieval,rag,topk,filter,filter_judge",
        help="comma-separated rows, in table order; also filter_retrieval_order, filter_no_redundancy, "
        "filter_cut_only, filter_scored_order (the filter with its steps set explicitly) and cut=<c>",
    )
    table.add_argument("--index-prefix", default="chunkrag-table", help="pools are indexed in <prefix>-<format>")
    table.add_argument(
        "--cache", default=".cache/generations.sqlite", help="answers already generated for the same prompt (sqlite)"
    )
    table.add_argument("--out", help="write the table (markdown) here and the outcomes beside it (.json)")
    _open_corpus_arguments(table, table=True)
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
    calibrate.add_argument(
        "--target",
        default="0.92",
        help="the share of the answers in the pool the cut keeps (mean over the sets), or 'accuracy': the configured "
        "chat model answers from what each cut keeps and the highest cut within one point of answering from every "
        "candidate is chosen (needs labelled answers; one call per question and distinct kept set)",
    )
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
    from chunkrag_cli.config_command import register as register_config

    register_config(commands)
    return parser


def _open_corpus_arguments(parser: argparse.ArgumentParser, *, table: bool) -> None:
    from chunkrag_eval.open_rows import PARAMETRIC, ROW_NAMES

    group = parser.add_argument_group("open corpus (docs/evaluation.md#the-open-corpus)")
    group.add_argument(
        "--open-corpus",
        action="store_true",
        help="every pool of PopQA and PubHealth dev and the distractors in one shared index (built once, named by "
        "a fingerprint of corpus and chunker); N candidates retrieved from all of it, no pool filter; "
        + (
            "every row answered by the model on the questions read (--limit)"
            if table
            else "rows measured without the model (--generate: answered too)"
        ),
    )
    group.add_argument("--sizes", default="10,20,40", help="open corpus: the N candidates retrieved, comma-separated")
    group.add_argument(
        "--distractors",
        default="nq,squad",
        help="open corpus: NQ-open's gold passages and SQuAD's paragraphs (NAME or NAME=N for the first N; none)",
    )
    group.add_argument(
        "--open-rows",
        help=f"open corpus: the rows, comma-separated (default all: {', '.join(ROW_NAMES)}; also "
        f"{', '.join(PARAMETRIC)})",
    )
    group.add_argument(
        "--cosine-threshold",
        type=float,
        help="open corpus: the cosine row's threshold (default: chosen by the shipped cut's rule at N = 20)",
    )
    group.add_argument(
        "--answer-sizes", help="open corpus, with answers: the N answered at (default every N of --sizes)"
    )
    group.add_argument(
        "--answer-rows", help="open corpus, with answers: the rows the model answers for (default every row)"
    )
    group.add_argument(
        "--start",
        help="open corpus: skip the first N usable records of each file (N, or per format: popqa=60)",
    )
    group.add_argument(
        "--unanswerable",
        default="none",
        help="open corpus: the unanswerable half, KIND, KIND=N (the first N) or KIND=A:B, comma-separated: "
        "absent (PopQA questions asked without their pool, their subject named nowhere else), unanswerable "
        "(SQuAD 2.0's, from the article the relevance model held out), off_topic (each set asked of the other's "
        "pools); none (default)",
    )
    if table:
        group.add_argument(
            "--answer-limit",
            help="open corpus: answer the first N questions of each set only (N, or per format: popqa=20,"
            "pubhealth=20; 0: measure every row without the model); the rest are measured without it; an "
            "unanswerable kind is answered only when named, SET:KIND=N (popqa:absent=30, squad:unanswerable=30)",
        )
    else:
        group.add_argument(
            "--judge-limit", type=int, default=0, help="open corpus: the LLM judge row on the first N questions"
        )
        group.add_argument(
            "--answer-limit", type=int, help="open corpus with --generate: answer the first N questions only"
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


def _post_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Post-search on an index this project did not write (docs/existing-indices.md)."""
    parser.add_argument(
        "--fields",
        metavar="FIELD,FIELD",
        help="post-search: the text fields split into passages (default: the index's text fields)",
    )
    parser.add_argument(
        "--body",
        metavar="FILE",
        help="post-search: your own _search body (JSON) instead of a multi_match of the query over the text fields",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from search_extension.options import OptionError

    try:
        if args.command != "config":  # `config` reads the file itself, to tell its values from the environment's
            # The check `config check` makes, then the file's variables into the environment.
            from chunkrag_cli.config_command import check_before_running

            check_before_running()
        return args.handler(args)
    except SettingsError as exc:
        print(f"chunkrag: configuration error: {exc}", file=sys.stderr)
        return 2
    except OptionError as exc:
        print(f"chunkrag: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except ChatError as exc:
        if os.environ.get("CHUNKRAG_DEBUG"):
            raise
        # A slow model (a busy local server) is the usual cause; say which setting waits longer.
        hint = " (CHUNKRAG_CHAT_TIMEOUT_S sets how long a call waits)" if exc.timed_out else ""
        print(f"chunkrag: the chat model failed: {exc}{hint}", file=sys.stderr)
        return 1
    except Exception as exc:  # a clear one-line reason beats a traceback for a CLI user
        if os.environ.get("CHUNKRAG_DEBUG"):
            raise
        print(f"chunkrag: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _settings(args: argparse.Namespace) -> Settings:
    from ingest_pipeline.options import apply

    settings = apply(args, Settings.from_env())
    return dataclasses.replace(settings, index=getattr(args, "index", None) or settings.index)


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


def cmd_sync(args: argparse.Namespace) -> int:
    from chunkrag_cli.output import print_sync_report, sync_report_json
    from ingest_pipeline.sync import SyncError

    settings = _settings(args)
    client = _backend(settings)
    options = {
        "companion": args.companion,
        "fields": [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None,
        "title_field": args.title_field,
    }
    # A pass that fails for a reason that may pass (the cluster, Redis or
    # the workers away) is reported; with --every the next one is tried.
    from chunkrag_core.engines.errors import EngineError

    passing: tuple[type[BaseException], ...] = (EngineError,)
    if args.workers:
        from workers.errors import QueueUnavailable, WorkersUnavailable
        from workers.sync_dispatch import sync_on_workers

        passing += (WorkersUnavailable, QueueUnavailable)

        def one_pass(on_page):
            return sync_on_workers(args.source, client=client, settings=settings, on_page=on_page, **options)
    else:
        from chunkrag_core.providers import make_embedder
        from ingest_pipeline.sync import sync_index

        embedder = make_embedder(settings.embedder)

        def one_pass(on_page):
            return sync_index(
                args.source, client=client, embedder=embedder, settings=settings, on_page=on_page, **options
            )

    while True:
        try:
            report = _with_progress(one_pass, False if args.no_progress else None, f"sync {args.source}")
        except SyncError as exc:
            print(f"chunkrag: {exc}", file=sys.stderr)
            return 2
        except passing as exc:
            if args.every is None:
                raise
            print(f"chunkrag: this pass failed: {exc}; next one in {args.every:g} s", file=sys.stderr, flush=True)
            time.sleep(args.every)
            continue
        if args.json:
            print(sync_report_json(report), flush=True)
        else:
            print_sync_report(report, sys.stdout)
        if args.every is None:
            return 0 if report.ok else 1
        time.sleep(args.every)


def _with_progress(one_pass, progress: bool | None, desc: str):
    """``one_pass(on_page)`` with a bar of the source documents it reads, page
    by page (a resumed pass counts from where it goes on); ``progress`` as
    `ingest_pipeline.pipeline.progress_bar` takes it."""
    from ingest_pipeline.pipeline import progress_bar

    bar = progress_bar(progress, desc=desc)
    shown = 0

    def on_page(totals) -> None:
        nonlocal shown
        bar.update(totals.read - shown)
        shown = totals.read

    try:
        return one_pass(on_page)
    finally:
        bar.close()


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
    backend = _backend(settings)
    resolved = filter_options_from_args(args, "search")
    if _post_searches(args, settings, backend, resolved):
        return _post_search(args, settings, backend, resolved, args.query)
    retriever = HybridRetriever(backend, make_embedder(settings.embedder), settings.index, settings.retrieval)
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
    from chunkrag_cli.output import ask_json, print_ask
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_filter.judging import judge_in_threads
    from search_extension.ask import DEFAULT_CANDIDATES, ask
    from search_extension.retriever import HybridRetriever

    settings = _settings(args)
    resolved = filter_options_from_args(args, "ask")
    backend = _backend(settings)
    if _post_searches(args, settings, backend, resolved):
        model = make_chat(settings.chat)
        judge_many = judge_in_threads(model, threads=settings.chat.parallel, model_name=settings.chat.model)
        return _post_search(args, settings, backend, resolved, args.question, model=model, judge_many=judge_many)
    retriever = HybridRetriever(backend, make_embedder(settings.embedder), settings.index, settings.retrieval)
    result = ask(
        args.question,
        retriever=retriever,
        model=make_chat(settings.chat),
        options=resolved.filter,
        candidates=resolved.candidates or DEFAULT_CANDIDATES,
        parallel=settings.chat.parallel,
        model_name=settings.chat.model,
        mode=resolved.mode,
        segments=resolved.segments,
        ensemble=ensemble_scales(resolved, settings),
    )
    if args.json:
        print(ask_json(result, settings.index))
    else:
        print_ask(result, sys.stdout)
    return 0


def _post_searches(args: argparse.Namespace, settings: Settings, backend, options) -> bool:
    """Whether ``search`` / ``ask`` post-search, as the gateway decides:
    ``--mode post_search``, a body of one's own, or (``auto``) an index
    expression whose concrete indices are not all chunk indices."""
    if options.target == "post_search" or args.body or args.fields:
        return True
    if options.target != "auto":
        return False
    from search_extension.post_searcher import PostSearcher
    from search_extension.routing import POST_SEARCH

    return PostSearcher(settings, lambda: None).route(backend, settings.index, options).way == POST_SEARCH


def _post_search(
    args: argparse.Namespace, settings: Settings, backend, options, text: str, *, model=None, judge_many=None
) -> int:
    """Search ``settings.index`` with ``--body`` (or a ``multi_match`` of
    ``text`` over its text fields), then the filter over the passages of
    its hits: the gateway's post-search, through the backend."""
    from chunkrag_cli.output import print_post_search
    from chunkrag_core.providers import make_embedder
    from chunkrag_gateway.dialect import query_text
    from search_extension.post_search_response import post_search_response
    from search_extension.post_searcher import PostSearcher

    if args.fields:
        fields = tuple(name.strip() for name in args.fields.split(",") if name.strip())
        options = dataclasses.replace(
            options,
            post_search=dataclasses.replace(options.post_search, fields=fields),
            post_search_given=(*options.post_search_given, "fields"),
        )
    searcher = PostSearcher(settings, lambda: make_embedder(settings.embedder))
    # The index expression without the companions a wildcard of it reached.
    index = searcher.route(backend, settings.index, dataclasses.replace(options, target="post_search")).target
    searcher.check_fields(backend, index, options)
    if args.body:
        body = json.loads(Path(args.body).read_text(encoding="utf-8"))
        body = {key: value for key, value in body.items() if key != "ext"}
        text = options.query or query_text(body.get("query")) or text
    else:
        body = searcher.default_body(backend, index, options.query or text, options, args.size or 10)
        filters = [json.loads(raw) for raw in getattr(args, "filter", None) or ()]
        if filters:  # `search --filter`: the clauses restrict the hits, as on a chunk index
            body = {**body, "query": {"bool": {"must": body["query"], "filter": filters}}}
    response = backend.search(index, body)
    result = searcher.filter(backend, response, options.query or text, options, model=model, judge_many=judge_many)
    payload = post_search_response(response, result, options.post_search)
    if args.json:
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print_post_search(payload, sys.stdout)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from chunkrag_gateway import create_app
    from chunkrag_gateway.allocator import fix_mmap_threshold, limit_malloc_arenas
    from chunkrag_gateway.server import uvicorn_options

    # Before any thread starts: RSS stays flat under load (allocator.py).
    limit_malloc_arenas()
    fix_mmap_threshold()
    settings = Settings.from_env()
    gateway = dataclasses.replace(
        settings.gateway, host=args.host or settings.gateway.host, port=args.port or settings.gateway.port
    )
    from chunkrag_core import tracing

    # Traces only when CHUNKRAG_OTEL_EXPORTER names an exporter.
    tracing.configure_from_env(service_name="chunkrag-gateway")
    if args.access_log or gateway.access_log:
        from chunkrag_gateway.telemetry import configure_access_log

        configure_access_log()
    app = create_app(dataclasses.replace(settings, gateway=gateway))
    # HTTPS with CHUNKRAG_GATEWAY_SSL_CERTFILE and _KEYFILE. uvicorn's own
    # access log stays off: the gateway writes its JSON lines instead.
    uvicorn.run(
        app,
        host=gateway.host,
        port=gateway.port,
        access_log=False,
        **uvicorn_options(gateway, app.state.metrics),
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
    from chunkrag_eval.report import format_baselines, print_outcome, write_report
    from chunkrag_eval.runner import evaluate
    from chunkrag_filter.pipeline import resolve_calibration

    settings = _settings(args)
    if args.format in ("wikiqa", "healthver", "climate_fever"):
        return _eval_sentences(args, settings)
    if args.open_corpus:
        from chunkrag_eval.answer_table import limit_for, parse_limits

        fmt, items, bad = read_items(args.file, args.format, args.pool)
        for record in bad:
            print(f"skipped line {record.line}: {record.reason}", file=sys.stderr)
        start = limit_for(parse_limits(args.start), fmt) or 0
        items = items[start : start + args.limit if args.limit is not None else None]
        answered = (args.answer_limit or len(items)) if args.generate else 0
        return _open_corpus(args, settings, {fmt: items}, {fmt: answered}, {fmt: args.judge_limit}, files=[args.file])
    resolved = filter_options_from_args(args, "eval")
    ensemble = ensemble_scales(resolved, settings)
    if ensemble is not None:
        # The pools are indexed here, so at the scales ensembled.
        settings = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=ensemble))
    fmt, items, bad = read_items(args.file, args.format, args.pool, args.limit)
    for record in bad:
        print(f"skipped line {record.line}: {record.reason}", file=sys.stderr)
    if args.generate_baselines and not args.generate:
        print("--generate-baselines needs --generate", file=sys.stderr)
        return 2
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
        generate_baselines=args.generate_baselines,
        on_question=lambda outcome: print_outcome(outcome, sys.stderr),
        segments=resolved.segments,
        ensemble=ensemble,
    )
    # Only what ran is named: no judging method, place or model when no
    # judge ran, and the chat model only when it was called (to judge, to
    # choose the threshold, or to write the answers).
    judged = options.judge_top != 0
    model_called = judged or options.threshold == "llm" or args.generate
    summary = {
        **report.summary(),
        "skipped_records": len(bad),
        "options": {
            "judged": judged,
            "method": options.scoring.method if judged else None,
            "orders": options.scoring.orders if judged else None,
            "judge_top": options.judge_top,
            "calibrated": options.calibration is not None,
            "prior_weight": options.prior_weight,
            "threshold": options.threshold,
            "fixed_threshold": resolve_calibration(options)[1] if options.threshold in ("fixed", "relative") else None,
            "fallback": options.fallback,
            "fallback_k": options.fallback_k,
            "redundancy": options.redundancy_threshold is not None,
            "judge": (args.judge or settings.workers.judge) if judged else None,
            "model": settings.chat.model if model_called else None,
            "generated": args.generate,
            "ensemble_scales": list(ensemble) if ensemble is not None else None,
        },
    }
    if args.out:
        write_report(args.out, summary, report)
    if args.plots:
        from chunkrag_eval.plots import write_plots

        for path in write_plots(
            report, args.plots, options=summary["options"], on_note=lambda note: print(note, file=sys.stderr)
        ):
            print(f"wrote {path}", file=sys.stderr)
    baselines = format_baselines(summary)
    if baselines:
        print(baselines, file=sys.stderr)
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
        progress=progress_printer(sys.stderr, "items judged"),
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
    if args.open_corpus:
        limits, judge_limits = parse_limits(args.limit), parse_limits(args.judge_limit)
        starts = parse_limits(args.start)
        datasets = {}
        for path in args.file:
            fmt, items, bad = read_items(path, "auto", "ambiguous")
            for record in bad:
                print(f"{path}: skipped line {record.line}: {record.reason}", file=sys.stderr)
            start = limit_for(starts, fmt) or 0
            limit = limit_for(limits, fmt)
            datasets[fmt] = items[start : start + limit if limit is not None else None]
        try:
            answer_limits = _answer_limits(args.answer_limit)
        except ValueError as exc:
            print(f"chunkrag: --answer-limit: {exc}", file=sys.stderr)
            return 2
        return _open_corpus(
            args,
            settings,
            datasets,
            {
                **{name: limit_for(answer_limits, name) or len(items) for name, items in datasets.items()},
                **{name: n for name, n in answer_limits.items() if ":" in name},
            }
            if answer_limits.get("*") != 0
            else {},
            {name: limit_for(judge_limits, name) or 0 for name in datasets},
            files=args.file,
        )
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


def _answer_limits(text: str | None) -> dict[str, int]:
    """``--answer-limit``: as ``--limit`` (N, or SET=N), and 0 for none answered."""
    from chunkrag_eval.answer_table import parse_limits

    if text is not None and text.strip() == "0":
        return {"*": 0}
    return parse_limits(text)


def _open_corpus(
    args: argparse.Namespace,
    settings: Settings,
    datasets: dict,
    answer_limits: dict[str, int],
    judge_limits: dict[str, int],
    files: Sequence[str],
) -> int:
    """The open-corpus table of `eval --open-corpus` and `table --open-corpus`."""
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_eval.answer_table import GenerationCache
    from chunkrag_eval.datasets import EvalDataError
    from chunkrag_eval.open_corpus import (
        build_corpus,
        ensure_corpus_index,
        eval_root,
        index_name,
        parse_distractors,
    )
    from chunkrag_eval.open_eval import outcome_json, result_text, row_json, run_context, run_open, table_markdown
    from chunkrag_eval.open_rows import rows_named
    from chunkrag_eval.unanswerable import parse_kinds
    from local_services.llm_server import DEFAULT_CTX
    from search_extension.retriever import HybridRetriever

    context = run_context(["chunkrag", *sys.argv[1:]])
    try:
        sizes = tuple(int(n) for n in args.sizes.split(",") if n.strip())
        answer_sizes = tuple(int(n) for n in args.answer_sizes.split(",")) if args.answer_sizes else None
        rows = rows_named([r.strip() for r in args.open_rows.split(",") if r.strip()] if args.open_rows else None)
        answer_rows = [r.strip() for r in args.answer_rows.split(",") if r.strip()] if args.answer_rows else None
        distractors = parse_distractors(args.distractors)
        kinds = parse_kinds(args.unanswerable)
    except ValueError as exc:
        print(f"chunkrag: {exc}", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1:
        print("chunkrag: --sizes takes positive N, e.g. 10,20,40", file=sys.stderr)
        return 2
    root = eval_root()
    try:
        corpus = build_corpus(files, root, distractors)
        asked, made = _asked(datasets, kinds, corpus, root)
    except EvalDataError as exc:
        print(f"chunkrag: {exc}", file=sys.stderr)
        return 2
    client, embedder = _backend(settings), make_embedder(settings.embedder)
    index = index_name(corpus.documents, settings)
    print(f"open corpus: {len(corpus.documents)} documents {dict(corpus.sources)} in {index}", file=sys.stderr)
    report = ensure_corpus_index(corpus, client=client, embedder=embedder, settings=settings, index=index)
    print(
        f"open corpus: {report.documents - report.unchanged} documents ingested, {report.unchanged} unchanged, "
        f"{report.seconds:.0f} s",
        file=sys.stderr,
    )
    cache = (
        GenerationCache(args.cache) if getattr(args, "cache", None) else GenerationCache(".cache/generations.sqlite")
    )
    run = run_open(
        asked,
        retriever=HybridRetriever(client, embedder, index, settings.retrieval),
        model=make_chat(settings.chat),
        rows=rows,
        sizes=sizes,
        model_name=settings.chat.model,
        cache=cache,
        generate_limits=answer_limits,
        generate_sizes=answer_sizes,
        generate_rows=answer_rows,
        judge_limits=judge_limits,
        cosine_threshold=args.cosine_threshold,
        context_tokens=DEFAULT_CTX,
        parallel=settings.chat.parallel,
        on_progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    markdown = table_markdown(run)
    payload = {
        **context,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "model": settings.chat.model if any(answer_limits.values()) or any(judge_limits.values()) else None,
        "index": index,
        "corpus": {
            "documents": len(corpus.documents),
            "sources": dict(corpus.sources),
            "chunks": client.count(index),
            "files": list(corpus.files),
        },
        "unanswerable": made,
        "sizes": list(sizes),
        "rows": {r.name: row_json(r) for r in run.rows},
        "skipped_rows": dict(run.skipped_rows),
        "cosine_threshold": run.cosine_threshold,
        "notes": dict(run.notes),
        "default_choice": run.default_choice(),
        "summary": run.summary(),
        "selective_answering": run.selective(),
        "questions": [outcome_json(o) for o in run.outcomes],
    }
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result_text(payload), encoding="utf-8")
        out.with_suffix(".md").write_text(markdown, encoding="utf-8")
        print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    print(markdown)
    return 0


def _asked(datasets: dict, kinds: dict, corpus, root: Path) -> tuple[list, dict]:
    """Every question of the open corpus and the view it is asked of: the
    answerable ones, then each unanswerable kind asked for, and how each
    kind was made (counts, rules) for the result file."""
    from chunkrag_eval import unanswerable as u
    from chunkrag_eval.datasets import EvalDataError
    from chunkrag_eval.open_corpus import DISTRACTOR_FILES

    asked = [q for name, items in datasets.items() for q in u.answerable(name, items)]
    made: dict = {"kinds": {}, "doc": u.__doc__.split("\n\n", 1)[1].strip()}

    def window(items: list, kind: str) -> list:
        first, count = kinds[kind]
        return items[first : first + count if count is not None else None]

    if "absent" in kinds:
        if "popqa" not in datasets:
            raise EvalDataError("--unanswerable absent asks PopQA questions: read a popqa file")
        questions, counts = u.absent("popqa", window(datasets["popqa"], "absent"), u.NameIndex(corpus.documents))
        asked += questions
        made["kinds"]["popqa absent"] = counts
    if "unanswerable" in kinds:
        if "squad" not in corpus.sources:
            raise EvalDataError(
                "--unanswerable unanswerable asks SQuAD's questions of its paragraphs: keep squad in --distractors"
            )
        first, count = kinds["unanswerable"]
        questions, counts = u.squad_unanswerable(root / DISTRACTOR_FILES["squad"], first, count or 10**9)
        asked += questions
        made["kinds"]["squad unanswerable"] = counts
    if "off_topic" in kinds:
        for name in [n for n in datasets if n in u.OFF_TOPIC_VIEW]:
            questions = u.off_topic(name, window(datasets[name], "off_topic"))
            asked += questions
            made["kinds"][f"{name} off_topic"] = {
                "kept": len(questions),
                "view": f"{u.OFF_TOPIC_VIEW[name]} pools only",
            }
    return asked, made


def cmd_calibrate(args: argparse.Namespace) -> int:
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_eval.calibrate import (
        TARGET,
        LabelledDataError,
        answer_grader,
        calibrate,
        few_questions_warning,
        read_labelled_jsonl,
    )
    from chunkrag_eval.labelled import read_labelled

    settings = _settings(args)
    out = args.out or settings.calibration_file
    if not out:
        print("name the file to write: --out PATH (or set CHUNKRAG_CALIBRATION_FILE)", file=sys.stderr)
        return 2
    if not args.labelled and not args.eval_set:
        print("give labelled questions: --labelled FILE and/or --eval-set NAME", file=sys.stderr)
        return 2
    target = _calibration_target(args.target)
    if target is None:
        print(f"--target must be a number in (0, 1] or 'accuracy', got {args.target}", file=sys.stderr)
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
    if target == "accuracy" and not any(query.answers for query in queries):
        print("--target accuracy needs labelled questions with answers (not only relevant sentences)", file=sys.stderr)
        return 2
    warning = few_questions_warning(len(queries))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
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
        target=target if isinstance(target, float) else TARGET,
        grade=_counted(answer_grader(make_chat(settings.chat)), sys.stderr) if target == "accuracy" else None,
        about={
            "command": "chunkrag calibrate " + " ".join(sys.argv[2:]),
            "date": time.strftime("%Y-%m-%d"),
            "chat_model": settings.chat.model if args.judge or target == "accuracy" else None,
        },
        progress=progress_printer(sys.stderr, "questions collected"),
    )
    print(json.dumps(result, indent=2))
    if os.path.abspath(out) != os.path.abspath(settings.calibration_file or "/"):
        print(f"the filter reads it with CHUNKRAG_CALIBRATION_FILE={result['file']}", file=sys.stderr)
    return 0


def _counted(grade, stream: TextIO):
    """The accuracy target's grader, saying on ``stream`` how many answers
    it has had written (one line each: the count is not known ahead)."""
    written = 0

    def counted(question, passages, answers) -> bool:
        nonlocal written
        right = grade(question, passages, answers)
        written += 1
        print(f"answers written {written} ({'right' if right else 'wrong'})", file=stream, flush=True)
        return right

    return counted


def _calibration_target(text: str) -> float | str | None:
    """``--target``: "accuracy", or a share of the answers in (0, 1]; None
    for anything else."""
    if text.strip().lower() == "accuracy":
        return "accuracy"
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= 1 else None


def progress_printer(stream: TextIO, what: str) -> Callable[[int, int], None]:
    """Progress as "<what> n/total": on a terminal one line rewritten in
    place and ended when the count is done; elsewhere (a pipe, a log file)
    one line each, so counts never run together."""

    def show(n: int, total: int) -> None:
        if stream.isatty():
            print(f"\r{what} {n}/{total}", end="\n" if n >= total else "", file=stream, flush=True)
        else:
            print(f"{what} {n}/{total}", file=stream, flush=True)

    return show


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
    from chunkrag_core.redaction import redact_url
    from chunkrag_gateway import create_app
    from chunkrag_gateway.server import serve_in_thread
    from local_services.celery_workers import CeleryWorkers

    settings = dataclasses.replace(settings, workers=dataclasses.replace(settings.workers, judge="celery"))
    # The default filter scores from the retrieval signals alone (no judge
    # call); the demo turns the LLM judge on to show it working on a worker.
    print(
        "\nthe chunk filter with the LLM judge on (ext.chunkrag.judge_top), through the gateway and a Celery worker, "
        f"with {settings.chat.model} at {redact_url(settings.chat.base_url or 'OpenAI')}:"
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
