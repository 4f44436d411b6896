"""What one client connection may hold: uvicorn's httptools protocol with
the limits uvicorn lacks, passed as ``uvicorn.Config(http=...)``.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but
never a new connection that sends nothing, nor one that trickles its
headers (a header line every 10 s kept a connection forever: ~20,000 of them
exhausted the gateway's file descriptors); ``limit_concurrency`` caps
requests, not open connections; and a request's headers may be of any size.
Here:

- a request's line and headers must be complete within ``header_timeout_s``
  of the connection's opening or of the previous response, else the
  connection is closed (with a 408 if part of a request came);
- at most ``max_connections`` connections are open, and at most
  ``max_connections_per_address`` from one client address: one more is
  answered 503 and closed at once;
- fairness once the overall cap is near: above ``PRESSURE_SHARE`` of it, a
  new head gets ``PRESSED_HEADER_TIMEOUT_S`` (not ``header_timeout_s``), and
  at the cap a new connection from an address holding few is not refused
  but takes the place of the oldest connection still sending its request
  (its head or its body, or idle between requests) of the address holding
  the most. Many addresses each trickling headers (20 addresses, ~100 new
  connections a second) kept the cap full and locked every other caller
  out; now they only crowd each other;
- a request whose line and headers exceed ``max_header_bytes``, or with a
  header line over ``max_header_line_bytes``, is answered 431 and the
  connection closed, before the app sees it. Elasticsearch answers headers
  over 16 KB with a 400 and then stops reading the connection, so they must
  not reach it.

One protocol class per server (``protocol_class``): it carries that
server's counts. Everything runs on the server's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from dataclasses import dataclass

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from chunkrag_gateway import errors

# File descriptors kept for everything but client connections (the pool to
# Elasticsearch, Redis, model calls, logs).
RESERVED_FDS = 128


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    max_connections: int = 1000
    max_connections_per_address: int = 100
    max_header_bytes: int = 12_288
    max_header_line_bytes: int = 8_192
    body_timeout_s: float = 30.0

    @classmethod
    def from_settings(cls, gateway) -> ConnectionLimits:
        """From ``GatewaySettings``; the overall cap stays below the process's
        file-descriptor limit, which would otherwise be reached first."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        ceiling = (
            gateway.max_connections
            if soft == resource.RLIM_INFINITY
            else min(gateway.max_connections, max(1, soft - RESERVED_FDS))
        )
        return cls(
            gateway.header_timeout_s,
            ceiling,
            gateway.max_connections_per_address,
            gateway.max_header_bytes,
            gateway.max_header_line_bytes,
            gateway.body_timeout_s,
        )


# Above this share of the overall cap, the gateway is under pressure: new
# heads get PRESSED_HEADER_TIMEOUT_S.
PRESSURE_SHARE = 0.5
# Seconds a connection refused with 431 still reads (and drops) what its
# client sends before it is closed (`_linger`): long enough for the client to
# read the answer, short enough that refused connections do not pile up.
LINGER_S = 2.0
# The header deadline under pressure. A client sends its request line and
# headers in one packet (milliseconds, even over a slow mobile link); only a
# client holding connections open on purpose needs longer.
PRESSED_HEADER_TIMEOUT_S = 2.0
# At the cap, a new connection takes a place only from an address holding at
# least this many more than the new one's: between equals (two callers with
# a connection each) nothing is taken.
EVICTION_MARGIN = 2


