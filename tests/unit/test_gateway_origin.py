"""The pass-through's connection pool against a scripted server on loopback:
framing, keep-alive, and every way a connection must not be reused (an
error status, a response cut short, a timeout mid-exchange)."""

import asyncio
import dataclasses
import socket

import pytest

from chunkrag_core.engines.profile import ELASTICSEARCH
from chunkrag_gateway.origin import HttpConnectFailure, HttpFailure, HttpTimeout, NodePools, OriginPool
from tests.support.raw_http import read_request

# Script steps besides a raw response: stop reading and answering but keep
# the socket open (Elasticsearch after a too-long header), close it right
# after the response before, or close it once the request is read, without
# answering (a node killed while it held the request).
IGNORE, CLOSE, DROP = "ignore", "close", "drop"


class Server:
    """Each connection plays the next script: per request, a raw response,
    (delay_s, raw response), IGNORE or CLOSE. Records the raw requests and
    which connection each came on."""

    def __init__(self, *scripts):
        self.scripts = [list(script) for script in scripts]
        self.requests, self.connections = [], 0
        self._held = []

    async def handle(self, reader, writer):
        number = self.connections
        self.connections += 1
        script = self.scripts.pop(0) if self.scripts else []
        try:
            while script:
                head, body = await read_request(reader)
                self.requests.append((number, head + body))
                step = script.pop(0)
                if step == DROP:
                    break
                if step == IGNORE:
                    self._held.append(writer)
                    await asyncio.sleep(3600)
                if isinstance(step, tuple):
                    await asyncio.sleep(step[0])
                    step = step[1]
                writer.write(step)
                await writer.drain()
                if script and script[0] == CLOSE:  # right after this response
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


async def with_server(server, use, timeout_s=1.0):
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    pool = OriginPool("127.0.0.1", port, timeout_s=timeout_s)
    try:
        return await use(pool)
    finally:
        await pool.aclose()
        listening.close()


def run(server, use, timeout_s=1.0):
    return asyncio.run(with_server(server, use, timeout_s))


def ok(body=b"{}", status=b"200 OK"):
    return (
        b"HTTP/1.1 %s\r\nX-Elastic-Product: Elasticsearch\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (status, len(body), body)
    )


OK = ok()
TOO_LONG = ok(b'{"error":{"type":"too_long_http_header_exception"},"status":400}', b"400 Bad Request")


def get(pool, target="/"):
    return pool.request("GET", target, [], b"")


def test_request_is_encoded_with_host_and_length():
    server = Server([OK])
    response = run(
        server,
        lambda pool: pool.request(
            "POST",
            "/i/_search?q=a%20b",
            [(b"authorization", b"ApiKey k"), (b"content-type", b"application/json")],
            b'{"size":1}',
        ),
    )
    assert (response.status, response.body) == (200, b"{}")
    assert (b"x-elastic-product", b"Elasticsearch") in response.headers
    lines = server.requests[0][1].split(b"\r\n")
    assert lines[0] == b"POST /i/_search?q=a%20b HTTP/1.1"
    assert set(lines[1:5]) == {
        b"host: 127.0.0.1:" + lines[1].split(b":")[-1],
        b"authorization: ApiKey k",
        b"content-type: application/json",
        b"content-length: 10",
    }
    assert server.requests[0][1].endswith(b'\r\n\r\n{"size":1}')


def test_keep_alive_reuses_one_connection_after_success_and_404():
    not_found = b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}"
    server = Server([OK, not_found, OK])

    async def three(pool):
        return [(await get(pool)).status for _ in range(3)]

    assert run(server, three) == [200, 404, 200] and server.connections == 1


def test_a_400_then_an_ignored_socket_does_not_poison_the_pool():
    # Elasticsearch's answer to a too-long header: 400 without Connection:
    # close, then the socket is never read again. Reusing it hung for 30 s.
    server = Server([TOO_LONG, IGNORE], [OK, OK])

    async def after_the_400(pool):
        return [(await get(pool)).status for _ in range(3)]

    assert run(server, after_the_400) == [400, 200, 200]
    assert [number for number, _ in server.requests] == [0, 1, 1]


@pytest.mark.parametrize("status", [400, 408, 413, 414, 431, 500, 502, 503])
def test_no_connection_is_reused_after_an_untrusted_status(status):
    answer = b"HTTP/1.1 %d X\r\ncontent-length: 2\r\n\r\n{}" % status
    server = Server([answer, OK], [OK])

    async def twice(pool):
        return [(await get(pool)).status for _ in range(2)]

    assert run(server, twice) == [status, 200] and [number for number, _ in server.requests] == [0, 1]


