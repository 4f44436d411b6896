"""The pass-through's keep-alive connections to Elasticsearch: httpcore's
HTTP/1.1 connections (h11 does the framing), kept in a small pool that
reuses a connection only after an exchange known to be clean.

Why not httpcore's or httpx's own pool: they reuse a connection whenever
the framing completed, whatever the status. Elasticsearch answers a request
whose headers exceed its ``http.max_header_size`` with a 400 and then
ignores the socket without saying ``Connection: close``; the next request
sent on it waited for the timeout (30 s), so one caller's bad request
poisoned the pool for everyone. Here a connection goes back to the pool
only after a response read to its end with a status that leaves the server
in a known state: never after 400, 408, 413, 414, 431 or any 5xx, a
response cut short, an exception or a cancellation mid-exchange.

Cost (bench/results/gateway_httpcore.json against gateway_http11_before.json):
~0.3 ms more per forwarded request than the hand-written client it replaced
(~0.23 ms of CPU per request for the client alone against ~0.1 ms; httpx's
``AsyncClient`` took ~2 ms). aiohttp (~0.25 ms) was not used: it hands a
connection back to its pool as soon as the body ends, before its status can
be seen, so discarding by status would mean reaching into its internals.
Bodies are passed on as they are (compressed ones too), never decoded.

A cluster given as several node URLs gets one pool per node (``NodePools``),
going round them as the engine's profile says (``EngineProfile.failover``, a
``NodeFailover`` in ``chunkrag_core/engines/profile.py``): requests go round
the nodes; a request whose connection could not be established within the
connect timeout (nothing was sent) goes to the next node, whatever its
method, and the node is skipped for ``refused_backoff_s`` (2 s). A node that
took a request that may be repeated (below) and gave no answer within the
attempt timeout (a node that hangs: alive, its sockets open and the kernel
still accepting connections, nothing answering) is skipped for as long,
doubling up to ``max_silent_backoff_s`` (30 s) while it stays silent: each
new try costs a caller a whole attempt. A request that may not be repeated
is never cut at the attempt timeout: it waits the whole request timeout, as
with one node.

A request already sent (broken off, or unanswered in time) is replayed on
another node only when repeating it is safe (``NodeFailover.repeatable``):
GET and HEAD, and the POSTs of endpoints that only read (``_search``,
``_msearch``, ``_count``...; Elasticsearch's ``_terms_enum`` too). Any other
POST or PUT may have been carried out before the node failed (``_bulk``
whose actions have no ids, ``_update_by_query``, a document created), so the
caller gets the 502/503/504 and decides. All attempts together stay within
the request's timeout.

How this differs from the backends' clients, which go round with their own
node pools (``chunkrag_core/engines/elasticsearch.py``, ``opensearch.py``):

- they send any request again after a connection refused, reset or cut,
  bulk writes included: the project's own requests may be repeated (every
  chunk is written under its deterministic id). The pass-through carries
  callers' requests, which need not be: past the connect it repeats only
  what reads.
- their dead-node backoff is their library's (elasticsearch-py: 1 s doubling
  up to 30 s; opensearch-py: 60 s, longer while the node stays dead); the
  pass-through's is 2 s for both engines, doubling only for a silent node:
  a refused connect costs the next caller a connect (about a millisecond on
  a LAN), never a whole attempt, and a restarted node takes its share again
  within a second or two of rejoining.
- a timeout: the clients' reads (``retry_on_timeout``, with
  ``CHUNKRAG_ENGINE_ATTEMPT_TIMEOUT_S``) go to the next node as the
  pass-through's repeatable requests do; neither ever sends a write again
  after a timeout.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpcore

from chunkrag_core.engines.profile import NodeFailover

# Framing and hop-by-hop headers: they describe this connection, not the
# message, so they are never passed on.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
    }
)
# Statuses after which the server's side of the connection is not trusted:
# it may have stopped reading (Elasticsearch after a too-long header), or
# left part of the request unread (a body refused before it was read).
UNTRUSTED_STATUSES = frozenset({400, 408, 413, 414, 431})
# An idle connection older than this is closed rather than reused.
KEEPALIVE_S = 15.0


class HttpFailure(ConnectionError):
    """The origin could not be reached, or broke the exchange off."""


class HttpConnectFailure(HttpFailure):
    """No connection could be made to the origin: nothing of the request was sent."""


class HttpTimeout(TimeoutError):
    """The origin did not answer within the timeout."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    # As received, lower-cased names, hop-by-hop headers removed; a
    # Content-Length is present unless the body came chunked.
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