class _Counts:
    def __init__(self):
        self.total = 0
        self.by_address: Counter[str] = Counter()
        # Since the server started, for the metrics: refused by which cap,
        # closed by the gateway for which reason.
        self.refused: Counter[str] = Counter()
        self.shed: Counter[str] = Counter()
        # Per address, its connections whose request has not fully arrived
        # (head or body still coming, or idle between requests), oldest first:
        # those a newcomer may take the place of.
        self.pending: dict[str | None, dict[LimitedHttpToolsProtocol, None]] = {}

    def pressed(self, limits: ConnectionLimits) -> bool:
        return self.total >= PRESSURE_SHARE * limits.max_connections

    def admit(self, address: str | None, limits: ConnectionLimits) -> str | None:
        """Count a new connection in (at the cap, in the place of another
        address's oldest pending connection), or say why it is refused."""
        if self.total >= limits.max_connections:
            victim = self._victim(address)
            if victim is None:
                self.refused["total"] += 1
                return (
                    f"the gateway holds its maximum of {limits.max_connections} connections "
                    "(CHUNKRAG_GATEWAY_MAX_CONNECTIONS)"
                )
            self.shed["evicted_at_cap"] += 1
            victim.evict()
        per_address = limits.max_connections_per_address
        if per_address > 0 and address is not None and self.by_address[address] >= per_address:
            self.refused["per_address"] += 1
            return (
                f"{per_address} connections from this address are open already "
                "(CHUNKRAG_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS)"
            )
        self.total += 1
        if address is not None:
            self.by_address[address] += 1
        return None

    def release(self, address: str | None) -> None:
        self.total -= 1
        if address is not None:
            self.by_address[address] -= 1
            if self.by_address[address] <= 0:
                del self.by_address[address]

    def _victim(self, address: str | None) -> LimitedHttpToolsProtocol | None:
        """The oldest pending connection of the address holding the most,
        when that address holds at least EVICTION_MARGIN more than ``address``."""
        held = self.by_address[address] if address is not None else 0
        candidates = [
            (self.by_address[other], other)
            for other, waiting in self.pending.items()
            if other is not None and waiting and other != address
        ]
        if not candidates:
            return None
        most, heaviest = max(candidates)
        if most < held + EVICTION_MARGIN:
            return None
        return next(iter(self.pending[heaviest]))

    def waiting(self, connection: LimitedHttpToolsProtocol, address: str | None, pending: bool) -> None:
        """Mark ``connection`` as one whose request has not fully arrived, or not."""
        waiting = self.pending.get(address)
        if pending:
            if waiting is None:
                waiting = self.pending[address] = {}
            waiting[connection] = None
        elif waiting is not None:
            waiting.pop(connection, None)
            if not waiting:
                del self.pending[address]


