"""The gateway's metrics and access log, with the app in process and its
edges replaced by doubles: a known sequence of requests, then a scrape and
the log lines it left."""

import json
import logging
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from chunkrag_core.settings import GatewaySettings, Settings
from chunkrag_gateway import create_app
from chunkrag_gateway.connections import ConnectionLimits, _Counts
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.limits import FilteredQueue
from chunkrag_gateway.model_turns import ModelTurns
from chunkrag_gateway.telemetry import (
    ACCESS_LOGGER,
    ConnectionCollector,
    GatewayMetrics,
    LiveState,
    identity_class,
    route_of,
)
from tests.unit.test_gateway_app import (
    FakeElasticsearch,
    FakeEmbedder,
    FakeModel,
    RecordingTransport,
    es_reply,
    judge_factory,
)
from tests.unit.test_gateway_security import KeyMakingTransport, RecordingElasticsearch

SECRET = "s3cret-gateway-key-7f3a"
QUERY = "what does a say about the hidden marmoset"
FILTERED = {
    "query": {"match": {"text": QUERY}},
    "ext": {"chunkrag": {"redundancy_threshold": None, "calibrated": False, "threshold": "dynamic", "judge_top": 9}},
}


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def make_app(transport=None, es=None, **gateway):
    settings = Settings(es_url="http://user:secret@es.internal:9200", gateway=GatewaySettings(**gateway))
    return create_app(
        settings,
        es=es or FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=FakeModel(),
        judge_many_factory=judge_factory,
        http_transport=transport or RecordingTransport(es_reply),
    )


def test_a_scrape_after_a_known_sequence_of_requests_counts_each(caplog):
    app = make_app(rate_per_s=0.001, rate_burst=4)
    client = TestClient(app)
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    assert client.post("/idx/_search", json={"query": {"match_all": {}}}).status_code == 200  # pass-through
    assert client.get("/idx/_count").status_code == 200  # pass-through
    assert client.post("/idx/_search", json=FILTERED).status_code == 200  # filtered
    assert client.delete("/idx").status_code == 403  # the write class is not forwarded: refused
    assert client.get("/idx/_count").status_code == 429  # the fifth request of a burst of 4
    # The routes anyone may call count against the caller's address too.
    assert client.get("/v1/health").status_code == 429
    seen = samples(app.state.metrics.render())

    def requests(route, status, mode):
        return seen.get(("chunkrag_gateway_requests_total", (("mode", mode), ("route", route), ("status", status))), 0)

    assert requests("/{index}/_search", "200", "passthrough") == 1
    assert requests("/{index}/_count", "200", "passthrough") == 1
    assert requests("/{index}/_search", "200", "filtered") == 1
    assert requests("/{index}", "403", "refused") == 1
    assert requests("/{index}/_count", "429", "refused") == 1
    assert sum(v for (name, labels), v in seen.items() if name == "chunkrag_gateway_requests_total") == 6
    histogram = (("mode", "filtered"), ("route", "/{index}/_search"), ("status", "200"))
    assert seen[("chunkrag_gateway_request_duration_seconds_count", histogram)] == 1
    # The filter's own figures, from its result: three candidates judged by
    # the injected judge, one kept; ten prompt tokens each.
    assert seen[("chunkrag_gateway_filter_chunks_total", (("decision", "kept"),))] == 1
    assert seen[("chunkrag_gateway_filter_chunks_total", (("decision", "dropped"),))] == 2
    assert seen[("chunkrag_gateway_judge_calls_total", ())] == 3
    assert seen[("chunkrag_gateway_judge_tokens_total", (("kind", "prompt"),))] == 30
    assert seen[("chunkrag_gateway_filter_stage_duration_seconds_count", (("stage", "scoring"),))] == 1
    assert seen[("chunkrag_gateway_filter_stage_duration_seconds_count", (("stage", "retrieval"),))] == 1
    assert seen[("chunkrag_gateway_rate_limited_total", (("identity_class", "address"),))] == 2
    assert seen[("chunkrag_gateway_filtered_running", ())] == 0
    assert (
        seen[("chunkrag_gateway_model_batches_running", ())]
        == seen[("chunkrag_gateway_model_batches_waiting", ())]
        == 0
    )
    # No Celery judging: no probe of Redis or the workers.
    assert not any(name.startswith("chunkrag_gateway_celery") for name, _ in seen)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [(line["route"], line["status"], line["mode"]) for line in lines] == [
        ("/{index}/_search", 200, "passthrough"),
        ("/{index}/_count", 200, "passthrough"),
        ("/{index}/_search", 200, "filtered"),
        ("/{index}", 403, "refused"),
        ("/{index}/_count", 429, "refused"),
        ("/v1/health", 429, "gateway"),
    ]
    assert lines[2]["chunks"] == {"kept": 1, "dropped": 2} and lines[2]["judge"]["calls"] == 3
    assert lines[4]["shed"] == "rate" and lines[0]["identity_class"] == "address"
    assert lines[5]["shed"] == "rate" and lines[5]["identity_class"] == "address"


