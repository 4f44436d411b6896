"""What an operator sees of the gateway, over real HTTP with the real (open)
Elasticsearch behind it: compressed bodies in service mode, the index APIs
that name the cluster's nodes, the pass-through classes, how a client's
early close and a late body are counted, and the metrics port's own limits."""

from __future__ import annotations

import dataclasses
import gzip
import logging
import socket
import threading
import time
import uuid
import zlib

import httpx
import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving
from chunkrag_gateway.telemetry import ACCESS_LOGGER, CLIENT_CLOSED, METRICS_MAX_CONNECTIONS
from tests.integration.test_gateway_telemetry import free_port, scrape

pytestmark = pytest.mark.integration

KEY = "operators-" + uuid.uuid4().hex
SEARCH = b'{"query": {"match": {"text": "rotate the api key"}}, "size": 5}'
# Each bounded wait of these tests (a server closing what it holds, a count reaching its value).
WAIT_S = 60.0


@pytest.fixture(scope="module")
def index(es):
    name = f"test-gateway-operators-{uuid.uuid4().hex[:10]}"
    for n, text in enumerate(("rotate the api key every ninety days", "the api key is rotated by the admin", "lunch")):
        es.client.index(index=name, id=str(n), document={"text": text})
    es.client.indices.refresh(index=name)
    yield name
    es.delete_index(name)


def configured(settings, **gateway):
    return dataclasses.replace(settings, gateway=dataclasses.replace(settings.gateway, **gateway))


def service_mode(settings, index: str, **gateway):
    """Service mode on the open node, the gateway's own checks accepted as the only ones."""
    return configured(
        settings,
        auth="service",
        api_keys=f"team:{key_hash(KEY)}:{index}",
        enforce_in_gateway_only=True,
        max_body_bytes=100_000,
        **gateway,
    )


def post(url: str, path: str, body: bytes, coding: str | None = None) -> httpx.Response:
    headers = {"authorization": f"ApiKey {KEY}", "content-type": "application/json"}
    if coding:
        headers["content-encoding"] = coding
    return httpx.post(url + path, content=body, headers=headers, timeout=30)


def test_a_compressed_body_is_read_decoded_in_service_mode_and_its_decoded_size_is_limited(settings, embedder, index):
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    with serving(create_app(service_mode(settings, index), embedder=embedder)) as url:
        plain = post(url, f"/{index}/_search", SEARCH)
        encoded = {
            "gzip": post(url, f"/{index}/_search", gzip.compress(SEARCH), "gzip"),
            "deflate (zlib)": post(url, f"/{index}/_search", zlib.compress(SEARCH), "deflate"),
            "deflate (raw)": post(
                url, f"/{index}/_search", raw_deflate.compress(SEARCH) + raw_deflate.flush(), "deflate"
            ),
        }
        # 10 MB of spaces inside a JSON object: 10 kB compressed, 100 times the decoded limit.
        bomb = post(url, f"/{index}/_search", gzip.compress(b"{" + b" " * 10_000_000 + b"}"), "gzip")
        truncated = post(url, f"/{index}/_search", gzip.compress(SEARCH)[:-6], "gzip")
        # A reference to an index the key may not read, hidden in the compressed body: still refused.
        hidden = post(
            url,
            f"/{index}/_search",
            gzip.compress(b'{"query": {"terms": {"text": {"index": "other", "id": "1", "path": "text"}}}}'),
            "gzip",
        )
    hits = [hit["_id"] for hit in plain.json()["hits"]["hits"]]
    assert plain.status_code == 200 and len(hits) == 2
    for coding, answer in encoded.items():
        assert answer.status_code == 200, (coding, answer.text[:300])
        assert [hit["_id"] for hit in answer.json()["hits"]["hits"]] == hits, coding
    assert bomb.status_code == 413 and "CHUNKRAG_GATEWAY_MAX_BODY_BYTES" in bomb.text
    assert truncated.status_code == 400 and "ends early" in truncated.text
    assert hidden.status_code == 403 and "other" in hidden.text


