"""A node that hangs (alive, its sockets open, nothing answering: a
SIGSTOPped process) against the project's clients, on live loopback sockets:
a listener that never accepts (the kernel completes the handshake and queues
the connection, nobody reads or answers), a listener whose backlog is full
(a connection is never made: a machine that is gone), and a live server.

- the gateway's pass-through pools (`origin.NodePools`): a request that may
  be repeated goes on to the next node and the silent node is passed over,
  longer each time; a write is not replayed and waits the whole request
  timeout, not the attempt's; a connection not made within
  the connect timeout goes on whatever the method; every attempt stays
  within the request's timeout;
- the Elasticsearch and OpenSearch backends made from settings: a read (a
  search) goes on to the next node after a silent attempt; a write (bulk,
  index creation, mappings, settings, refresh, deletion) is sent once and
  waits the whole request timeout, a node slower than the attempt timeout
  included; with one URL nothing of this applies;
- the CHUNKRAG_ENGINE_* settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from elastic_transport.client_utils import DEFAULT

from chunkrag_core.engines.errors import EngineTimeout
from chunkrag_core.engines.profile import ELASTICSEARCH, OPENSEARCH, PROFILES, SEARCH_BACKENDS
from chunkrag_core.settings import EngineSettings, Settings, SettingsError
from chunkrag_gateway.origin import (
    HttpTimeout,
    NodePools,
    OriginPool,
)
from tests.support.raw_http import read_request

# --- nodes on loopback ---------------------------------------------------------


@contextlib.contextmanager
def hung_node():
    """A listener that never accepts: connections are made and queued by the
    kernel, requests written into them, and nothing ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener


def contacts(listener: socket.socket) -> int:
    """How many connections wait in the hung node's queue (taken out)."""
    listener.setblocking(False)
    count = 0
    while True:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


