"""The gateway's connections, both ways, with the real Elasticsearch behind
it: oversized headers cannot poison the pool to the cluster, slow and silent
clients cannot lock others out, and deeply nested bodies never get a 500.

Elasticsearch answers a request whose headers exceed 16 KB with a 400 and
then ignores the connection (no ``Connection: close``); a pool that reused
that connection made the next callers wait for a 504."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import selectors
import socket
import time
import uuid

import httpx
import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from tests.integration.test_gateway import DOCS

pytestmark = pytest.mark.integration

BIG_HEADER = {"x-opaque-id": "a" * 17_000}  # over Elasticsearch's 16 KB http.max_header_size, and forwarded


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-connections-{uuid.uuid4().hex[:8]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


def with_gateway(settings, **gateway):
    # A short cluster timeout: a poisoned connection shows as a 504 soon.
    return dataclasses.replace(
        settings, es_request_timeout_s=5.0, gateway=dataclasses.replace(settings.gateway, **gateway)
    )


@pytest.mark.parametrize("gateway_limit", ["default", "lifted"])
def test_oversized_headers_do_not_poison_the_pool(settings, embedder, index, gateway_limit):
    # "default": the gateway answers 431 itself. "lifted": its limits are
    # raised above Elasticsearch's, so the 17 KB header reaches the cluster,
    # which answers 400 and ignores the connection: the pool must drop it.
    limits = {} if gateway_limit == "default" else {"max_header_bytes": 65_536, "max_header_line_bytes": 65_536}
    app = create_app(with_gateway(settings, **limits), embedder=embedder)
    body = {"query": {"match": {"text": "cats"}}, "size": 1}
    # One client for all 20 threads (20 connections at once): the gateway
    # runs in this process, and 20 clients of their own, each building its
    # TLS context as it starts, held the interpreter lock long enough on a
    # loaded machine for the gateway's connects to the cluster to outlast
    # their 2 s timeout (503), which says nothing about the pool.
    with (
        serving(app) as url,
        httpx.Client(base_url=url, timeout=60, limits=httpx.Limits(max_connections=20)) as client,
        concurrent.futures.ThreadPoolExecutor(20) as pool,
    ):
        bad = list(pool.map(lambda _: client.post(f"/{index}/_search", json=body, headers=BIG_HEADER), range(20)))
        good = list(pool.map(lambda _: client.post(f"/{index}/_search", json=body), range(20)))
        pooled = app.state.edges.passthrough.transport
    expected = {431} if gateway_limit == "default" else {400}
    assert {r.status_code for r in bad} == expected, [r.text[:200] for r in bad if r.status_code not in expected]
    if gateway_limit == "lifted":
        assert all(r.json()["error"]["type"] == "too_long_http_header_exception" for r in bad)
        assert pooled.opened >= 20  # every connection that carried a 400 was dropped
    assert [r.status_code for r in good] == [200] * 20, [r.text[:200] for r in good if r.status_code != 200]


def test_slow_and_silent_clients_cannot_lock_others_out(settings, embedder, index):
    """300 connections from 127.0.0.2 each sending a header line a second,
    and 30 silent ones from 127.0.0.3, against a per-address cap of 200 and
    a 3 s header deadline; meanwhile 20 requests from 127.0.0.1 are served.
    Bounded: at most ~15 s, loopback only."""
    header_timeout_s, cap = 3.0, 200
    app = create_app(
        with_gateway(settings, header_timeout_s=header_timeout_s, max_connections_per_address=cap), embedder=embedder
    )
    with serving(app) as url:
        host, port = url.removeprefix("http://").split(":")
        target = (host, int(port))
        slow = [_connect(target, "127.0.0.2") for _ in range(300)]
        silent = [_connect(target, "127.0.0.3") for _ in range(30)]
        for sock in slow:
            _send(sock, b"GET /" + index.encode() + b"/_count HTTP/1.1\r\nhost: x\r\n")
        with concurrent.futures.ThreadPoolExecutor(1) as normal:
            served = normal.submit(
                lambda: [httpx.get(f"{url}/{index}/_count", timeout=30).status_code for _ in range(20)]
            )
            closed, answers = _trickle(slow + silent, until=time.monotonic() + header_timeout_s + 10)
            statuses = served.result()
    try:
        assert statuses == [200] * 20
        # Every slow and silent connection was closed by the gateway: the
        # capped ones at once with 503, the rest at the header deadline
        # (408 for those that had sent part of a request).
        assert closed == set(range(len(slow) + len(silent)))
        refused = [n for n in range(len(slow)) if answers[n].startswith(b"HTTP/1.1 503 ")]
        assert refused and all(b"MAX_CONNECTIONS_PER_ADDRESS" in answers[n] for n in refused)
        assert all(answers[n].startswith(b"HTTP/1.1 408 ") for n in range(len(slow)) if n not in refused)
        assert all(answers[len(slow) + n] == b"" for n in range(len(silent)))
    finally:
        for sock in slow + silent:
            sock.close()


def _connect(target, source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect(target)
    sock.setblocking(False)
    return sock


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
        pass


def _trickle(socks: list[socket.socket], until: float) -> tuple[set[int], dict[int, bytes]]:
    """Send each open one of the first 300 a header line a second until
    all are closed by the gateway or ``until``; what each received."""
    selector = selectors.DefaultSelector()
    for n, sock in enumerate(socks):
        selector.register(sock, selectors.EVENT_READ, n)
    closed: set[int] = set()
    answers = {n: b"" for n in range(len(socks))}
    line = 0
    next_line = time.monotonic() + 1
    while len(closed) < len(socks) and time.monotonic() < until:
        for key, _ in selector.select(timeout=0.2):
            n = key.data
            try:
                data = socks[n].recv(65536)
            except (BlockingIOError, ConnectionResetError):
                data = b"" if n not in closed else None
            if data:
                answers[n] += data
            else:
                closed.add(n)
                selector.unregister(socks[n])
        if time.monotonic() >= next_line:
            line += 1
            next_line += 1
            for n, sock in enumerate(socks[:300]):
                if n not in closed:
                    _send(sock, b"x-slow-%d: 1\r\n" % line)
    selector.close()
    return closed, answers


def _nest(depth: int) -> str:
    return '{"bool":{"filter":[' * (depth // 4) + '{"match_all":{}}' + "]}}" * (depth // 4)


@pytest.mark.parametrize("depth", [100, 199, 900, 1000, 1023, 1100])
def test_deep_bodies_get_a_4xx_or_the_engines_answer_never_500(settings, embedder, index, depth):
    app = create_app(with_gateway(settings, max_body_bytes=10_000_000, passthrough="read"), embedder=embedder)
    deep = _nest(depth)
    searches = {
        "filtered": (
            f"/{index}/_search",
            f'{{"query":{{"bool":{{"must":[{{"match":{{"text":"cats"}}}}],"filter":[{deep}]}}}},'
            f'"ext":{{"chunkrag":{{"stages":false}}}}}}',
        ),
        "filtered option": (
            f"/{index}/_search",
            f'{{"query":{{"match":{{"text":"cats"}}}},"ext":{{"chunkrag":{{"query":{deep}}}}}}}',
        ),
        "plain": (f"/{index}/_search", f'{{"query":{deep}}}'),
        "msearch": (f"/{index}/_msearch", f'{{}}\n{{"query":{deep}}}\n'),
        "ask": ("/v1/ask", f'{{"index":"{index}","question":"cats","options":{{"stages":false,"query":{deep}}}}}'),
    }
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        for name, (path, body) in searches.items():
            response = client.post(
                path,
                content=body,
                headers={"content-type": "application/json" if name != "msearch" else "application/x-ndjson"},
            )
            assert response.status_code < 500, (name, response.status_code, response.text[:300])
            if name == "msearch" and response.status_code == 200:
                assert all(item.get("status", 200) < 500 for item in response.json()["responses"]), response.text[:300]
