"""A cluster given as a list of node URLs: ES_URL / OPENSEARCH_URL parsed and
checked once, every entry redacted for display, and both engines' clients
passing over a node that refuses connections (a closed loopback port) to a
live one (a tiny HTTP server on loopback answering as the engine would), for
searches and for bulk writes. The gateway's own pools: test_gateway_origin.py."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import Settings, SettingsError, node_urls


def test_one_url_stays_one_node():
    settings = Settings.from_env({"ES_URL": "http://es:9200"})
    assert settings.es_nodes == ("http://es:9200",) and settings.es_url == "http://es:9200"
    assert Settings().opensearch_nodes == ("http://127.0.0.1:9201",)


def test_a_list_of_nodes_is_parsed_once_and_credentials_on_the_first_reach_every_node():
    settings = Settings.from_env({"ES_URL": "https://u:p%40ss@a:9200, https://b:9200,https://[::1]:9200"})
    assert settings.es_nodes == ("https://u:p%40ss@a:9200", "https://u:p%40ss@b:9200", "https://u:p%40ss@[::1]:9200")
    assert settings.search_nodes == settings.es_nodes
    # Every entry's password is hidden, not the first one's only.
    assert settings.es_url_for_display == "https://u:***@a:9200,https://u:***@b:9200,https://u:***@[::1]:9200"
    assert "p%40ss" not in redact_url(",".join(settings.es_nodes))
    same = node_urls("http://u:p@a:1,http://u:p@b:2", "ES_URL")
    assert same == ("http://u:p@a:1", "http://u:p@b:2")
    os = Settings.from_env({"OPENSEARCH_URL": "http://a:9270,http://b:9272"})
    assert (os.search_backend, os.search_nodes) == ("opensearch", ("http://a:9270", "http://b:9272"))


@pytest.mark.parametrize(
    "raw, message",
    [
        ("http://a:1,,http://b:2", "entry 2 of 3 is empty"),
        ("http://a:1,", "entry 2 of 2 is empty"),
        ("http://u:p@a:1,http://v:p@b:2", "credentials other than the first"),
        ("http://a:1,http://u:p@b:2", "credentials other than the first"),
        ("http://a:1,b:2", "not an http:// or https:// URL"),
        ("http://a:1/es,http://b:2/other", "another path"),
        # A password holding # or / as written: host a and port 1 would be read out of it.
        ("http://u:p@a:1#x@b:2", "has an @ after its host"),
        ("http://u:p@a:1/x@b:2", "has an @ after its host"),
        ("http://u:p@a:1?x@b:2", "has an @ after its host"),
    ],
)
def test_a_list_the_project_cannot_use_is_refused_with_the_reason(raw, message):
    with pytest.raises(SettingsError, match=message) as raised:
        Settings.from_env({"ES_URL": raw})
    assert "ES_URL" in str(raised.value)


def test_a_password_never_appears_in_the_error():
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"ES_URL": "http://u:secret@a:1,ftp://u:secret@b:2"})
    assert "secret" not in str(raised.value)


def test_sigv4_takes_one_endpoint_not_a_list():
    env = {"OPENSEARCH_URL": "https://a:443,https://b:443", "OPENSEARCH_AUTH": "sigv4", "AWS_REGION": "eu-west-1"}
    with pytest.raises(SettingsError, match="one URL"):
        Settings.from_env(env)


def test_forward_mode_strips_credentials_from_every_node():
    from chunkrag_gateway.edges import strip_credentials

    assert strip_credentials("http://u:p@a:1,http://u:p@b:2") == "http://a:1,http://b:2"


def test_the_local_cluster_gives_every_node_as_the_url_clients_take(tmp_path: Path):
    from local_services import cli, cluster

    local = cluster.LocalCluster("elasticsearch", tmp_path, first_port=19500, nodes=3)
    assert local.url == "http://127.0.0.1:19500,http://127.0.0.1:19502,http://127.0.0.1:19504"
    assert local.url_of(0) == "http://127.0.0.1:19500"
    assert Settings.from_env({"ES_URL": local.url}).es_nodes == local.urls
    env = {
        "CHUNKRAG_HOME": str(tmp_path),
        "CHUNKRAG_ES_CLUSTER_PORT": "19500",
        "CHUNKRAG_OPENSEARCH_CLUSTER_PORT": "19520",
    }
    urls = cli.app_environ(env, nodes=3)
    assert urls["ES_URL"] == local.url
    assert urls["OPENSEARCH_URL"] == "http://127.0.0.1:19520,http://127.0.0.1:19522,http://127.0.0.1:19524"


def test_a_health_probe_of_a_node_list_asks_the_first_node_that_answers():
    from local_services.jvm_node import cluster_health

    with Engine() as live:
        assert cluster_health(f"http://127.0.0.1:{closed_port()},{live.url}")["status"] == "green"
    with pytest.raises(OSError):
        cluster_health(f"http://127.0.0.1:{closed_port()},http://127.0.0.1:{closed_port()}", timeout=1.0)


# --- both engines' clients over a refused node and a live one -----------------


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Engine:
    """A live node on loopback answering `_search`, `_bulk` and
    `_cluster/health` as Elasticsearch and OpenSearch do; records each
    request's method and path."""

    def __init__(self):
        self.requests: list[tuple[str, str]] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._answer()

            def do_POST(self):
                self._answer()

            def do_PUT(self):
                self._answer()

            def _answer(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                engine.requests.append((self.command, self.path.split("?")[0]))
                if "_bulk" in self.path:
                    actions = [json.loads(line) for line in body.splitlines() if line.strip()]
                    heads = [a for a in actions if set(a) & {"index", "create", "delete", "update"}]
                    items = [{op: {"_id": a[op].get("_id"), "status": 201}} for a in heads for op in a]
                    answer = {"took": 1, "errors": False, "items": items}
                elif "_search" in self.path:
                    hit = {"_index": "i", "_id": "1", "_score": 1.0, "_source": {"text": "x"}}
                    answer = {"took": 1, "timed_out": False, "hits": {"total": {"value": 1}, "hits": [hit]}}
                else:
                    answer = {"status": "green", "number_of_nodes": 2}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("x-elastic-product", "Elasticsearch")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


def backend_for(engine: str, urls: str):
    from chunkrag_core.engines import make_backend

    if engine == "opensearch":
        return make_backend(Settings(search_backend="opensearch", opensearch_url=urls))
    return make_backend(Settings(es_url=urls))


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_searches_and_bulk_writes_pass_over_a_refused_node(engine):
    with Engine() as live:
        # The refused node first, as node 0 is in ES_URL; the clients go round
        # the nodes, so within two requests each starts once at the refused one.
        backend = backend_for(engine, f"http://127.0.0.1:{closed_port()},{live.url}")
        try:
            for _ in range(4):
                assert backend.search("i", {"query": {"match": {"text": "x"}}})["hits"]["hits"][0]["_id"] == "1"
            actions = [{"_op_type": "index", "_index": "i", "_id": f"c{n}", "text": "x"} for n in range(4)]
            items = list(backend.bulk(actions, chunk_size=1, max_retries=0, initial_backoff=1))
        finally:
            backend.close()
    assert [ok for ok, _ in items] == [True] * 4
    assert [item["index"]["_id"] for _, item in items] == ["c0", "c1", "c2", "c3"]
    assert sum(path.endswith("_search") for _, path in live.requests) == 4
    assert sum(path.endswith("_bulk") for _, path in live.requests) == 4


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_no_node_answering_is_the_projects_unavailable_error(engine):
    from chunkrag_core.engines.errors import EngineUnavailable

    backend = backend_for(engine, f"http://127.0.0.1:{closed_port()},http://127.0.0.1:{closed_port()}")
    try:
        with pytest.raises(EngineUnavailable, match="not reachable"):
            backend.search("i", {"query": {"match_all": {}}})
    finally:
        backend.close()


def test_the_gateway_pass_through_takes_every_node_and_passes_over_a_refused_one():
    import asyncio

    from chunkrag_gateway.origin import NodePools
    from chunkrag_gateway.passthrough import Passthrough

    async def ask(passthrough):
        try:
            return [await passthrough.get_json("/_cluster/health") for _ in range(3)]
        finally:
            await passthrough.aclose()

    with Engine() as live:
        passthrough = Passthrough(Settings(es_url=f"http://127.0.0.1:{closed_port()},{live.url}"))
        assert isinstance(passthrough.transport, NodePools) and len(passthrough.transport.pools) == 2
        answers = asyncio.run(ask(passthrough))
    assert [status for status, _ in answers] == [200, 200, 200]
    assert live.requests == [("GET", "/_cluster/health")] * 3