def test_index_apis_that_name_the_nodes_are_cluster_apis(settings, embedder, index, es):
    """_search_shards answers with node names, ids and transport addresses:
    with read and write passed it is refused, naming the class that would pass it."""
    with serving(create_app(configured(settings, passthrough="read,write"), embedder=embedder)) as url:
        answers = {path: httpx.get(f"{url}/{index}/{path}", timeout=30) for path in ("_search_shards", "_segments")}
    direct = es.client.search_shards(index=index).body
    assert any("transport_address" in node for node in direct["nodes"].values())  # what would leak
    for path, answer in answers.items():
        assert answer.status_code == 403, (path, answer.text[:300])
        reason = answer.json()["error"]["reason"]
        assert "cluster API" in reason and "CHUNKRAG_GATEWAY_PASSTHROUGH" in reason
        assert "transport_address" not in answer.text and not any(node in answer.text for node in direct["nodes"])


def test_passing_write_passes_reads_too(settings, embedder, index):
    with serving(create_app(configured(settings, passthrough="write"), embedder=embedder)) as url:
        search = httpx.post(f"{url}/{index}/_search", json={"size": 1}, timeout=30)
        write = httpx.put(f"{url}/{index}/_doc/written?refresh=true", json={"text": "written"}, timeout=30)
        cluster = httpx.get(f"{url}/_cluster/health", timeout=30)
    assert search.status_code == 200 and write.status_code in (200, 201)
    assert cluster.status_code == 403 and "[read, write]" in cluster.json()["error"]["reason"]


def _send_then_close(url: str, request: bytes, wait_for_answer: bool = False) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(request)
        return sock.recv(4096) if wait_for_answer else b""


def test_a_client_closing_mid_body_is_its_close_and_a_late_body_is_shed(settings, embedder, index, caplog):
    port = free_port()
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    app = create_app(configured(settings, metrics_port=port, body_timeout_s=0.5), embedder=embedder)
    head = f"POST /{index}/_search HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
    with serving(app) as url:
        _send_then_close(url, (head + '{"query": ').encode())
        late = _send_then_close(url, (head + "{").encode(), wait_for_answer=True)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            samples = scrape(port)
            if samples.get(("chunkrag_gateway_connections_shed_total", (("reason", "body_timeout"),)), 0) >= 1:
                if any(
                    name == "chunkrag_gateway_requests_total" and dict(labels)["status"] == str(CLIENT_CLOSED)
                    for name, labels in samples
                ):
                    break
            time.sleep(0.2)
    assert late.startswith(b"HTTP/1.1 408")
    requests = "chunkrag_gateway_requests_total"
    statuses = {dict(labels)["status"]: value for (name, labels), value in samples.items() if name == requests}
    assert statuses == {str(CLIENT_CLOSED): 1, "408": 1}, statuses
    assert samples[("chunkrag_gateway_connections_shed_total", (("reason", "body_timeout"),))] == 1
    logged = sorted(record.getMessage() for record in caplog.records if record.name == ACCESS_LOGGER)
    assert len(logged) == 2 and any(f'"status":{CLIENT_CLOSED}' in line for line in logged), logged


def test_the_metrics_port_closes_held_connections_and_keeps_answering_scrapes(settings, embedder):
    """Connections that send nothing, or half a request, are closed by the
    metrics port's own deadline, and three times its cap of them never cost
    a thread each; scrapes are answered again once they are."""
    port = free_port()
    held: list[socket.socket] = []
    threads_before = threading.active_count()
    try:
        with serving(create_app(configured(settings, metrics_port=port), embedder=embedder)):
            for n in range(METRICS_MAX_CONNECTIONS * 3):
                sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
                if n % 2:
                    sock.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")  # never ends its head
                held.append(sock)
            threads_held = threading.active_count()
            answered = _scraped(port)
            closed = sum(1 for sock in held if _closed_by_server(sock))
    finally:
        for sock in held:
            sock.close()
    assert answered.status_code == 200 and b"chunkrag_gateway_requests_total" in answered.content
    # The gateway, its metrics server and their pools: none per held connection.
    assert threads_held - threads_before < 20, (threads_before, threads_held)
    assert closed == len(held)


def _scraped(port: int) -> httpx.Response:
    """A scrape's answer; at the cap (one address holds every place) a 503
    until the held connections' deadline frees one, as a scraper's next try would find."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S)
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (it may answer 408 or 503 first) within WAIT_S."""
    sock.settimeout(WAIT_S)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True