def protocol_class(limits: ConnectionLimits) -> type[LimitedHttpToolsProtocol]:
    """A protocol class for one server, with its own connection counts."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits, "counts": _Counts()})


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ConnectionLimits = ConnectionLimits()
    counts: _Counts = _Counts()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = self.client[0] if self.client else None
        self._counted = self._refused = False
        self._timer: asyncio.TimerHandle | None = None
        # Between the end of a request and the end of the next one's head;
        # the bytes received meanwhile (the next head, as far as it came).
        self._in_head, self._head_received, self._message_done = True, 0, True
        refusal = self.counts.admit(self._address, self.limits)
        if refusal is not None:
            self._refuse(errors.GatewayError(503, "unavailable_exception", refusal, headers={"retry-after": "1"}))
            return
        self._counted = True
        self._wait_for_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        self._stop_timer()
        super().connection_lost(exc)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self.counts.waiting(self, self._address, False)
            self.counts.release(self._address)

    def evict(self) -> None:
        """Give this connection's place to a newcomer (at the cap): a 503
        if part of a request came, else a silent close; its count is freed now."""
        self._uncount()
        if self._head_received or not self._in_head:
            self._refuse(
                errors.GatewayError(
                    503,
                    "unavailable_exception",
                    "the gateway is at its connection cap and this address holds the most connections "
                    "still sending their requests (CHUNKRAG_GATEWAY_MAX_CONNECTIONS)",
                    headers={"retry-after": "1"},
                )
            )
        else:
            self._close()

    def _wait_for_head(self) -> None:
        """The next head's deadline (shorter under pressure); until it has
        come, this connection may give its place to a newcomer."""
        self._head_timeout_s = self.limits.header_timeout_s
        if self.counts.pressed(self.limits):
            self._head_timeout_s = min(self._head_timeout_s, PRESSED_HEADER_TIMEOUT_S)
        self.counts.waiting(self, self._address, True)
        self._start_timer(self._head_timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        counted = self._in_head
        if counted:
            self._head_received += len(data)
        super().data_received(data)
        # A head that never ends is buffered by the parser until it does:
        # refuse it as soon as it is too long, whatever it holds.
        if counted and self._in_head and self._head_received > self.limits.max_header_bytes:
            self._refuse(
                _too_long(
                    f"the request line and headers are larger than {self.limits.max_header_bytes} bytes "
                    "(CHUNKRAG_GATEWAY_MAX_HEADER_BYTES)"
                )
            )

    # Parser callbacks: sizes of the head as the parser sees it.
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_size, self._longest_line, self._message_done = 0, 0, False

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        line = len(name) + len(value) + 4  # ": " and CRLF
        self._head_size += line
        self._longest_line = max(self._longest_line, line)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_timer()
        if self._refused:
            return
        if self._longest_line > self.limits.max_header_line_bytes:
            return self._refuse(
                _too_long(
                    f"a header line is larger than {self.limits.max_header_line_bytes} bytes "
                    "(CHUNKRAG_GATEWAY_MAX_HEADER_LINE_BYTES)"
                )
            )
        if self._head_size > self.limits.max_header_bytes:
            return self._refuse(
                _too_long(
                    f"the request line and headers are larger than {self.limits.max_header_bytes} bytes "
                    "(CHUNKRAG_GATEWAY_MAX_HEADER_BYTES)"
                )
            )
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head, self._head_received, self._message_done = True, 0, True
        self.counts.waiting(self, self._address, False)  # being answered: not taken from now on
        if not self._refused:
            super().on_message_complete()
            self._between_requests()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._between_requests()

    def _between_requests(self) -> None:
        """Once a request and its response are both complete, the next head
        has header_timeout_s. A response sent before its request's body
        ended (a 413, say) leaves the rest of the body body_timeout_s to
        arrive and be discarded, not forever."""
        if self._refused or self.transport.is_closing() or self.cycle is None or not self.cycle.response_complete:
            return  # a request is being answered (a pipelined one too)
        if self._message_done:
            self._wait_for_head()
        elif self._timer is None:
            self._start_timer(self.limits.body_timeout_s, self._body_timed_out)

    def _start_timer(self, delay_s: float, handler) -> None:
        self._stop_timer()
        self._timer = self.loop.call_later(delay_s, handler)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        self.counts.shed["header_timeout"] += 1
        if self._head_received and not self.transport.is_closing():
            self._refuse(
                errors.GatewayError(
                    408,
                    "timeout_exception",
                    f"the request line and headers did not arrive within {self._head_timeout_s:g} s "
                    "(CHUNKRAG_GATEWAY_HEADER_TIMEOUT_S; shorter while the gateway is near its connection cap)",
                )
            )
        else:
            self._close()

    def _body_timed_out(self) -> None:
        self.counts.shed["body_timeout"] += 1
        self._close()

    def _close(self) -> None:
        self._timer = None
        self._refused = True
        self.transport.close()

    def _refuse(self, error: errors.GatewayError) -> None:
        """Answer ``error`` and close: what else came on this connection is
        not read."""
        self._refused = True
        self._stop_timer()
        if error.status == 431:
            self.counts.shed["headers_too_large"] += 1
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head refused while the response before it is being
            # written: an answer now would land inside that response.
            self.transport.close()
            return
        payload = orjson.dumps(errors.body_of(error))
        head = [
            b"HTTP/1.1 %d %s" % (error.status, _REASONS.get(error.status, b"Error")),
            b"content-type: application/json",
            b"content-length: %d" % len(payload),
            b"x-elastic-product: Elasticsearch",
            b"connection: close",
        ]
        head += [f"{name}: {value}".encode("latin-1") for name, value in error.headers.items()]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + payload)
        if error.status == 431:
            self._linger()
        else:
            self.transport.close()

    def _linger(self) -> None:
        """Close once the client has read the answer, not at once. A 431
        comes while the client is still sending its head, and closing a
        socket whose client's bytes still arrive makes the kernel answer
        them with a reset, which can discard the answer unread in the
        client's buffer (it saw "connection reset" instead of its 431). So
        only the sending side is shut: the client reads the answer and its
        end, what it still sends is dropped (``data_received`` ignores a
        refused connection), and the connection closes when the client
        closes its side, or after LINGER_S."""
        if not self.transport.can_write_eof():  # TLS cannot half-close
            self.transport.close()
            return
        self.transport.write_eof()
        self._start_timer(LINGER_S, self.transport.close)


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


def _too_long(reason: str) -> errors.GatewayError:
    return errors.GatewayError(431, "too_long_http_header_exception", reason)
