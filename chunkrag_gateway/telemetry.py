"""What operations see of the gateway: Prometheus metrics and one JSON
access-log line per request.

The metrics live in a registry of the app's own (``GatewayMetrics``), made
with the app, never prometheus_client's global one: two apps in a process
(the tests, an embedding) count apart, and nothing is registered at import
time. They are served on a port of their own (``CHUNKRAG_GATEWAY_METRICS_PORT``,
``serve_metrics``), not under the callers' paths: every path of the callers'
port is an index name to the pass-through, and the metrics name callers'
classes and the gateway's load, which an operator exposes to a scraper, not
to whoever may search.

``Telemetry`` is the outermost middleware: it gives each request a record
(``RequestRecord``, in ``scope["state"]``) that the guard, the lane and the
routes fill in with one call each (``note``): the caller's identity, the
request's mode, the filter's result, why it was shed. When the response is
sent it counts the request and writes the log line. The filter library
knows nothing of this: its stage timings, calls and tokens are read from the
result it returns.

The log line (logger ``chunkrag.gateway.access``) holds the request id (the
caller's ``X-Opaque-Id``, else one made here, echoed in the response and
forwarded to the cluster so its own logs carry it), the caller's identity
class, the route as a template, the status, the mode and the timings. Never
a credential, a path's index or document names, a query string or body, nor
any document text: a route is ``/{index}/_search``, not the path.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import orjson

from chunkrag_core import tracing

ACCESS_LOGGER = "chunkrag.gateway.access"
access_log = logging.getLogger(ACCESS_LOGGER)
log = logging.getLogger("chunkrag.gateway")

# Where the record sits in the ASGI scope's state.
RECORD = "chunkrag.telemetry"
# The status counted and logged for a request whose client closed the
# connection before its body had arrived (nginx's "client closed request"):
# nobody was answered, and the gateway did nothing wrong.
CLIENT_CLOSED = 499
REQUEST_ID_HEADER = b"x-opaque-id"
# A caller's request id longer than this is cut (it goes into every log line).
MAX_REQUEST_ID_CHARS = 128
# Request latency buckets (seconds): pass-through answers in a few
# milliseconds, a filtered search in seconds, the longest up to the judging
# budget plus the model timeouts.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Filter stage buckets (seconds): a threshold takes microseconds, judging seconds.
STAGE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The queue depth and worker liveness are asked at scrape time, each within
# this; and a scrape within CACHED_S of the last reuses its answers (several
# Prometheus servers, or a dashboard refreshing, cost one look).
PROBE_TIMEOUT_S = 0.5
CACHED_S = 5.0

# Elasticsearch API names kept in a route template; any other "_" segment
# is "_other" (a label value per invented path would grow without bound).
KNOWN_APIS = frozenset(
    "_search _count _msearch _mapping _mappings _field_caps _pit _doc _create _update _source _bulk _mget "
    "_reindex _delete_by_query _update_by_query _explain _validate _termvectors _mtermvectors _settings "
    "_alias _aliases _refresh _flush _forcemerge _stats _segments _recovery _open _close _resolve _analyze "
    "_cat _cluster _nodes _tasks _security _ingest _snapshot _license _xpack _ilm _data_stream "
    "_index_template _component_template _async_search _knn_search _terms_enum _rank_eval _render _scripts "
    "_sql _query _eql _health_report _all _rollover _shrink _split _clone _disk_usage _plugins".split()
)
# Words after an API name that are part of it (``/_search/scroll``, ``/_mapping/field``).
KNOWN_WORDS = frozenset({"scroll", "field", "query", "index", "template"})
MAX_ROUTE_SEGMENTS = 4


@dataclass(slots=True)
class RequestRecord:
    """What the stages of one request tell the telemetry about it. Mutable:
    it is filled in as the request goes through, and read once at its end."""

    mode: str | None = None  # passthrough, filtered, ask, gateway
    identity: str | None = None  # the rate-limit identity (``Caller.identity``)
    shed: str | None = None  # why it was refused for load: rate, filtered, body_timeout
    result: Any = None  # the AskResult of a filtered search or ask


def note(scope, **facts: Any) -> None:
    """Tell the request's record ``facts`` (fields of RequestRecord). A
    request without a record (a stage used without the middleware) is left alone."""
    record = scope.get("state", {}).get(RECORD)
    if record is not None:
        for name, value in facts.items():
            setattr(record, name, value)


def identity_class(identity: str | None) -> str:
    """key, user, credentials, address or anonymous: never the credential,
    its hash or the address itself."""
    if not identity:
        return "none"
    kind = identity.split(":", 1)[0]
    return kind if kind in ("key", "user", "credentials", "address", "anonymous") else "other"


@functools.lru_cache(maxsize=4096)  # paths repeat (an index's _search), ids do not: bounded
def route_of(path: str, own_routes: frozenset[str] = frozenset()) -> str:
    """The route as a template of bounded variety: the gateway's own routes
    as they are, otherwise index and id segments replaced (``/{index}/_search``,
    ``/_search/scroll/{id}``) and unknown API names read as ``_other``."""
    if path in own_routes:
        return path
    parts = [part for part in path.split("/") if part]
    template = []
    for position, part in enumerate(parts[:MAX_ROUTE_SEGMENTS]):
        if part.startswith("_"):
            template.append(part if part in KNOWN_APIS else "_other")
        elif position > 0 and part in KNOWN_WORDS and template[-1].startswith("_"):
            template.append(part)
        else:
            template.append("{index}" if position == 0 else "{id}")
    if len(parts) > MAX_ROUTE_SEGMENTS:
        template.append("...")
    return "/" + "/".join(template)


class GatewayMetrics:
    """The gateway's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "chunkrag_gateway_requests",
            "Requests answered, by route template, status and mode "
            "(passthrough, filtered, ask, gateway; refused: before it was routed)",
            ["route", "status", "mode"],
            registry=registry,
        )
        self.latency = Histogram(
            "chunkrag_gateway_request_duration_seconds",
            "Time from the request's arrival to its response's end",
            ["route", "status", "mode"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.stages = Histogram(
            "chunkrag_gateway_filter_stage_duration_seconds",
            "Time of each stage of a filtered search or ask (embed, retrieval, redundancy, scoring, "
            "threshold, rerank, segments, answer, total), from the filter's result",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=registry,
        )
        self.chunks = Counter(
            "chunkrag_gateway_filter_chunks",
            "Candidate chunks, by the filter's decision",
            ["decision"],
            registry=registry,
        )
        self.judge_calls = Counter(
            "chunkrag_gateway_judge_calls", "Model calls made by the filter (judging and threshold)", registry=registry
        )
        self.judge_cached = Counter(
            "chunkrag_gateway_judge_cache_hits",
            "Judgements read from the score cache instead of the model",
            registry=registry,
        )
        self.judge_tokens = Counter(
            "chunkrag_gateway_judge_tokens", "Model tokens spent by the filter", ["kind"], registry=registry
        )
        self.judged = Counter(
            "chunkrag_gateway_judged",
            "Filtered queries by where their candidates were judged (workers, gateway, retrieval)",
            ["by"],
            registry=registry,
        )
        self.fallbacks = Counter(
            "chunkrag_gateway_judge_fallbacks",
            "Filtered queries judged elsewhere than meant (to: gateway threads, or retrieval signals alone)",
            ["to"],
            registry=registry,
        )
        self.rate_limited = Counter(
            "chunkrag_gateway_rate_limited",
            "Requests refused by the per-caller rate limit, by identity class (never the credential)",
            ["identity_class"],
            registry=registry,
        )
        self._children: dict[tuple[str, int, str], tuple[Any, Any]] = {}
        # Requests the app itself cut short for load, by reason (a body past
        # its deadline: 408): counted with the connections the protocol closes
        # (``ConnectionCollector``), under the same metric.
        self.cut_short: collections.Counter[str] = collections.Counter()
        self.shed = Counter(
            "chunkrag_gateway_filtered_shed",
            "Filtered searches and asks answered 429 for load (the model-stage queue), by identity class",
            ["identity_class"],
            registry=registry,
        )

    def watch(self, collector) -> None:
        """Register a collector read at scrape time (``LiveState``, connections)."""
        self.registry.register(collector)

    def count_request(self, route: str, status: int, mode: str, seconds: float) -> None:
        # The labelled children, looked up once per label set: ``labels()``
        # costs more than the count itself, on every request.
        children = self._children.get((route, status, mode))
        if children is None:
            code = str(status)
            children = self._children[(route, status, mode)] = (
                self.requests.labels(route, code, mode),
                self.latency.labels(route, code, mode),
            )
        children[0].inc()
        children[1].observe(seconds)

    def count_result(self, result) -> None:
        """A filtered search's or ask's ``AskResult``: its stage timings,
        decisions, model use and where it was judged."""
        for stage, ms in (getattr(result, "timings_ms", None) or {}).items():
            self.stages.labels(stage).observe(ms / 1000)
        filtered = getattr(result, "filtered", None)
        if filtered is None:
            return
        kept = sum(1 for d in filtered.decisions if d.kept)
        self.chunks.labels("kept").inc(kept)
        self.chunks.labels("dropped").inc(len(filtered.decisions) - kept)
        self.judge_calls.inc(filtered.model_calls)
        self.judge_cached.inc(filtered.cached_calls)
        self.judge_tokens.labels("prompt").inc(filtered.prompt_tokens)
        self.judge_tokens.labels("completion").inc(filtered.completion_tokens)
        if filtered.judged_by is not None:
            self.judged.labels(filtered.judged_by).inc()
            if filtered.judged_by_reason:
                self.fallbacks.labels(filtered.judged_by).inc()

    def render(self) -> bytes:
        """The text a scrape gets (tests; the endpoint serves the same)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class LiveState:
    """Gauges read at scrape time, never on a request's path: the
    model-stage queue in this gateway, the relevance model's batches running
    and waiting for a turn (``model_turns``), and with Celery judging the depth of
    the workers' queue in Redis and whether a worker answers. Each probe is
    bounded by PROBE_TIMEOUT_S and its answer reused for CACHED_S."""

    def __init__(
        self,
        queue,
        *,
        model_turns=None,
        celery_depth: Callable[[], int] | None = None,
        workers_up: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.queue, self.celery_depth, self.workers_up, self.clock = queue, celery_depth, workers_up, clock
        self.model_turns = model_turns
        self._lock = threading.Lock()  # scrapes may come on several threads
        self._cached: tuple[float, float | None, float | None] | None = None

    def describe(self):
        return []  # read at scrape only: no probe when the registry is made

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily(
            "chunkrag_gateway_filtered_running",
            "Model-stage queries running in this gateway",
            value=self.queue.in_use,
        )
        yield GaugeMetricFamily(
            "chunkrag_gateway_filtered_waiting",
            "Model-stage queries waiting for a place in this gateway",
            value=self.queue.waiting,
        )
        if self.model_turns is not None:
            running, waiting = self.model_turns.counts()
            yield GaugeMetricFamily(
                "chunkrag_gateway_model_batches_running",
                "Relevance-model batches running in this gateway",
                value=running,
            )
            yield GaugeMetricFamily(
                "chunkrag_gateway_model_batches_waiting",
                "Relevance-model batches waiting for their turn in this gateway",
                value=waiting,
            )
        depth, up = self._probed()
        if depth is not None:
            yield GaugeMetricFamily(
                "chunkrag_gateway_celery_queue_depth",
                "Judging tasks waiting in the workers' queue (Redis)",
                value=depth,
            )
        if up is not None:
            yield GaugeMetricFamily(
                "chunkrag_gateway_workers_up", "1 when a Celery worker answered a ping at the last scrape", value=up
            )

    def _probed(self) -> tuple[float | None, float | None]:
        with self._lock:
            now = self.clock()
            if self._cached is not None and now - self._cached[0] < CACHED_S:
                return self._cached[1], self._cached[2]
            depth = _probe(self.celery_depth, "the Celery queue depth")
            up = _probe(self.workers_up, "the workers' liveness")
            self._cached = (now, depth, None if up is None else float(up))
            return self._cached[1], self._cached[2]


def _probe(probe: Callable[[], Any] | None, what: str) -> float | None:
    """A probe's answer; -1 when it failed (Redis down reads as such, not as an empty queue)."""
    if probe is None:
        return None
    try:
        return float(probe())
    except Exception as exc:  # noqa: BLE001 - any failure of the probe is "unknown" on the dashboard
        log.warning("metrics: could not read %s: %s", what, exc)
        return -1.0


class ConnectionCollector:
    """The open, refused and shed client connections of one server's
    protocol class (``connections.py``), read at scrape time; ``cut_short``
    (``GatewayMetrics.cut_short``) adds the requests the app closed for the
    same reasons."""

    def __init__(self, counts, cut_short: collections.Counter[str] | None = None):
        self.counts = counts
        self.cut_short = cut_short if cut_short is not None else collections.Counter()

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        counts = self.counts
        yield GaugeMetricFamily("chunkrag_gateway_connections_open", "Open client connections", value=counts.total)
        refused = CounterMetricFamily(
            "chunkrag_gateway_connections_refused",
            "Client connections refused at once (503) by a cap: total or per_address",
            labels=["cap"],
        )
        for cap in ("total", "per_address"):
            refused.add_metric([cap], counts.refused[cap])
        yield refused
        shed = CounterMetricFamily(
            "chunkrag_gateway_connections_shed",
            "Client connections closed by the gateway: header_timeout, body_timeout, headers_too_large, evicted_at_cap",
            labels=["reason"],
        )
        for reason in ("header_timeout", "body_timeout", "headers_too_large", "evicted_at_cap"):
            shed.add_metric([reason], counts.shed[reason] + self.cut_short[reason])
        yield shed


# The metrics port's own connection limits (``connections.py``): a scraper
# sends its request at once and reads the answer within a scrape, so anything
# slower is not one; a few Prometheus servers and a dashboard need a handful
# of connections. At the cap a newcomer takes the place of the oldest idle
# connection of the address holding the most, so one client holding
# connections open cannot lock the scrapers out.
METRICS_HEADER_TIMEOUT_S = 5.0
METRICS_BODY_TIMEOUT_S = 5.0
METRICS_KEEP_ALIVE_S = 5.0
METRICS_MAX_CONNECTIONS = 32
# How long the metrics server gets to start, and to stop at the gateway's end.
METRICS_START_TIMEOUT_S = 10.0
METRICS_STOP_TIMEOUT_S = 5.0


class MetricsServer:
    """The metrics endpoint: prometheus_client's ASGI app under uvicorn, with
    the gateway's own bounded connection protocol, on an event loop in a
    thread of its own (a scrape never waits on the gateway's event loop, nor
    the gateway on a scrape's probes). prometheus_client's own
    ``start_http_server`` kept a thread per connection with no deadline: held
    connections grew its threads without bound."""

    def __init__(self, metrics: GatewayMetrics, host: str, port: int):
        import socket

        import uvicorn
        from prometheus_client import make_asgi_app

        from chunkrag_gateway.connections import ConnectionLimits, protocol_class

        limits = ConnectionLimits(
            header_timeout_s=METRICS_HEADER_TIMEOUT_S,
            max_connections=METRICS_MAX_CONNECTIONS,
            max_connections_per_address=0,
            body_timeout_s=METRICS_BODY_TIMEOUT_S,
        )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family)
        self.server_address = self._socket.getsockname()
        config = uvicorn.Config(
            make_asgi_app(metrics.registry),
            lifespan="off",
            http=protocol_class(limits),
            timeout_keep_alive=METRICS_KEEP_ALIVE_S,
            access_log=False,
            log_config=None,
            log_level="warning",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True, name="chunkrag-metrics"
        )
        self._thread.start()
        deadline = time.monotonic() + METRICS_START_TIMEOUT_S
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.close()
                raise RuntimeError(f"the metrics endpoint did not start on {host}:{port}")
            time.sleep(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(METRICS_STOP_TIMEOUT_S)
        self._socket.close()


def serve_metrics(metrics: GatewayMetrics, host: str, port: int) -> MetricsServer:
    """The metrics endpoint on ``host:port`` (``MetricsServer``), serving
    until its ``close()``."""
    return MetricsServer(metrics, host, port)


class Telemetry:
    """Outermost middleware: a record per request, and at its end the
    request's metrics and its access-log line."""

    def __init__(self, app, metrics: GatewayMetrics, own_routes: Iterable[str] = ()):
        self.app, self.metrics, self.own_routes = app, metrics, frozenset(own_routes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        record = RequestRecord()
        scope.setdefault("state", {})[RECORD] = record
        request_id, present = _request_id(scope["headers"])
        if not present:
            # The cluster logs it too (its slow log, tasks, deprecations).
            scope = {**scope, "headers": [*scope["headers"], (REQUEST_ID_HEADER, request_id.encode())]}
        status = 500  # unless a response starts: the app failed before answering
        closed_early = False  # the client went away before its body had come

        async def received():
            nonlocal closed_early, body_whole
            message = await receive()
            if message["type"] == "http.request":
                body_whole = not message.get("more_body", False)
            elif message["type"] == "http.disconnect" and not body_whole:
                closed_early = True
            return message

        body_whole = False

        async def sent(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.get("headers") or []
                if not any(name.lower() == REQUEST_ID_HEADER for name, _ in headers):
                    message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, request_id.encode())]}
            await send(message)

        try:
            if not tracing.active():
                await self.app(scope, received, sent)
            else:
                await self._traced(scope, received, sent, record, lambda: status)
        finally:
            if closed_early:
                # Whatever the app made of the cut body (nothing, or a 400
                # about it), no one was there to read it.
                status = CLIENT_CLOSED
            self._finish(scope, record, request_id, status, time.perf_counter() - started)

    async def _traced(self, scope, receive, send, record: RequestRecord, status: Callable[[], int]) -> None:
        """The request as the server span of a trace: the caller's traceparent's child when it sent one."""
        incoming = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
            if name.lower() in (b"traceparent", b"tracestate")
        }
        route = route_of(scope["path"], self.own_routes)
        attributes = {"http.request.method": scope["method"], "http.route": route}
        name = f"{scope['method']} {route}"
        with tracing.span(name, "server", attributes, parent=tracing.extract(incoming)) as current:
            try:
                await self.app(scope, receive, send)
            finally:
                mode = record.mode or ("gateway" if scope["path"] in self.own_routes else "refused")
                tracing.set_attributes(current, {"http.response.status_code": status(), "chunkrag.mode": mode})

    def _finish(self, scope, record: RequestRecord, request_id: str, status: int, seconds: float) -> None:
        route = route_of(scope["path"], self.own_routes)
        mode = record.mode or ("gateway" if scope["path"] in self.own_routes else "refused")
        metrics = self.metrics
        metrics.count_request(route, status, mode, seconds)
        kind = identity_class(record.identity)
        if record.shed == "rate":
            metrics.rate_limited.labels(kind).inc()
        elif record.shed == "body_timeout":
            metrics.cut_short["body_timeout"] += 1
        elif status == 429 and mode in ("filtered", "ask"):
            metrics.shed.labels(kind).inc()
        if record.result is not None:
            metrics.count_result(record.result)
        if access_log.isEnabledFor(logging.INFO):
            access_log.info(orjson.dumps(access_line(scope, record, request_id, route, mode, status, seconds)).decode())