class SplitServer(Server):
    """Answers its first request's head, then its body a moment later (the
    status is read before the body ends), then plays its script."""

    def __init__(self, head, body, *scripts):
        super().__init__(*scripts)
        self.split = (head, body)

    async def handle(self, reader, writer):
        if self.connections == 0:
            self.connections += 1
            head, body = await read_request(reader)
            self.requests.append((0, head + body))
            writer.write(self.split[0])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(self.split[1])
            await writer.drain()
            await asyncio.sleep(3600)  # then ignores the socket, as after a too-long header
            return
        await super().handle(reader, writer)


def test_an_untrusted_status_whose_body_comes_later_still_closes_its_connection():
    body = b'{"error":{"type":"too_long_http_header_exception"},"status":400}'
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(body)
    server = SplitServer(head, body, [OK])

    async def twice(pool):
        first = await get(pool)
        return (first.status, first.body), (await get(pool)).status

    assert run(server, twice) == ((400, body), 200)
    assert [number for number, _ in server.requests] == [0, 1]


def test_the_target_and_headers_go_out_as_given_and_bodies_come_back_undecoded():
    gzipped = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
    answer = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%s" % (len(gzipped), gzipped)
    server = Server([answer])
    target = "/%3Clogs-%7Bnow%2Fd%7D%3E,b/_search?q=a%20b&x=%2F&y=%c3%a9"
    response = run(server, lambda pool: pool.request("GET", target, [(b"accept-encoding", b"gzip")], b""))
    assert response.body == gzipped and (b"content-encoding", b"gzip") in response.headers
    lines = server.requests[0][1].split(b"\r\n")
    assert lines[0] == b"GET " + target.encode() + b" HTTP/1.1"
    # Nothing added: no User-Agent, Accept, Content-Type or Content-Length of the client's own.
    assert [line.split(b":")[0] for line in lines[1:] if line] == [b"host", b"accept-encoding"]


def test_a_kept_alive_connection_closed_unanswered_is_replaced_for_any_method():
    # The server closes a kept-alive connection as the next request arrives
    # (its idle timeout racing the request): nothing was processed, so even
    # a POST goes again, on a new connection.
    server = Server([OK, DROP], [ok(b'"again"')])

    async def twice(pool):
        await pool.request("POST", "/i/_doc", [], b"{}")
        return (await pool.request("POST", "/i/_doc", [], b"{}")).body

    assert run(server, twice) == b'"again"'
    assert [number for number, _ in server.requests] == [0, 0, 1]


def test_a_server_closing_mid_body_is_a_failure_and_the_connection_is_dropped():
    cut = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 20
    server = Server([cut, CLOSE], [OK])

    async def twice(pool):
        with pytest.raises(HttpFailure, match="broke off"):
            await get(pool)
        return (await get(pool)).status

    assert run(server, twice) == 200 and server.connections == 2


@pytest.mark.parametrize(
    "truncated",
    [
        b"HTTP/1.1 200 OK\r\ncontent-le",  # inside the head
        b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{"a"\r\n',  # chunked, no last chunk
    ],
)
def test_a_truncated_response_is_a_failure(truncated):
    server = Server([truncated, CLOSE], [OK])

    async def twice(pool):
        with pytest.raises(HttpFailure):
            await get(pool)
        return (await get(pool)).status

    assert run(server, twice) == 200


def test_a_timed_out_exchange_never_lends_its_late_answer_to_the_next_request():
    server = Server([(1.5, ok(b'"late"')), OK], [ok(b'"second"')])

    async def twice(pool):
        with pytest.raises(HttpTimeout):
            await get(pool)
        return (await get(pool)).body

    assert run(server, twice) == b'"second"'


def test_chunked_bodies_are_joined_and_framing_headers_dropped():
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        b'4\r\n{"a"\r\n3;ext=1\r\n:1}\r\n0\r\n\r\n'
    )
    response = run(Server([chunked]), lambda pool: get(pool, "/_cat/indices"))
    assert response.body == b'{"a":1}' and response.headers == ()


def test_head_has_no_body_and_keeps_the_declared_length():
    head = b"HTTP/1.1 404 Not Found\r\ncontent-length: 120\r\n\r\n"
    server = Server([head, OK])

    async def both(pool):
        return await pool.request("HEAD", "/missing", [], b""), await get(pool)

    missing, after = run(server, both)
    assert (missing.status, missing.body, dict(missing.headers)[b"content-length"]) == (404, b"", b"120")
    assert after.status == 200 and server.connections == 1


def test_a_connection_the_server_closed_is_replaced():
    server = Server([OK], [OK])

    async def twice(pool):
        first = await get(pool)
        await asyncio.sleep(0.05)  # the server's close arrives while the connection is idle
        return first, await get(pool)

    assert [r.status for r in run(server, twice)] == [200, 200] and server.connections == 2


def test_connection_close_and_unframed_bodies_end_with_the_connection():
    unframed = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    assert run(Server([unframed]), get).body == b"all of it"