def test_the_access_log_holds_no_credential_query_or_document_text(caplog):
    app = make_app(
        KeyMakingTransport(), RecordingElasticsearch(), auth="service", api_keys=f"reader:{key_hash(SECRET)}:idx"
    )
    client = TestClient(app)
    caplog.set_level(logging.DEBUG)
    auth = {"authorization": f"ApiKey {SECRET}"}
    assert client.post("/idx/_search", json=FILTERED, headers=auth).status_code == 200
    assert client.get(f"/idx/_search?q={QUERY.replace(' ', '+')}", headers=auth).status_code == 200
    assert client.post("/v1/ask", json={"index": "idx", "question": QUERY}, headers=auth).status_code == 200
    assert client.get("/idx/_search", headers={"authorization": "ApiKey wrong-" + SECRET}).status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
    assert len(lines) == 4
    # Everything the gateway logged (the test client logs the URLs it calls).
    everything = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("httpx"))
    for secret in (SECRET, "derived-reader", "marmoset", QUERY.split()[0] + " ", "says", "user:secret"):
        assert secret not in everything
    first = json.loads(lines[0])
    assert first["identity_class"] == "key" and first["key"] == "reader" and first["mode"] == "filtered"
    assert set(first["timings_ms"]) >= {"retrieval", "scoring", "total"}
    assert json.loads(lines[2])["mode"] == "ask" and json.loads(lines[3])["identity_class"] == "none"


def test_the_request_id_is_the_callers_opaque_id_or_a_new_one_echoed_and_forwarded(caplog):
    transport = RecordingTransport(es_reply)
    settings = Settings(es_url="http://es.internal:9200")
    client = TestClient(create_app(settings, embedder=FakeEmbedder(), http_transport=transport))
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    given = client.get("/idx/_count", headers={"x-opaque-id": "job-42"})
    made = client.get("/idx/_count")
    assert given.headers["x-opaque-id"] == "job-42"
    assert len(made.headers["x-opaque-id"]) == 32
    # The cluster sees the same id, so its logs join the gateway's.
    assert [r[2][b"x-opaque-id"] for r in transport.requests] == [b"job-42", made.headers["x-opaque-id"].encode()]
    ids = [json.loads(r.getMessage())["request_id"] for r in caplog.records if r.name == ACCESS_LOGGER]
    assert ids == ["job-42", made.headers["x-opaque-id"]]


def test_the_metrics_endpoint_is_on_its_own_port_and_stops_with_the_app():
    app = make_app(metrics_port=_free_port())
    port = app.state.edges.settings.gateway.metrics_port
    with TestClient(app) as client:
        client.get("/idx/_count")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as scrape:
            text = scrape.read()
        # Not under the callers' paths: /metrics there is an index name, forwarded.
        assert client.get("/metrics").status_code == 200
    assert b'chunkrag_gateway_requests_total{mode="passthrough",route="/{index}/_count",status="200"} 1.0' in text
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_two_apps_count_apart_and_nothing_lands_in_the_global_registry():
    from prometheus_client import REGISTRY

    before = {m.name for m in REGISTRY.collect()}
    first, second = make_app(), make_app()
    TestClient(first).get("/idx/_count")
    assert b"chunkrag_gateway_requests_total{" in first.state.metrics.render()
    assert b"chunkrag_gateway_requests_total{" not in second.state.metrics.render()
    assert {m.name for m in REGISTRY.collect()} == before


