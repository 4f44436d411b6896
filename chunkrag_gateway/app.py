"""The HTTP routes. Each one decodes the request, calls one library function
and encodes what came back; errors leave in Elasticsearch's shape.

What the gateway does not own (every path but /v1/*, /openapi.json and a
``_search`` carrying ext.chunkrag) is forwarded by the pass-through lane
(``lane.py``) before it reaches these routes.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import time
from contextlib import asynccontextmanager
from typing import Any, Mapping
from urllib.parse import quote

import anyio
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from chunkrag_core import cancellation
from chunkrag_core.cancellation import Cancellation, Cancelled
from chunkrag_core.engines.profile import engine_of
from chunkrag_core.settings import Settings
from chunkrag_gateway import errors, model_turns, playground, telemetry
from chunkrag_gateway.aliases import ForeignAliases
from chunkrag_gateway.allocator import TrimWhenIdle
from chunkrag_gateway.body_depth import BodyDepth
from chunkrag_gateway.body_limit import BodyLimit
from chunkrag_gateway.body_reads import MAX_BODY_DEPTH
from chunkrag_gateway.cluster_internals import error_without_internals
from chunkrag_gateway.cluster_users import ClusterUsers
from chunkrag_gateway.deadline import DeadlinePassed, finish_or_stop
from chunkrag_gateway.dialect import (
    ChunkragSearch,
    OptionError,
    ask_response,
    check_pit_search,
    parse_ask,
    parse_post_search,
    parse_search,
    refuse_pit_with_index,
    refuse_post_search_options,
    search_options,
    search_response,
)
from chunkrag_gateway.edges import Edges, JudgeManyFactory
from chunkrag_gateway.filter_processes import FilterProcesses, check_niceness
from chunkrag_gateway.filter_threads import FilterThreads
from chunkrag_gateway.guard import Guard
from chunkrag_gateway.identity import (
    REFUSAL_WORDS,
    Caller,
    check_indices,
    scrub_security_errors,
    service_refusal,
)
from chunkrag_gateway.lane import GATEWAY_ROUTES, PassthroughLane, raw_path_of, request_target
from chunkrag_gateway.limits import CallerSlots, FilteredQueue, RateLimiter
from chunkrag_gateway.models import (
    FILTERED_STATUSES,
    PUBLIC_STATUSES,
    AskRequest,
    AskResponse,
    error_responses,
    gateway_openapi,
    search_openapi,
)
from chunkrag_gateway.passthrough import HttpTransport
from chunkrag_gateway.policy import has_chunkrag_ext, parse_classes
from chunkrag_gateway.responses import error_response, es_json
from chunkrag_gateway.shared_state import make_stores, shared_searches
from chunkrag_gateway.start_check import check_settings
from search_extension.options import first_error
from search_extension.post_search import hits_of
from search_extension.post_search_response import post_search_response
from search_extension.routing import POST_SEARCH, Route

log = logging.getLogger(__name__)

# What a post-search sends the cluster with the caller's body: JSON in, JSON out.
SEARCH_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json")]


def create_app(
    settings: Settings | None = None,
    *,
    es=None,
    model=None,
    embedder=None,
    judge_many_factory: JudgeManyFactory | None = None,
    http_transport: HttpTransport | None = None,
    passage_source=None,
    relevance_model=None,
) -> FastAPI:
    """The gateway app. ``es`` (a search backend), ``model`` (a
    ChatModel), ``embedder``, ``judge_many_factory`` (budget_s -> JudgeMany)
    and ``http_transport`` (what the pass-through sends through, see
    ``passthrough.HttpTransport``) and ``passage_source`` (where post-search
    finds a hit's passages, ``passages.PassageSource``) and ``relevance_model``
    (the project's relevance model in this process) replace what would
    otherwise be made from ``settings`` on first use."""
    settings = settings or Settings.from_env()
    limits = settings.gateway
    engine = engine_of(settings)
    # Misconfigured security fails here, at start, not on the first request.
    authenticator = check_settings(settings)
    classes = parse_classes(limits.passthrough)
    # Scroll/PIT bindings and rate buckets: this process's, or every instance's (Redis).
    contexts, rate_limiter, shared = make_stores(settings, RateLimiter(limits.rate_per_s, limits.rate_burst))
    # Filtered searches running at once per caller (this instance's), and
    # each caller's searches counted (in every instance, with shared state).
    per_caller = CallerSlots(limits.max_filtered_per_caller, limits.retry_after_s, shared_searches(settings, shared))
    # The model-stage places, callers without a search of their own served
    # first; when the last ends, the memory it freed goes back soon after.
    queue = FilteredQueue(
        limits.max_filtered,
        limits.max_queued,
        limits.retry_after_s,
        reserved=limits.reserved_filtered,
        busy=per_caller.busy,
        when_idle=TrimWhenIdle(lambda: queue.in_use == 0),
    )
    edges = Edges(
        settings,
        es=es,
        model=model,
        embedder=embedder,
        judge_many_factory=judge_many_factory,
        http_transport=http_transport,
        shared_redis=shared,
        passage_source=passage_source,
        relevance_model=relevance_model,
    )
    # Filtered searches in processes of their own when asked for, unless
    # parts were handed in: those live in this process, so the searches
    # run in its threads. The processes start with the first searches.
    check_niceness(limits.filter_nice)
    handed_in = any(part is not None for part in (es, model, embedder, judge_many_factory, relevance_model))
    processes = (
        FilterProcesses(settings, limits.max_filtered, limits.filter_nice)
        if limits.filter_processes and not handed_in
        else None
    )
    asking = processes.ask if processes is not None else edges.ask
    # The library calls of filtered searches, at the same lower priority.
    # With the processes, these threads only hand searches to them and wait
    # (post-search aside): they keep the gateway's priority, and so does the
    # pool's own thread they start, which must notice a dead process at once.
    threads = FilterThreads(0, busy_nice=0) if processes is not None else FilterThreads(limits.filter_nice)
    metrics = telemetry.GatewayMetrics()
    metrics.watch(telemetry.LiveState(queue, model_turns=edges.model_turns, **edges.live_probes()))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if limits.auth == "service" and not engine.derived_keys:
            log.warning(
                "service mode on %s: gateway API keys are limited by the gateway's own checks only "
                "(the cluster cannot be given a per-key limit); see docs/security.md",
                engine.product,
            )
        # The models load beside the first requests; /v1/health says when they are read.
        edges.start_loading_models()
        served = None
        if limits.metrics_port:
            served = telemetry.serve_metrics(metrics, limits.metrics_host, limits.metrics_port)
            log.info("metrics on http://%s:%s/metrics", limits.metrics_host, served.server_address[1])
        try:
            yield
        finally:
            if served is not None:
                await anyio.to_thread.run_sync(served.close)
            if shared is not None:
                await shared.aclose()
            if processes is not None:
                await anyio.to_thread.run_sync(processes.close)
            threads.close()
            await edges.aclose()

    # /docs would shadow an index named "docs": Swagger UI lives under /v1.
    app = FastAPI(
        title="chunkrag gateway",
        version="0.1.0",
        lifespan=lifespan,
        docs_url="/v1/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        # FastAPI's own OpenTelemetry spans and metrics: off. The gateway
        # makes its own server span (telemetry.py, with its own provider,
        # never the global one), and FastAPI asked on every request whether
        # a global provider had been set: ~15 us of CPU per request.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        description=(
            "Elasticsearch-compatible search with ChunkRAG's LLM chunk filter: add `ext.chunkrag` to a "
            "`_search` body. Every other request is forwarded to Elasticsearch unchanged."
        ),
    )
    app.state.edges = edges
    app.state.filter_processes = processes
    app.state.filtered_queue = queue
    app.state.model_turns = edges.model_turns
    app.state.metrics = metrics
    app.openapi = functools.partial(gateway_openapi, app)
    # The last added runs first: the size limit guards everything, then the
    # guard (who, how often, which endpoint), then the lane, then the depth
    # check of the bodies FastAPI decodes itself.
    app.add_middleware(BodyDepth)
    aliases = (
        ForeignAliases(edges.passthrough.get_json)
        if limits.refuse_foreign_aliases and limits.auth == "service"
        else None
    )
    app.add_middleware(
        PassthroughLane,
        passthrough=edges.passthrough,
        contexts=contexts,
        aliases=aliases,
        point_in_time=engine.point_in_time,
        max_body_bytes=limits.max_body_bytes,
    )
    app.add_middleware(
        Guard,
        authenticator=authenticator,
        rate_limiter=rate_limiter,
        passthrough_classes=classes,
        users=ClusterUsers(edges.passthrough.ask_as, engine.whoami_path) if limits.auth == "forward" else None,
        point_in_time=engine.point_in_time,
    )
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_s)
    # Outermost: every request is counted and logged, refusals included.
    app.add_middleware(telemetry.Telemetry, metrics=metrics, own_routes=GATEWAY_ROUTES)
    _add_error_handlers(app)
    if limits.playground:  # static page + index list; its data comes from the routes below
        playground.mount(app, edges.passthrough)

    @app.get(
        "/v1/health",
        summary="Elasticsearch, Redis and (with judge=celery) the workers",
        responses=error_responses(PUBLIC_STATUSES),
    )
    async def health() -> Response:
        report = await edges.health()
        return es_json(report, 200 if report["ok"] else 503)

    @app.post(
        "/v1/ask",
        response_model=AskResponse,
        summary=(
            "Retrieve, keep the relevant chunks (the gate, then calibrated scores; the LLM judge on request), answer"
        ),
        responses=error_responses(FILTERED_STATUSES),
    )
    async def ask(request: AskRequest, http: Request) -> Any:
        caller = _caller(http)
        telemetry.note(http.scope, mode="ask")
        _refuse_non_finite(request.model_dump(exclude_unset=True), "body")
        check_indices(caller, tuple(request.index.split(",")), what="/v1/ask")
        if aliases is not None:
            await aliases.check(caller, tuple(request.index.split(",")))
        decoded = parse_ask(
            request.question,
            request.options,
            max_candidates=limits.max_candidates,
            max_query_chars=limits.max_query_chars,
            max_budget_s=settings.max_budget_s,
            max_work=limits.max_work,
            default_gate=limits.gate or None,
        )
        async with per_caller.slot(caller.identity):
            result = await _call(edges, queue, threads, request.index, decoded, caller, asking, http.receive)
        telemetry.note(http.scope, result=result)
        payload = ask_response(result, index=request.index)
        return {**payload, "shards": _shards_shown(payload["shards"], caller)}

    searched = "Elasticsearch's search response: the kept chunks as hits, the filter's view under `chunkrag`"

    @app.post(
        "/{index}/_search",
        summary="Elasticsearch _search; with ext.chunkrag, the relevant chunks or passages kept by the chunk filter",
        openapi_extra=search_openapi(),
        responses={200: {"description": searched}, **error_responses(FILTERED_STATUSES)},
    )
    @app.get("/{index}/_search", include_in_schema=False)
    async def search(index: str, request: Request) -> Response:
        return await searched(request, index)

    # A search without an index in the path reaches this route only with
    # ext.chunkrag (the lane forwards every other): it pages through a point
    # in time, whose id decides the indices.
    @app.post("/_search", include_in_schema=False)
    @app.get("/_search", include_in_schema=False)
    async def search_through_pit(request: Request) -> Response:
        return await searched(request, None)

    async def searched(request: Request, index: str | None) -> Response:
        body = await request.body()
        decoded = _json_body(body)
        caller = _caller(request)
        # "chunkrag" only a word in the query: the cluster's search. A block
        # that is there but not an object (null included) is refused naming it.
        if not has_chunkrag_ext(decoded):
            telemetry.note(request.scope, mode="passthrough")
            return await edges.passthrough.forward(
                request.method, request_target(request.scope), request.scope["headers"], body, caller
            )
        if request.url.query:
            raise errors.bad_request(
                f"query-string parameters are not supported with ext.chunkrag, got [{request.url.query}]; "
                "put options in ext.chunkrag"
            )
        telemetry.note(request.scope, mode="filtered")
        _refuse_non_finite(decoded, "body")
        options = search_options(
            decoded,
            max_candidates=limits.max_candidates,
            max_budget_s=settings.max_budget_s,
            default_gate=limits.gate or None,
        )
        if index is None:
            check_pit_search(decoded, options)
            route = Route(POST_SEARCH, "")
        else:
            refuse_pit_with_index(decoded)
            keys = tuple(decoded)
            route = await _run(
                edges,
                queue,
                threads,
                options,
                caller,
                edges.route,
                index,
                options,
                keys,
                queued=False,
                receive=request.receive,
            )
        if route.way == POST_SEARCH:
            async with per_caller.slot(caller.identity):
                return await post_searched(
                    edges,
                    queue,
                    threads,
                    request,
                    decoded,
                    options,
                    caller,
                    index=index,
                    route=route,
                    contexts=contexts,
                )
        refuse_post_search_options(options)
        started = time.perf_counter()
        parsed = parse_search(
            decoded,
            max_candidates=limits.max_candidates,
            max_query_chars=limits.max_query_chars,
            max_budget_s=settings.max_budget_s,
            max_work=limits.max_work,
            default_gate=limits.gate or None,
        )
        async with per_caller.slot(caller.identity):
            result = await _call(edges, queue, threads, route.target, parsed, caller, asking, request.receive)
        telemetry.note(request.scope, result=result)
        took_ms = (time.perf_counter() - started) * 1000
        payload = search_response(
            result, index=index, size=parsed.size, include_dropped=parsed.options.include_dropped, took_ms=took_ms
        )
        payload = {**payload, "_shards": _shards_shown(payload["_shards"], caller)}
        return es_json(payload, 200, request.headers.get("accept", ""))

    return app


def _shards_shown(shards: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """The shard tally as the caller may see it: in service mode a shard
    refused for security names the service account, so its reason is the
    gateway's refusal, as on the pass-through."""
    if caller.key is None or not shards.get("failures"):
        return shards
    shown = copy.deepcopy(shards)
    scrub_security_errors(shown, service_refusal(caller).reason)
    return shown


def _caller(request: Request) -> Caller:
    return getattr(request.state, "caller", None) or Caller()


async def _call(
    edges: Edges,
    queue: FilteredQueue,
    threads: FilterThreads,
    index: str,
    decoded: ChunkragSearch,
    caller: Caller,
    asking,
    receive,
):
    """The library call (``asking``: ``Edges.ask``, or ``FilterProcesses.ask``
    which runs it in a filter process), see :func:`_run`."""
    return await _run(
        edges,
        queue,
        threads,
        decoded.options,
        caller,
        functools.partial(
            asking, index, decoded.text, decoded.options, filters=decoded.filters, candidates=decoded.candidates
        ),
        receive=receive,
    )


async def _run(
    edges: Edges,
    queue: FilteredQueue,
    threads: FilterThreads,
    options,
    caller: Caller,
    blocking,
    *args,
    queued: bool = True,
    receive=None,
):
    """``blocking(*args, caller=bound caller)`` on a filter thread, within a
    hard deadline: the judging budget plus the model calls around it
    (rewrite, answer) and the search. Past it the caller gets 504 and the
    call is stopped at its next check, between two batches (the request's
    cancellation is bound around it: ``chunkrag_core.cancellation``); so is
    a call whose client goes away (``receive``: the request's ASGI receive,
    read for the disconnect; ``deadline.py``). Model-stage queries first
    take a place in the bounded queue (429 when it is full), which they
    keep until their thread is free; the deadline counts the wait. Failures
    leave as the gateway's errors (service mode: a refusal names the
    gateway key, not the cluster's user)."""
    settings = edges.settings
    deadline = settings.es_request_timeout_s
    if options.stages:
        deadline += edges.budget_s(options) + settings.chat.timeout_s * (2 if options.rewrite else 1)
    # Service mode: the library searches with the key's derived key too.
    caller = await edges.passthrough.bind(caller)
    token = Cancellation.within(deadline)

    def call(low: bool = False):
        # Its relevance-model batches take their turns as this caller's, at its priority (model_turns.py).
        bound = functools.partial(cancellation.run_bound, token, blocking, *args, caller=caller)
        return functools.partial(model_turns.run_as, caller.identity, low, bound)

    async def work():
        if not (options.stages and queued):
            return await threads.run(call())
        heavy = reads_every_candidate(options)
        async with queue.slot(caller.identity, heavy=heavy):
            # A busy caller's search, or a heavy one, yields the CPU to the others'.
            low = heavy or queue.busy(caller.identity, holding=True)
            return await threads.run(call(low), busy=low)

    late = f"the request did not finish within {deadline:g} s (budget_s plus the model and search timeouts)"
    try:
        return await finish_or_stop(work(), token, deadline, receive)
    except errors.GatewayError:
        raise
    except (DeadlinePassed, Cancelled):  # Cancelled: the work saw the deadline first
        raise errors.timed_out(late) from None
    except Exception as exc:
        error = errors.from_exception(exc)
        said = error.type + error.reason + (orjson.dumps(error.body).decode() if error.body else "")
        refused = error.status in (401, 403) or any(word in said for word in REFUSAL_WORDS)
        if caller.key is not None and refused:
            if error.status == 401:
                edges.passthrough.forget(caller)  # an invalidated derived key: make a new one next time
            raise service_refusal(caller, error.status) from exc
        if caller.key is not None:
            raise error_without_internals(error) from exc
        raise error from exc


def reads_every_candidate(options) -> bool:
    """Whether a search has the relevance model read every candidate
    (``relevance: crossencoder``) or every kept one (``rerank: local``), or
    in post-search their passages: many batches, not the gate's few."""
    return options.stages and (options.filter.relevance == "crossencoder" or options.filter.rerank == "local")


async def post_searched(
    edges: Edges,
    queue: FilteredQueue,
    threads: FilterThreads,
    request: Request,
    body: dict,
    options,
    caller: Caller,
    *,
    index: str | None,
    route: Route,
    contexts,
) -> Response:
    """Post-search: the caller's body without ``ext`` goes to the cluster as
    a pass-through search does (the caller's credentials, or in service
    mode the key's derived ones; the lane has already applied the strict
    second line to this very body), to ``route.target`` (the path's
    expression, with the companions a wildcard reached excluded), or with
    no index when it pages through a point in time (``index`` None); then
    the filter runs over the passages of the hits it returned. A failed
    search is the cluster's answer as is. In service mode the point in
    time's id the answer hands out is bound to the caller's key, as a
    pass-through search's is."""
    limits = edges.settings.gateway
    wanted = parse_post_search(body, options, max_query_chars=limits.max_query_chars, max_work=limits.max_work)
    if index is not None:
        await _run(
            edges,
            queue,
            threads,
            options,
            caller,
            edges.check_post_search_fields,
            route.target,
            options,
            queued=False,
            receive=request.receive,
        )
    path = raw_path_of(request.scope) if index is None or route.target == index else search_path(route.target)
    answer = await edges.passthrough.forward("POST", path, SEARCH_HEADERS, orjson.dumps(wanted.body), caller)
    if answer.status_code != 200:
        return answer
    try:
        response = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        raise errors.unavailable("the cluster's search response could not be read") from None
    if caller.key is not None and isinstance(pit_id := response.get("pit_id"), str):
        await contexts.bind(caller.key.name, pit_id)
    if index is None and (held := hit_indices(response)):
        # Through a point in time the indices are the id's: named fields are
        # checked against those the hits came from.
        await _run(
            edges,
            queue,
            threads,
            options,
            caller,
            edges.check_post_search_fields,
            held,
            options,
            queued=False,
            receive=request.receive,
        )
    searching = functools.partial(edges.post_search, wanted.text, options, response)
    result = await _run(edges, queue, threads, options, caller, searching, receive=request.receive)
    payload = post_search_response(response, result, options.post_search)
    return es_json(payload, 200, request.headers.get("accept", ""))


def search_path(expression: str) -> str:
    """``/<expression>/_search``, each index name percent-encoded (a
    date-math name holds "/"), the list's commas and wildcards as they are."""
    return f"/{quote(expression, safe=',*')}/_search"


def hit_indices(response: Mapping[str, Any]) -> str:
    """The concrete indices a search answer's hits came from, as one expression."""
    return ",".join(sorted({str(hit["_index"]) for hit in hits_of(response) if hit.get("_index")}))


def _refuse_non_finite(value: Any, where: str) -> None:
    """JSON numbers too large for a double (1e309) decode as infinity, and
    Python's parser takes NaN and Infinity literals: no option means either.
    Nesting deeper than MAX_BODY_DEPTH is refused too. A walk with its own
    stack: a body may nest deeper than Python's recursion limit."""
    stack: list[tuple[Any, tuple | None, int]] = [(value, None, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise errors.bad_request(f"{_json_path(where, path)} is {item!r}: numbers must be finite")
        elif isinstance(item, (dict, list)):
            if depth >= MAX_BODY_DEPTH:
                raise errors.bad_request(
                    f"{_json_path(where, path)} nests deeper than the gateway's limit of {MAX_BODY_DEPTH} levels"
                )
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((child, (path, key), depth + 1) for key, child in pairs)


def _json_path(where: str, path: tuple | None) -> str:
    """``where`` followed by the keys of a (parent, key) chain: .key, [position]."""
    steps = []
    while path is not None:
        path, key = path
        steps.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return where + "".join(reversed(steps))


def _json_body(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise errors.parse_error(f"request body is not valid JSON: {exc}") from None


def _add_error_handlers(app: FastAPI) -> None:
    def accept(request: Request) -> str:
        return request.headers.get("accept", "")

    async def gateway_error(request: Request, exc: errors.GatewayError) -> Response:
        return error_response(exc, accept(request))

    async def option_error(request: Request, exc: OptionError) -> Response:
        return error_response(errors.bad_request(str(exc)), accept(request))

    async def http_error(request: Request, exc: HTTPException) -> Response:
        kind = {413: "content_too_long_exception", 408: "timeout_exception"}.get(exc.status_code, "http_exception")
        return error_response(errors.GatewayError(exc.status_code, kind, str(exc.detail)), accept(request))

    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        try:
            # A non-finite number is named as such, before any bound it breaks.
            _refuse_non_finite(exc.body, "body")
        except errors.GatewayError as refused:
            return error_response(refused, accept(request))
        problems = "; ".join(_describe(exc.errors(), exc.body))
        kind = (
            "parse_exception"
            if any(e.get("type") == "json_invalid" for e in exc.errors())
            else "illegal_argument_exception"
        )
        return error_response(errors.GatewayError(400, kind, problems), accept(request))

    app.add_exception_handler(errors.GatewayError, gateway_error)
    app.add_exception_handler(OptionError, option_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)


def _describe(errors: list[dict], body: Any) -> list[str]:
    """One line per problem; for the filter's options, the first one as
    ext.chunkrag would name it."""
    options = body.get("options") if isinstance(body, dict) else None
    problems, of_options = [], []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if loc[:2] == ("body", "options") and len(loc) > 2 and isinstance(options, dict):
            of_options.append({**error, "loc": loc[2:]})
        else:
            problems.append(_describe_one(error))
    if of_options:
        problems.append(first_error(options, of_options, where="options"))
    return problems


def _describe_one(error: dict) -> str:
    if error.get("type") == "json_invalid":
        position = next((part for part in error.get("loc", ()) if isinstance(part, int)), None)
        cause = (error.get("ctx") or {}).get("error", "JSON decode error")
        return f"request body is not valid JSON: {cause}" + (
            f" at character {position}" if position is not None else ""
        )
    where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
    return f"{where or 'body'}: {error.get('msg', 'invalid')}"