def access_line(
    scope, record: RequestRecord, request_id: str, route: str, mode: str, status: int, seconds: float
) -> dict[str, Any]:
    """One request's log line: who (by class; a service-mode key by its
    name, which is configuration, not a secret), what (method and route
    template), how it ended, and how long each part took."""
    line: dict[str, Any] = {
        "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "request_id": request_id,
        "method": scope["method"],
        "route": route,
        "mode": mode,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "identity_class": identity_class(record.identity),
    }
    if record.identity and record.identity.startswith("key:"):
        line["key"] = record.identity[4:]
    client = scope.get("client")
    if client:
        line["client"] = client[0]
    if record.shed:
        line["shed"] = record.shed
    result = record.result
    if result is not None:
        line["timings_ms"] = dict(getattr(result, "timings_ms", {}) or {})
        filtered = getattr(result, "filtered", None)
        if filtered is not None:
            kept = sum(1 for d in filtered.decisions if d.kept)
            line["chunks"] = {"kept": kept, "dropped": len(filtered.decisions) - kept}
            line["judge"] = {
                "by": filtered.judged_by,
                "fallback": bool(filtered.judged_by_reason),
                "calls": filtered.model_calls,
                "cache_hits": filtered.cached_calls,
                "prompt_tokens": filtered.prompt_tokens,
                "completion_tokens": filtered.completion_tokens,
            }
    return line


def _request_id(headers) -> tuple[str, bool]:
    """The caller's X-Opaque-Id (printable, cut to MAX_REQUEST_ID_CHARS), or
    a new one; and whether the request carries the header at all."""
    for name, value in headers:
        if name.lower() == REQUEST_ID_HEADER:
            text = value.decode("latin-1")
            usable = text and text.isprintable()
            return (text[:MAX_REQUEST_ID_CHARS] if usable else _new_id()), True
    return _new_id(), False


def _new_id() -> str:
    # 128 random bits, as a uuid4's, at a quarter of its cost.
    return os.urandom(16).hex()


def configure_access_log(stream=None) -> logging.Handler:
    """Write the access log's JSON lines, one per request and nothing
    around them, to ``stream`` (stdout by default): for ``chunkrag serve``."""
    import sys

    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access_log.addHandler(handler)
    access_log.setLevel(logging.INFO)
    access_log.propagate = False
    return handler