@contextlib.contextmanager
def unreachable_node():
    """A listener whose one backlog place is taken: a new connection is
    never made (its SYN is dropped), as with a machine that is gone."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        with socket.create_connection(listener.getsockname()):
            yield listener.getsockname()[1]


def port_of(listener: socket.socket) -> int:
    return listener.getsockname()[1]


SEARCH_ANSWER = {"took": 1, "timed_out": False, "_shards": {"total": 1, "successful": 1, "failed": 0}, "hits": {}}


class LiveNode:
    """An asyncio HTTP/1.1 server that answers every request 200 with a
    search answer, on keep-alive connections; records each request line."""

    def __init__(self, delay_s: float = 0.0):
        self.requests: list[bytes] = []
        self.delay_s = delay_s

    async def handle(self, reader, writer):
        try:
            while True:
                head, _body = await read_request(reader)
                self.requests.append(head.split(b"\r\n")[0])
                await asyncio.sleep(self.delay_s)
                body = json.dumps(SEARCH_ANSWER).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the test's loop ends while a slow answer waits
        writer.close()


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


# --- which requests may be sent again ------------------------------------------


@pytest.mark.parametrize(
    "method, target",
    [
        ("GET", "/i/_doc/1"),
        ("HEAD", "/i"),
        ("POST", "/_search"),
        ("POST", "/i/_search"),
        ("POST", "/i,j/_search?size=3"),
        ("POST", "/_all/_search"),
        ("POST", "/i/_search/template"),
        ("POST", "/_msearch"),
        ("POST", "/i/_msearch/template"),
        ("POST", "/i/_count"),
        ("POST", "/_mget"),
        ("POST", "/i/_field_caps?fields=*"),
        ("POST", "/i/_validate/query"),
        ("POST", "/i/_explain/1"),
        ("POST", "/%5Fsearch"),
    ],
)
@pytest.mark.parametrize("engine", PROFILES, ids=SEARCH_BACKENDS)
def test_reads_may_be_sent_again(method, target, engine):
    assert engine.failover.repeatable(method, target)


@pytest.mark.parametrize(
    "method, target",
    [
        ("POST", "/i/_bulk"),
        ("POST", "/_bulk"),
        ("PUT", "/i/_doc/1"),
        ("PUT", "/i/_search"),
        ("DELETE", "/i"),
        ("POST", "/i/_doc"),
        ("POST", "/i/_doc/_search"),  # indexes a document whose id is "_search"
        ("POST", "/i/_doc/%5Fsearch"),
        ("POST", "/i/_update_by_query"),
        ("POST", "/i/_delete_by_query"),
        ("POST", "/_search/scroll"),
        ("POST", "/i/_search?scroll=1m"),
        ("POST", "/i/_pit?keep_alive=1m"),
        ("POST", "/i/_async_search"),
        ("POST", "/i/_refresh"),
        ("POST", "/"),
    ],
)
@pytest.mark.parametrize("engine", PROFILES, ids=SEARCH_BACKENDS)
def test_writes_and_stateful_reads_are_not_sent_again(method, target, engine):
    assert not engine.failover.repeatable(method, target)


def test_only_elasticsearch_has_terms_enum_and_a_silent_node_waits_longer_each_time():
    assert ELASTICSEARCH.failover.repeatable("POST", "/i/_terms_enum")
    assert not OPENSEARCH.failover.repeatable("POST", "/i/_terms_enum")
    failover = dataclasses.replace(ELASTICSEARCH.failover, refused_backoff_s=2.0, max_silent_backoff_s=30.0)
    assert [failover.silent_backoff_s(n) for n in (1, 2, 3, 4, 5, 6)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


# --- the gateway's pass-through pools ---------------------------------------------


async def with_pools(first_port: int, use, *, attempt_s=0.3, connect_s=None, total_s=None, clock=None):
    """NodePools over ``first_port`` (node 0) then a live node."""
    live = LiveNode()
    server = await asyncio.start_server(live.handle, "127.0.0.1", 0)
    pools = [
        OriginPool("127.0.0.1", port, timeout_s=attempt_s, connect_timeout_s=connect_s)
        for port in (first_port, server.sockets[0].getsockname()[1])
    ]
    nodes = NodePools(pools, failover=ELASTICSEARCH.failover, timeout_s=total_s, clock=clock or Clock())
    try:
        return await use(nodes, live)
    finally:
        await nodes.aclose()
        server.close()


def test_a_search_sent_to_a_hung_node_is_answered_by_the_next_and_the_node_passed_over_longer_each_time():
    clock = Clock()

    async def use(nodes, live):
        hung = nodes.pools[0]
        first = await nodes.request("POST", "/i/_search", [], b'{"query":{"match_all":{}}}')
        assert (first.status, hung.opened, len(live.requests)) == (200, 1, 1)
        # Passed over for 2 s: not tried when its turn comes.
        for _ in range(2):
            assert (await nodes.request("POST", "/i/_search", [], b"{}")).status == 200
        assert hung.opened == 1
        clock.now += 2.5
        for _ in range(2):  # its turn comes: silent again, now passed over for 4 s
            assert (await nodes.request("GET", "/i/_count", [], b"")).status == 200
        assert hung.opened == 2
        clock.now += 2.5
        for _ in range(2):
            assert (await nodes.request("GET", "/i/_count", [], b"")).status == 200
        assert hung.opened == 2
        clock.now += 2.0
        for _ in range(2):
            assert (await nodes.request("GET", "/i/_count", [], b"")).status == 200
        return hung.opened, len(live.requests)

    with hung_node() as listener:
        assert asyncio.run(with_pools(port_of(listener), use, clock=clock)) == (3, 9)


def test_a_write_sent_to_a_hung_node_is_not_sent_again():
    async def use(nodes, live):
        with pytest.raises(HttpTimeout, match="no answer within 0.3 s"):
            await nodes.request("POST", "/i/_bulk", [], b'{"index":{}}\n{}\n')
        return len(live.requests)

    with hung_node() as listener:
        assert asyncio.run(with_pools(port_of(listener), use)) == 0
        assert contacts(listener) > 0


def test_a_write_waits_the_whole_request_timeout_where_a_read_is_cut_at_the_attempt_timeout():
    # Both nodes answer after 0.5 s: past a read's attempt (0.2 s), within
    # the request's whole timeout (5 s).
    async def run():
        slow = [LiveNode(delay_s=0.5), LiveNode(delay_s=0.5)]
        servers = [await asyncio.start_server(node.handle, "127.0.0.1", 0) for node in slow]
        pools = [OriginPool("127.0.0.1", server.sockets[0].getsockname()[1], timeout_s=0.2) for server in servers]
        nodes = NodePools(pools, failover=ELASTICSEARCH.failover, timeout_s=5.0, clock=Clock())
        try:
            written = await nodes.request("POST", "/i/_bulk", [], b'{"index":{}}\n{}\n')
            writes = sum(len(node.requests) for node in slow)
            with pytest.raises(HttpTimeout, match="no answer within 0.2 s"):
                await nodes.request("POST", "/i/_search", [], b"{}")
            return written.status, writes, [len(node.requests) for node in slow]
        finally:
            await nodes.aclose()
            for server in servers:
                server.close()

    status, writes, requests = asyncio.run(run())
    # The bulk was answered, on its first node, sent once; the search was
    # cut at 0.2 s on each node in turn and sent to both.
    assert (status, writes) == (200, 1)
    assert requests in ([2, 1], [1, 2])


def test_a_node_not_connected_within_the_connect_timeout_is_passed_over_whatever_the_method():
    async def use(nodes, live):
        # Nothing was sent to node 0, so even a bulk goes on to the next node,
        # well before the 5 s the attempt would have had.
        answer = await nodes.request("POST", "/i/_bulk", [], b'{"index":{}}\n{}\n')
        return answer.status, live.requests

    with unreachable_node() as port:
        status, requests = asyncio.run(with_pools(port, use, attempt_s=5.0, connect_s=0.2))
    assert status == 200 and requests == [b"POST /i/_bulk HTTP/1.1"]


def test_every_attempt_together_stays_within_the_request_timeout():
    async def use(nodes):
        with pytest.raises(HttpTimeout, match="no node answered within 0.4 s"):
            await nodes.request("POST", "/i/_search", [], b"{}")

    async def both_hung(first, second):
        pools = [OriginPool("127.0.0.1", port, timeout_s=0.3) for port in (first, second)]
        await use(NodePools(pools, failover=ELASTICSEARCH.failover, timeout_s=0.4))

    with hung_node() as one, hung_node() as two:
        asyncio.run(both_hung(port_of(one), port_of(two)))
        # The first node's attempt ran out and the second was tried before the whole timeout did.
        assert contacts(one) > 0 and contacts(two) > 0


def test_the_pass_through_pools_take_the_engine_settings():
    from chunkrag_gateway.passthrough import _make_pool

    several = Settings(
        es_url="http://127.0.0.1:1,http://127.0.0.1:2",
        engine=EngineSettings(connect_timeout_s=1.5, attempt_timeout_s=7.0),
    )
    pools = _make_pool(several)
    assert isinstance(pools, NodePools) and pools.timeout_s == several.es_request_timeout_s == 30.0
    assert {pool.timeout_s for pool in pools.pools} == {7.0}
    assert {pool.connect_timeout_s for pool in pools.pools} == {1.5}
    # One node: nowhere else to go, so its one attempt has the whole timeout.
    single = _make_pool(Settings(es_url="http://127.0.0.1:1"))
    assert isinstance(single, OriginPool) and single.timeout_s == 30.0


# --- the engine clients ------------------------------------------------------------


class _Answering(BaseHTTPRequestHandler):
    """Answers every request 200 after ``delay_s``: a search answer, or a
    bulk answer with one item per action; counts the requests."""

    protocol_version = "HTTP/1.1"
    delay_s = 0.0

    def do_POST(self):
        sent = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.requests.append(f"{self.command} {self.path}")
        time.sleep(self.delay_s)
        answer = bulk_answer(sent) if "/_bulk" in self.path else SEARCH_ANSWER
        body = json.dumps(answer).encode()
        self.send_response(200)
        for name, value in (
            ("content-type", "application/json"),
            ("x-elastic-product", "Elasticsearch"),
            ("content-length", str(len(body))),
        ):
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(OSError):  # the client may have given up
            self.wfile.write(body)

    do_GET = do_PUT = do_POST

    def log_message(self, *args):
        pass


def bulk_answer(sent: bytes) -> dict:
    lines = [json.loads(line) for line in sent.splitlines() if line.strip()]
    items, at = [], 0
    while at < len(lines):
        (op, action), at = next(iter(lines[at].items())), at + (1 if "delete" in lines[at] else 2)
        items.append({op: {"_index": action.get("_index", "i"), "_id": action.get("_id"), "status": 200}})
    return {"took": 1, "errors": False, "items": items}


@contextlib.contextmanager
def answering_node(delay_s: float = 0.0):
    handler = type("Delayed", (_Answering,), {"delay_s": delay_s})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def settings_for(*ports: int, attempt_s: float = 0.3, whole_s: float = 30.0, backend: str = "elasticsearch"):
    urls = ",".join(f"http://127.0.0.1:{port}" for port in ports)
    return Settings(
        es_url=urls,
        opensearch_url=urls,
        search_backend=backend,
        es_request_timeout_s=whole_s,
        engine=EngineSettings(attempt_timeout_s=attempt_s),
    )


def backend_for(engine: str, settings: Settings):
    from chunkrag_core.engines import make_backend

    return make_backend(dataclasses.replace(settings, search_backend=engine))


ENGINES = ["elasticsearch", "opensearch"]
ACTIONS = [{"_op_type": "index", "_index": "i", "_id": "a", "_source": {"text": "x"}}]


def bulk_oks(backend) -> list[bool] | str:
    """Each action's outcome, or "timeout" when the bulk raised one
    (elasticsearch-py's helper raises it; opensearch-py's fails each item)."""
    try:
        return [ok for ok, _ in backend.bulk(iter(ACTIONS), chunk_size=500, max_retries=0, initial_backoff=0.1)]
    except EngineTimeout:
        return "timeout"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_search_goes_on_to_the_next_node_after_a_silent_attempt(engine):
    with hung_node() as listener, answering_node() as live:
        backend = backend_for(engine, settings_for(port_of(listener), live.server_address[1]))
        # The clients start at either node: two searches reach the hung one once.
        answers = [backend.search("i", {"query": {"match_all": {}}}) for _ in range(2)]
        assert [answer["_shards"]["failed"] for answer in answers] == [0, 0]
        assert contacts(listener) > 0
        backend.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_search_tries_every_hung_node(engine):
    with hung_node() as one, hung_node() as two:
        backend = backend_for(engine, settings_for(port_of(one), port_of(two)))
        with pytest.raises(EngineTimeout):
            backend.search("i", {"query": {"match_all": {}}})
        assert contacts(one) > 0 and contacts(two) > 0
        backend.close()


WRITES = {
    "bulk": bulk_oks,
    "create_index": lambda backend: backend.create_index("i", {"settings": {}, "mappings": {}}),
    "add_mapping_properties": lambda backend: backend.add_mapping_properties("i", {"x": {"type": "keyword"}}),
    "set_refresh_interval": lambda backend: backend.set_refresh_interval("i", "1s"),
    "refresh": lambda backend: backend.refresh("i"),
    "delete_index": lambda backend: backend.delete_index("i"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_write_to_a_hung_node_is_sent_once_and_not_again_after_its_timeout(engine, write):
    with hung_node() as one, hung_node() as two:
        backend = backend_for(engine, settings_for(port_of(one), port_of(two), attempt_s=0.2, whole_s=0.6))
        try:
            outcome = WRITES[write](backend)
        except EngineTimeout:
            outcome = "timeout"
        # The one node it went to may have carried it out: no other node gets it.
        assert outcome in ("timeout", [False])
        assert contacts(one) + contacts(two) == 1
        backend.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_bulk_to_a_slow_node_waits_the_whole_timeout_where_a_search_is_cut_at_the_attempt(engine):
    # Both nodes answer after 0.8 s: longer than a read's attempt (0.2 s),
    # well within the request's whole timeout (10 s).
    with answering_node(delay_s=0.8) as one, answering_node(delay_s=0.8) as two:
        settings = settings_for(one.server_address[1], two.server_address[1], attempt_s=0.2, whole_s=10.0)
        backend = backend_for(engine, settings)
        assert bulk_oks(backend) == [True]
        assert len(one.requests) + len(two.requests) == 1
        with pytest.raises(EngineTimeout):
            backend.search("i", {"query": {"match_all": {}}})
        searches = [r for r in one.requests + two.requests if "_search" in r]
        assert len(searches) >= 2 and one.requests and two.requests
        backend.close()


def test_writes_keep_the_whole_timeout_and_no_retry_on_timeout_reads_get_the_attempt_with_several_nodes():
    from chunkrag_core.engines.elasticsearch import ElasticsearchBackend
    from chunkrag_core.engines.opensearch import OpenSearchBackend

    single = Settings(es_url="http://127.0.0.1:1", opensearch_url="http://127.0.0.1:1")
    several = settings_for(1, 2)
    # Elasticsearch: the client's own defaults (retry on timeout unset: off).
    for settings in (single, several):
        writes = ElasticsearchBackend.from_settings(settings).client
        assert writes._request_timeout == 30.0 and writes._retry_on_timeout in (False, DEFAULT)
    one = ElasticsearchBackend.from_settings(single)
    assert one.reader is one.client
    backend = ElasticsearchBackend.from_settings(several).with_headers({"authorization": "Basic eDp5"})
    assert (backend.reader._request_timeout, backend.reader._retry_on_timeout) == (0.3, True)
    assert backend.client._retry_on_timeout in (False, DEFAULT) and backend.client._request_timeout == 30.0
    assert backend.reader.transport is backend.client.transport  # one node pool: dead marks shared
    # OpenSearch: a client for the writes as on one node, one for the reads.
    one = OpenSearchBackend.from_settings(single)
    assert one.reader is one.client
    assert (one.client.transport.retry_on_timeout, one.client.transport.kwargs["timeout"]) == (False, 30.0)
    backend = OpenSearchBackend.from_settings(several).with_headers({"authorization": "Basic eDp5"})
    assert (backend.client.transport.retry_on_timeout, backend.client.transport.kwargs["timeout"]) == (False, 30.0)
    assert (backend.reader.transport.retry_on_timeout, backend.reader.transport.kwargs["timeout"]) == (True, 0.3)


# --- the settings --------------------------------------------------------------------


def test_engine_timeouts_are_read_from_the_environment():
    settings = Settings.from_env({"CHUNKRAG_ENGINE_CONNECT_TIMEOUT_S": "0.5", "CHUNKRAG_ENGINE_ATTEMPT_TIMEOUT_S": "4"})
    assert settings.engine == EngineSettings(connect_timeout_s=0.5, attempt_timeout_s=4.0)
    assert Settings.from_env({}).engine == EngineSettings(connect_timeout_s=2.0, attempt_timeout_s=10.0)


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "soon"])
@pytest.mark.parametrize("name", ["CHUNKRAG_ENGINE_CONNECT_TIMEOUT_S", "CHUNKRAG_ENGINE_ATTEMPT_TIMEOUT_S"])
def test_a_bad_engine_timeout_is_refused_with_its_name(name, raw):
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: raw})


def test_an_attempt_has_the_whole_timeout_with_one_node_and_never_more_than_it():
    settings = Settings()
    assert settings.attempt_timeout_s(("http://a:9200",)) == 30.0
    assert settings.attempt_timeout_s(("http://a:9200", "http://b:9200")) == 10.0
    short = Settings(es_request_timeout_s=5.0)
    assert short.attempt_timeout_s(("http://a:9200", "http://b:9200")) == 5.0