def test_unreachable_and_slow_origins_raise_their_own_errors():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(HttpFailure, match="cannot connect"):
        asyncio.run(OriginPool("127.0.0.1", port).request("GET", "/", [], b""))
    with pytest.raises(HttpTimeout):
        run(Server([(2.0, OK)]), get)


def test_line_breaks_cannot_be_smuggled_into_the_request():
    pool = OriginPool("127.0.0.1", 9)
    with pytest.raises(ValueError):
        asyncio.run(pool.request("GET", "/a\r\nx: y", [], b""))
    with pytest.raises(ValueError):
        asyncio.run(pool.request("GET", "/", [(b"x", b"1\r\ny: 2")], b""))


# --- a cluster given as several nodes (NodePools) -----------------------------


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


async def with_nodes(servers, use, clock=None):
    """NodePools over a refused port (node 0) then one live server per script."""
    listening = [await asyncio.start_server(server.handle, "127.0.0.1", 0) for server in servers]
    pools = [OriginPool("127.0.0.1", closed_port(), timeout_s=1.0)]
    pools += [OriginPool("127.0.0.1", live.sockets[0].getsockname()[1], timeout_s=1.0) for live in listening]
    failover = dataclasses.replace(ELASTICSEARCH.failover, refused_backoff_s=2.0)
    nodes = NodePools(pools, failover=failover, clock=clock or Clock())
    try:
        return await use(nodes)
    finally:
        await nodes.aclose()
        for live in listening:
            live.close()


def test_a_refused_node_is_passed_over_for_any_method_and_skipped_for_its_backoff():
    server, clock = Server([OK] * 5), Clock()

    async def use(nodes):
        refused, live = nodes.pools
        # The first request starts at node 0: refused, so nothing was sent; a POST goes on too.
        first = await nodes.request("POST", "/i/_bulk", [], b'{"index":{}}\n{}\n')
        assert (first.status, refused.opened, live.opened) == (200, 1, 1)
        # In its backoff, node 0 is not tried again even when its turn comes.
        for _ in range(2):
            assert (await nodes.request("GET", "/", [], b"")).status == 200
        assert refused.opened == 1
        # Past its backoff it is tried again when its turn comes (and refuses again).
        clock.now += 2.5
        for _ in range(2):
            assert (await nodes.request("GET", "/", [], b"")).status == 200
        return refused.opened

    assert asyncio.run(with_nodes([server], use, clock)) == 2
    assert [number for number, _ in server.requests] == [0] * 5  # one kept-alive connection
    assert server.requests[0][1].startswith(b"POST /i/_bulk HTTP/1.1")


def test_every_node_refusing_raises_the_connect_failure():
    async def use(nodes):
        with pytest.raises(HttpConnectFailure, match="cannot connect"):
            await nodes.request("GET", "/", [], b"")

    async def only_refused():
        pools = [OriginPool("127.0.0.1", closed_port()), OriginPool("127.0.0.1", closed_port())]
        await use(NodePools(pools, failover=ELASTICSEARCH.failover))
        return [pool.opened for pool in pools]

    # Each node tried once, and again on the next request although both are in their backoff.
    assert asyncio.run(only_refused()) == [1, 1]


@pytest.mark.parametrize("method, replayed", [("GET", True), ("HEAD", True), ("POST", False), ("PUT", False)])
def test_a_request_sent_and_broken_off_is_replayed_elsewhere_only_when_idempotent(method, replayed):
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"  # a HEAD's answer has no body
    dropping, answering = Server([DROP]), Server([head if method == "HEAD" else OK])

    async def use(nodes):
        _refused, first, second = nodes.pools
        nodes._turn = 1  # start at the node that drops the request it read
        if replayed:
            assert (await nodes.request(method, "/i/_doc/1", [], b"")).status == 200
        else:
            with pytest.raises(HttpFailure, match="broke off") as raised:
                await nodes.request(method, "/i/_doc/1", [(b"content-type", b"application/json")], b"{}")
            assert not isinstance(raised.value, HttpConnectFailure)
        return first.opened, second.opened

    assert asyncio.run(with_nodes([dropping, answering], use)) == ((1, 1) if replayed else (1, 0))
    assert len(dropping.requests) == 1 and len(answering.requests) == (1 if replayed else 0)


@pytest.mark.parametrize("method, target, replayed", [("GET", "/", True), ("PUT", "/i/_doc/1", False)])
def test_a_timeout_is_retried_on_another_node_only_when_the_request_may_be_repeated(method, target, replayed):
    slow, spare = Server([(2.0, OK)]), Server([OK])

    async def use(nodes):
        nodes._turn = 1
        if replayed:
            assert (await nodes.request(method, target, [], b"")).status == 200
        else:
            with pytest.raises(HttpTimeout):
                await nodes.request(method, target, [], b"{}")
        return nodes.pools[2].opened

    assert asyncio.run(with_nodes([slow, spare], use)) == (1 if replayed else 0)