def reusable(status: int) -> bool:
    """Whether a connection that answered ``status`` may carry another request."""
    return status < 500 and status not in UNTRUSTED_STATUSES


class OriginPool:
    """Keep-alive HTTP/1.1 connections to one origin (``host:port``, TLS
    through ``ssl``), at most ``max_connections`` at once, made on demand."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl: ssl_module.SSLContext | None = None,
        timeout_s: float = 30.0,
        connect_timeout_s: float | None = None,
        max_connections: int = 64,
        keepalive_s: float = KEEPALIVE_S,
    ):
        """``timeout_s`` bounds a whole exchange (connecting included);
        ``connect_timeout_s``, when shorter, bounds opening a connection
        (TCP and TLS) on its own: past it nothing was sent
        (`HttpConnectFailure`)."""
        self.host, self.port, self.ssl, self.timeout_s = host, port, ssl, timeout_s
        # httpcore's per-request timeout extension; the network backend below honours "connect".
        self._extensions = {"timeout": {"connect": connect_timeout_s}} if connect_timeout_s else {}
        self._origin = httpcore.Origin(b"https" if ssl is not None else b"http", host.encode("idna"), port)
        self.host_header = (f"[{host}]" if ":" in host else host).encode("idna") + b":%d" % port
        self._keepalive_s = keepalive_s
        self._idle: list[httpcore.AsyncHTTPConnection] = []
        # Made on first use: it must belong to the running event loop.
        self._slots: asyncio.Semaphore | None = None
        self._max_connections = max_connections
        # Connections opened so far (tests read it).
        self.opened = 0

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        timeout_s: float | None = None,
    ) -> HttpResponse:
        """``timeout_s``: this exchange's bound instead of the pool's."""
        timeout_s = timeout_s or self.timeout_s
        if any(c in target for c in "\r\n ") or not target.startswith("/"):
            raise ValueError(f"not a request target: {target!r}")
        for name, value in headers:
            if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
                raise ValueError(f"header {name!r} holds a line break")
        sent = [(b"host", self.host_header), *headers]
        if body or method in ("POST", "PUT", "PATCH"):
            sent.append((b"content-length", b"%d" % len(body)))
        url = httpcore.URL(
            scheme=self._origin.scheme, host=self._origin.host, port=self.port, target=target.encode("latin-1")
        )
        request = httpcore.Request(method.encode("ascii"), url, headers=sent, content=body, extensions=self._extensions)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max_connections)
        async with self._slots:
            try:
                async with asyncio.timeout(timeout_s):
                    return await self._exchange(request)
            except TimeoutError:
                raise HttpTimeout(f"no answer within {timeout_s:g} s") from None

    async def _exchange(self, request: httpcore.Request) -> HttpResponse:
        while self._idle:
            connection = self._idle.pop()
            if connection.has_expired() or not connection.is_idle():  # closed by the server while idle, or too old
                await _discard(connection)
                continue
            try:
                return await self._send_on(connection, request, reused=True)
            except _StaleConnection:
                # The server closed a kept-alive connection before answering
                # (the race has_expired cannot see): nothing was processed.
                continue
        self.opened += 1
        connection = httpcore.AsyncHTTPConnection(
            self._origin, ssl_context=self.ssl, keepalive_expiry=self._keepalive_s, network_backend=_BACKEND
        )
        return await self._send_on(connection, request, reused=False)

    async def _send_on(
        self, connection: httpcore.AsyncHTTPConnection, request: httpcore.Request, *, reused: bool
    ) -> HttpResponse:
        try:
            response = await connection.handle_async_request(request)
        except BaseException as exc:
            await _discard(connection)
            if reused and isinstance(exc, (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError)):
                raise _StaleConnection() from exc
            if isinstance(exc, httpcore.ConnectError):
                raise HttpConnectFailure(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
            if isinstance(exc, httpcore.ConnectTimeout):
                raise HttpConnectFailure(
                    f"cannot connect to {self.host}:{self.port} within {exc or 'the connect timeout'}"
                ) from exc
            if isinstance(exc, (httpcore.NetworkError, httpcore.ProtocolError)):
                raise HttpFailure(
                    f"{self.host}:{self.port} broke off the exchange: {exc or type(exc).__name__}"
                ) from exc
            raise
        try:
            body = await response.aread()
            await response.aclose()
        except BaseException as exc:
            await _discard(connection)
            if isinstance(exc, (httpcore.NetworkError, httpcore.ProtocolError)):
                raise HttpFailure(
                    f"{self.host}:{self.port} broke off the response: {exc or type(exc).__name__}"
                ) from exc
            raise
        if reusable(response.status) and connection.is_idle():
            self._idle.append(connection)
        else:
            await _discard(connection)
        headers = tuple((name.lower(), value) for name, value in response.headers if name.lower() not in HOP_BY_HOP)
        return HttpResponse(response.status, headers, body)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await _discard(connection)


class NodePools:
    """One ``OriginPool`` per node of a cluster, with the same interface:
    each request starts at the next node in turn, passing over nodes in
    their backoff (unless all are), and moves on as ``failover`` (the
    engine's, ``EngineProfile.failover``) and the module's docstring say."""

    def __init__(
        self,
        pools: Sequence[OriginPool],
        *,
        failover: NodeFailover,
        timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``timeout_s``: every attempt of one request together (each pool
        bounds its own attempt); None: only the pools' bounds."""
        if not pools:
            raise ValueError("NodePools needs at least one pool")
        self.pools = tuple(pools)
        self.failover, self._clock = failover, clock
        self.timeout_s = timeout_s
        self._down_until = [0.0] * len(self.pools)
        # Attempts in a row each node left unanswered within its timeout.
        self._silences = [0] * len(self.pools)
        self._turn = 0

    def _order(self) -> list[int]:
        count = len(self.pools)
        start, self._turn = self._turn, (self._turn + 1) % count
        turn = [(start + i) % count for i in range(count)]
        now = self._clock()
        return [i for i in turn if self._down_until[i] <= now] + [i for i in turn if self._down_until[i] > now]

    async def request(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
        if self.timeout_s is None:
            return await self._round(method, target, headers, body)
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._round(method, target, headers, body)
        except HttpTimeout:  # the last node's own (a TimeoutError too): said as it is
            raise
        except TimeoutError:
            raise HttpTimeout(f"no node answered within {self.timeout_s:g} s") from None

    async def _round(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
        failure: HttpFailure | HttpTimeout = HttpFailure("no node was tried")
        # A request that may not be sent again waits for its node the whole
        # request timeout, as with one node: cut short, it would be lost.
        # Only a repeatable one is cut at the pool's attempt timeout.
        may_repeat = self.failover.repeatable(method, target)
        timeout_s = None if may_repeat else self.timeout_s
        for node in self._order():
            try:
                response = await self.pools[node].request(method, target, headers, body, timeout_s=timeout_s)
            except HttpConnectFailure as exc:
                self._down_until[node] = self._clock() + self.failover.refused_backoff_s
                failure = exc
            except HttpFailure as exc:
                if not may_repeat:
                    raise
                failure = exc
            except HttpTimeout as exc:
                # Silent: pass it over, longer each time it stays so.
                self._silences[node] += 1
                self._down_until[node] = self._clock() + self.failover.silent_backoff_s(self._silences[node])
                if not may_repeat:
                    raise
                failure = exc
            else:
                self._down_until[node], self._silences[node] = 0.0, 0
                return response
        raise failure

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()


class _StaleConnection(Exception):
    pass


class _AsyncioStream(httpcore.AsyncNetworkStream):
    """httpcore's network stream on asyncio's own streams. httpcore's default
    (anyio) enters a cancel scope on every read and write, a third of its
    CPU per request here; timeouts are the pool's (one per exchange)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return await self._reader.read(max_bytes)
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            await self._writer.drain()
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(
        self, ssl_context: ssl_module.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> _AsyncioStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            self._writer.close()
            raise httpcore.ConnectTimeout(f"{timeout:g} s (TLS handshake)") from None
        except (OSError, ssl_module.SSLError) as exc:
            self._writer.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str):
        if info == "is_readable":
            # Idle, a kept-alive connection has nothing to read: its end or
            # an error means the server closed it.
            return self._reader.at_eof() or self._reader.exception() is not None or self._writer.transport.is_closing()
        return self._writer.get_extra_info({"client_addr": "sockname", "server_addr": "peername"}.get(info, info))


class _AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options=None
    ) -> _AsyncioStream:
        # ``timeout``: the request's "connect" timeout (httpcore passes it on).
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"{timeout:g} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(exc.strerror or str(exc)) from exc
        return _AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


_BACKEND = _AsyncioBackend()


async def _discard(connection: httpcore.AsyncHTTPConnection) -> None:
    """Close ``connection``; it is being dropped, so a failure to close it
    cleanly changes nothing."""
    try:
        await connection.aclose()
    except (OSError, httpcore.NetworkError):
        pass
