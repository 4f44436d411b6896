"""The pass-through's HTTP/1.1 pool against a scripted asyncio server on
loopback: framing, keep-alive, stale connections, failures."""

import asyncio
import socket

import pytest

from search_extension.gateway.http11 import Http11Pool, HttpFailure, HttpTimeout


class Server:
    """Answers each request with the next scripted raw response; records
    the raw requests and how many connections were opened."""

    def __init__(self, responses, close_after_each=False, delay_s=0.0):
        self.responses, self.close_after_each, self.delay_s = list(responses), close_after_each, delay_s
        self.requests, self.connections = [], 0

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while self.responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                self.requests.append(head + await reader.readexactly(length))
                await asyncio.sleep(self.delay_s)
                writer.write(self.responses.pop(0))
                await writer.drain()
                if self.close_after_each:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()


async def with_server(server, use):
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    pool = Http11Pool("127.0.0.1", port, timeout_s=1.0, default_headers=((b"authorization", b"ApiKey k"),))
    try:
        return await use(pool)
    finally:
        await pool.aclose()
        listening.close()


def run(server, use):
    return asyncio.run(with_server(server, use))


OK = b"HTTP/1.1 200 OK\r\nX-Elastic-Product: Elasticsearch\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def test_request_is_encoded_with_host_credentials_and_length():
    server = Server([OK])
    response = run(server, lambda pool: pool.request("POST", "/i/_search?q=a%20b", [(b"content-type", b"application/json")], b'{"size":1}'))
    assert (response.status, response.body) == (200, b"{}")
    assert (b"x-elastic-product", b"Elasticsearch") in response.headers
    lines = server.requests[0].split(b"\r\n")
    assert lines[0] == b"POST /i/_search?q=a%20b HTTP/1.1"
    assert set(lines[1:5]) == {b"host: 127.0.0.1:" + lines[1].split(b":")[-1], b"authorization: ApiKey k", b"content-type: application/json", b"content-length: 10"}
    assert server.requests[0].endswith(b'\r\n\r\n{"size":1}')


def test_keep_alive_reuses_one_connection():
    server = Server([OK, OK, OK])

    async def three(pool):
        return [await pool.request("GET", "/", [], b"") for _ in range(3)]

    assert [r.status for r in run(server, three)] == [200, 200, 200] and server.connections == 1


def test_chunked_bodies_are_joined_and_framing_headers_dropped():
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n4\r\n{\"a\"\r\n3;ext=1\r\n:1}\r\n0\r\n\r\n"
    response = run(Server([chunked]), lambda pool: pool.request("GET", "/_cat/indices", [], b""))
    assert response.body == b'{"a":1}' and response.headers == ()


def test_head_has_no_body_and_keeps_the_declared_length():
    head = b"HTTP/1.1 404 Not Found\r\ncontent-length: 120\r\n\r\n"
    server = Server([head, OK])

    async def both(pool):
        return await pool.request("HEAD", "/missing", [], b""), await pool.request("GET", "/", [], b"")

    missing, after = run(server, both)
    assert (missing.status, missing.body, dict(missing.headers)[b"content-length"]) == (404, b"", b"120")
    assert after.status == 200 and server.connections == 1


def test_a_connection_the_server_closed_is_replaced():
    server = Server([OK, OK], close_after_each=True)

    async def twice(pool):
        first = await pool.request("GET", "/", [], b"")
        await asyncio.sleep(0.05)  # the server's close arrives while the connection is idle
        return first, await pool.request("GET", "/", [], b"")

    assert [r.status for r in run(server, twice)] == [200, 200] and server.connections == 2


def test_connection_close_and_unframed_bodies_end_with_the_connection():
    unframed = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    assert run(Server([unframed]), lambda pool: pool.request("GET", "/", [], b"")).body == b"all of it"


def test_unreachable_and_slow_origins_raise_their_own_errors():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(HttpFailure, match="cannot connect"):
        asyncio.run(Http11Pool("127.0.0.1", port).request("GET", "/", [], b""))
    with pytest.raises(HttpTimeout):
        run(Server([OK], delay_s=2.0), lambda pool: pool.request("GET", "/", [], b""))


def test_a_broken_response_is_a_failure():
    with pytest.raises(HttpFailure):
        run(Server([b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"], close_after_each=True), lambda pool: pool.request("GET", "/", [], b""))


def test_line_breaks_cannot_be_smuggled_into_the_request():
    pool = Http11Pool("127.0.0.1", 9)
    with pytest.raises(ValueError):
        asyncio.run(pool.request("GET", "/a\r\nx: y", [], b""))
    with pytest.raises(ValueError):
        asyncio.run(pool.request("GET", "/", [(b"x", b"1\r\ny: 2")], b""))