def test_live_state_is_read_at_scrape_bounded_and_cached():
    calls = []
    now = [0.0]

    def depth():
        calls.append("depth")
        return 7

    def down():
        raise ConnectionError("Redis is down")

    metrics = GatewayMetrics()
    queue = FilteredQueue(2, 4, 1)
    metrics.watch(LiveState(queue, celery_depth=depth, workers_up=down, clock=lambda: now[0]))
    assert calls == []  # registering probes nothing
    seen = samples(metrics.render())
    assert seen[("chunkrag_gateway_celery_queue_depth", ())] == 7
    assert seen[("chunkrag_gateway_workers_up", ())] == -1  # unknown, not "none"
    metrics.render()
    assert calls == ["depth"]  # the second scrape within CACHED_S reuses the first's answers
    now[0] = 10.0
    metrics.render()
    assert calls == ["depth", "depth"]


def test_connection_counts_are_read_from_the_servers_protocol():
    counts = _Counts()
    limits = ConnectionLimits(max_connections=2, max_connections_per_address=1)
    assert counts.admit("10.0.0.1", limits) is None
    assert counts.admit("10.0.0.1", limits) is not None  # the per-address cap
    assert counts.admit("10.0.0.2", limits) is None
    assert counts.admit("10.0.0.3", limits) is not None  # the overall cap
    counts.shed["header_timeout"] += 1
    metrics = GatewayMetrics()
    metrics.watch(ConnectionCollector(counts))
    seen = samples(metrics.render())
    assert seen[("chunkrag_gateway_connections_open", ())] == 2
    assert seen[("chunkrag_gateway_connections_refused_total", (("cap", "per_address"),))] == 1
    assert seen[("chunkrag_gateway_connections_refused_total", (("cap", "total"),))] == 1
    assert seen[("chunkrag_gateway_connections_shed_total", (("reason", "header_timeout"),))] == 1


@pytest.mark.parametrize(
    "path, route",
    [
        ("/idx/_search", "/{index}/_search"),
        ("/logs-2026.11/_doc/abc", "/{index}/_doc/{id}"),
        ("/_search/scroll/DXF1ZXJ5", "/_search/scroll/{id}"),
        ("/_madeup_api/x", "/_other/{id}"),
        ("/a/b/c/d/e/f", "/{index}/{id}/{id}/{id}/..."),
        ("/v1/ask", "/v1/ask"),
        ("/", "/"),
    ],
)
def test_routes_are_templates_of_bounded_variety(path, route):
    assert route_of(path, frozenset({"/v1/ask"})) == route


def test_identity_classes_never_carry_the_identity():
    assert identity_class("key:reader") == "key"
    assert identity_class("credentials:0123abcd") == "credentials"
    assert identity_class("address:10.1.2.3") == "address"
    assert identity_class("something-else") == "other" and identity_class(None) == "none"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_grafana_dashboard_reads_only_metrics_the_gateway_exports():
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-gateway.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"chunkrag_gateway_\w+", target["expr"])
    }
    metrics = GatewayMetrics()
    metrics.watch(
        LiveState(FilteredQueue(1, 1, 1), model_turns=ModelTurns(1), celery_depth=lambda: 0, workers_up=lambda: True)
    )
    metrics.watch(ConnectionCollector(_Counts()))
    exported = {m.name for m in metrics.registry.collect()}
    suffixes = ("_total", "_bucket", "_count", "_sum")
    assert used and all(
        name in exported or any(name.endswith(s) and name[: -len(s)] in exported for s in suffixes) for name in used
    ), used - exported
