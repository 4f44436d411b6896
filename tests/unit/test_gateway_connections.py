"""What a client connection may hold, over real loopback sockets against a
trivial app: header sizes (431), the header deadline (slow and silent
clients), and the connection caps (503)."""

from __future__ import annotations

import socket
import time

import pytest

from chunkrag_core.settings import GatewaySettings
from chunkrag_gateway import connections
from chunkrag_gateway.connections import ConnectionLimits
from chunkrag_gateway.server import serve_in_thread, uvicorn_options


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    status = 413  # /early answers before reading the body, as the body limit does
    if scope["path"] != "/early":
        status = 200
        while (await receive()).get("more_body"):
            pass
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


def serve(**limits):
    return serve_in_thread(app, gateway=GatewaySettings(**limits))


def address(url):
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def connect(url, source="127.0.0.1"):
    sock = socket.socket()
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(address(url))
    return sock


def read_all(sock) -> bytes:
    """Everything until the server closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def request(head_lines=(), body=b"", path=b"/"):
    lines = [b"POST " + path + b" HTTP/1.1", b"host: x", b"content-length: %d" % len(body), *head_lines]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def test_a_header_line_over_the_limit_is_431_and_closes():
    with serve(max_header_line_bytes=1000) as url, connect(url) as sock:
        sock.sendall(request([b"x-big: " + b"a" * 1000]))
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"MAX_HEADER_LINE_BYTES" in answer and b"connection: close" in answer


def test_headers_over_the_total_limit_are_431_whole_or_trickled():
    with serve(max_header_bytes=4000) as url:
        with connect(url) as sock:
            sock.sendall(request([b"x-%d: %s" % (n, b"a" * 500) for n in range(10)]))
            assert read_all(sock).startswith(b"HTTP/1.1 431 ")
        # A head that never ends is refused once it is too long, not buffered.
        with connect(url) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nx-endless: ")
            for _ in range(10):
                try:
                    sock.sendall(b"a" * 1000)
                except (BrokenPipeError, ConnectionResetError):
                    break
            assert read_all(sock).startswith(b"HTTP/1.1 431 ")


def test_a_refused_head_still_read_is_dropped_until_the_linger_ends(monkeypatch):
    # The 431 reaches a client still sending (no reset discards it), what it
    # sends next is read and dropped, and the connection ends after LINGER_S.
    monkeypatch.setattr(connections, "LINGER_S", 1.0)
    with serve(max_header_bytes=4000) as url, connect(url) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nx-endless: " + b"a" * 5000)
        assert read_all(sock).startswith(b"HTTP/1.1 431 ")
        sock.sendall(b"a" * 1000)
        time.sleep(1.2)
        deadline = time.monotonic() + 10  # bounded on a busy machine too
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            while time.monotonic() < deadline:
                sock.sendall(b"a" * 1000)
                time.sleep(0.05)


def test_headers_within_the_limits_pass_and_keep_alive_works():
    with serve(max_header_bytes=4000, max_header_line_bytes=1000) as url, connect(url) as sock:
        for _ in range(3):
            sock.sendall(request([b"x-ok: " + b"a" * 900], b"{}"))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_a_body_left_unread_by_an_early_answer_is_discarded_and_the_connection_serves_on():
    with serve(max_header_bytes=4000) as url, connect(url) as sock:
        body = b"x" * 200_000  # far over the header limit: it must not count as the next head
        sock.sendall(request(body=body, path=b"/early")[: -len(body)])
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
        sock.sendall(body)
        sock.sendall(request(body=b"{}"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_a_body_trickled_after_an_early_answer_gets_the_body_timeout():
    with serve(body_timeout_s=0.5, header_timeout_s=30, keep_alive_s=30) as url, connect(url) as sock:
        sock.sendall(request(body=b"x" * 1000, path=b"/early")[:-1000])
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
        for _ in range(20):
            time.sleep(0.1)
            try:
                sock.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                break
        assert read_all(sock) == b""


def test_silent_and_slow_connections_are_closed_after_the_header_timeout():
    with serve(header_timeout_s=0.5, keep_alive_s=30) as url:
        with connect(url) as silent, connect(url) as slow:
            slow.sendall(b"GET / HTTP/1.1\r\n")
            for n in range(5):  # a header line at a time, too slowly
                time.sleep(0.2)
                try:
                    slow.sendall(b"x-%d: 1\r\n" % n)
                except (BrokenPipeError, ConnectionResetError):
                    break
            assert read_all(silent) == b""
            assert read_all(slow).startswith(b"HTTP/1.1 408 ")
        # The deadline starts again after each response: a served
        # connection left idle is closed too.
        with connect(url) as served:
            served.sendall(request())
            assert served.recv(65536).startswith(b"HTTP/1.1 200 ")
            assert read_all(served) == b""


def test_connections_over_the_per_address_cap_are_refused_with_503():
    with serve(max_connections_per_address=2) as url:
        first, second = connect(url), connect(url)
        third = connect(url)
        other = connect(url, source="127.0.0.2")
        try:
            answer = read_all(third)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"MAX_CONNECTIONS_PER_ADDRESS" in answer
            other.sendall(request())
            assert other.recv(65536).startswith(b"HTTP/1.1 200 ")
            first.close()
            # The closed connection's place is free again (its close may take a moment to be seen).
            for _ in range(50):
                with connect(url) as again:
                    again.sendall(request())
                    if again.recv(65536).startswith(b"HTTP/1.1 200 "):
                        break
                time.sleep(0.05)
            else:
                pytest.fail("a freed place was never given again")
        finally:
            for sock in (first, second, third, other):
                sock.close()


def test_overall_cap_refuses_with_503():
    with serve(max_connections=2, max_connections_per_address=0) as url:
        socks = [connect(url, source=f"127.0.0.{n}") for n in (1, 2, 3)]
        try:
            assert read_all(socks[2]).startswith(b"HTTP/1.1 503 ")
        finally:
            for sock in socks:
                sock.close()


def test_at_the_cap_a_newcomer_takes_the_place_of_the_heaviest_addresss_oldest_pending_connection():
    with serve(max_connections=4, max_connections_per_address=0, header_timeout_s=30, keep_alive_s=30) as url:
        heavy = [connect(url, source="127.0.0.2") for _ in range(3)]
        heavy[0].sendall(b"GET / HTTP/1.1\r\n")  # part of a head: told why with a 503
        light = connect(url, source="127.0.0.3")
        time.sleep(0.2)
        newcomer = connect(url, source="127.0.0.4")
        try:
            newcomer.sendall(request())
            assert newcomer.recv(65536).startswith(b"HTTP/1.1 200 ")
            evicted = read_all(heavy[0])
            assert evicted.startswith(b"HTTP/1.1 503 ") and b"holds the most connections" in evicted
            # Another newcomer takes the next oldest of the heaviest (now 2 against its 0), silently.
            second = connect(url, source="127.0.0.5")
            second.sendall(request())
            assert second.recv(65536).startswith(b"HTTP/1.1 200 ")
            assert read_all(heavy[1]) == b""
            # Between near-equals nothing is taken: the cap refuses as before.
            third = connect(url, source="127.0.0.6")
            assert read_all(third).startswith(b"HTTP/1.1 503 ")
            light.sendall(request())  # the light address kept its connection
            assert light.recv(65536).startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in (*heavy, light, newcomer):
                sock.close()


def test_near_the_cap_new_heads_get_the_shorter_header_deadline():
    from chunkrag_gateway.connections import PRESSED_HEADER_TIMEOUT_S

    with serve(max_connections=4, header_timeout_s=30, keep_alive_s=30) as url:
        held = [connect(url) for _ in range(2)]  # half the cap: under pressure from here
        late = connect(url)
        late.settimeout(PRESSED_HEADER_TIMEOUT_S + 8)
        try:
            late.sendall(b"GET / HTTP/1.1\r\n")
            answer = read_all(late)  # well before its 30 s deadline
            assert answer.startswith(b"HTTP/1.1 408 ") and b"within 2 s" in answer
        finally:
            for sock in (*held, late):
                sock.close()


def test_limits_come_from_the_settings_and_stay_below_the_descriptor_limit():
    import resource

    limits = ConnectionLimits.from_settings(GatewaySettings(max_connections=10**9, header_timeout_s=3))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert limits.header_timeout_s == 3 and (limits.max_connections < soft or soft == resource.RLIM_INFINITY)
    options = uvicorn_options(GatewaySettings(keep_alive_s=7))
    assert (
        options["timeout_keep_alive"] == 7
        and options["http"].limits.max_header_bytes == GatewaySettings().max_header_bytes
    )
    # Each server gets its own counts.
    assert options["http"].counts is not uvicorn_options(GatewaySettings())["http"].counts
    with pytest.raises(ValueError, match="HEADER_TIMEOUT_S"):
        uvicorn_options(GatewaySettings(header_timeout_s=0))


def test_pipelined_requests_are_all_answered():
    with serve(header_timeout_s=1) as url, connect(url) as sock:
        sock.sendall(request(body=b"{}") * 3)
        answers = b""
        while answers.count(b"HTTP/1.1 200 ") < 3:
            answers += sock.recv(65536)
        assert answers.count(b"HTTP/1.1 200 ") == 3
