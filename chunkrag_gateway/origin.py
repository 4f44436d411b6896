"""The pass-through's keep-alive connections to Elasticsearch: aiohttp's
connector (HTTP/1.1, its C parser), with one rule added: a connection
carries another request only after an exchange known to be clean.

Why the rule: a pool (aiohttp's, httpcore's, httpx's) reuses a connection
whenever the framing completed, whatever the status. Elasticsearch answers
a request whose headers exceed its ``http.max_header_size`` with a 400 and
then ignores the socket without saying ``Connection: close``; the next
request sent on it waited for the timeout (30 s), so one caller's bad
request poisoned the pool for everyone. Here a connection never goes back
after 400, 408, 413, 414, 431 or any 5xx, a response cut short, an exception
or a cancellation mid-exchange: the status is read as the head arrives
(aiohttp's ``response_class``, below) and the connection is closed when its
body ends, or at once when the body came with the head.

Cost (bench/REPORT.md, "Gateway overhead"): the client alone takes less CPU
per request than httpcore's connections did on the same machine (87 against
168 us in one loaded session, 280-350 against 390-410 us in another; httpx's
``AsyncClient`` ~2 ms), and it sends a request in one write where httpcore
wrote its head and its body apart. Bodies are passed on as they are
(compressed ones too), never decoded, and the target goes out byte for byte.

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
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from yarl import URL

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
# The longest response header line (or field) taken from the cluster: a
# deprecation Warning or an echoed X-Opaque-Id can be long (aiohttp's own
# default, 8 KB, is below Elasticsearch's 16 KB request headers).
MAX_HEADER_LINE_BYTES = 65_536
# Headers aiohttp would add on its own; the request carries only what the caller sent.
_NOT_ADDED = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
# How many kept-alive connections in a row a request may find closed by the
# server before it is sent on a new one (each costs a round trip at most).
STALE_RETRIES = 3


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
    through ``ssl``), at most ``max_connections`` at once, made on demand
    (aiohttp's connector, in a session made on first use: it belongs to the
    running event loop)."""

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
        self.connect_timeout_s = connect_timeout_s
        self.host_header = (f"[{host}]" if ":" in host else host).encode("idna") + b":%d" % port
        self._scheme = "https" if ssl is not None else "http"
        self._authority = self.host_header.decode("ascii")
        self._keepalive_s = keepalive_s
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        # Made on first use: it must belong to the running event loop.
        self._slots: asyncio.Semaphore | None = None
        # The connections that carried a request (to tell a reused one from a new one).
        self._carried: weakref.WeakSet = weakref.WeakSet()
        # Connections opened or tried so far (tests read it).
        self.opened = 0

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            keepalive_timeout=self._keepalive_s,
            ssl=self.ssl if self.ssl is not None else True,
        )
        return aiohttp.ClientSession(
            connector=connector,
            # Bodies are passed on as they came, compressed ones too.
            auto_decompress=False,
            # Nothing the caller did not send: no User-Agent, Accept,
            # Accept-Encoding, nor a Content-Type for a body without one.
            skip_auto_headers=_NOT_ADDED,
            cookie_jar=aiohttp.DummyCookieJar(),
            # The exchange's bound is the pool's own (``request``); the connector's, connecting only.
            timeout=aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s),
            response_class=_response_class(self),
            max_line_size=MAX_HEADER_LINE_BYTES,
            max_field_size=MAX_HEADER_LINE_BYTES,
        )

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
        sent = [("host", self._authority)]
        for name, value in headers:
            if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
                raise ValueError(f"header {name!r} holds a line break")
            sent.append((name.decode("latin-1"), value.decode("latin-1")))
        if body or method in ("POST", "PUT", "PATCH"):
            sent.append(("content-length", str(len(body))))
        path, mark, query = target.partition("?")
        # Built from parts already encoded: the target goes out byte for byte.
        url = URL.build(scheme=self._scheme, authority=self._authority, path=path, query_string=query, encoded=True)
        if self._session is None:
            self._session = self._new_session()
            self._slots = asyncio.Semaphore(self._max_connections)
        async with self._slots:
            try:
                async with asyncio.timeout(timeout_s):
                    return await self._exchange(method, url, sent, body)
            except TimeoutError:
                raise HttpTimeout(f"no answer within {timeout_s:g} s") from None

    async def _exchange(self, method: str, url: URL, headers: list[tuple[str, str]], body: bytes) -> HttpResponse:
        for attempt in range(STALE_RETRIES + 1):
            try:
                return await self._send(method, url, headers, body)
            except _StaleConnection as exc:
                # The server closed a kept-alive connection before answering
                # (the race the connector's check cannot see): nothing was processed.
                if attempt == STALE_RETRIES:
                    raise HttpFailure(f"{self.host}:{self.port} closed every kept-alive connection tried") from exc
        raise AssertionError("unreachable")

    async def _send(self, method: str, url: URL, headers: list[tuple[str, str]], body: bytes) -> HttpResponse:
        try:
            async with self._session.request(method, url, headers=headers, data=body or None) as response:
                received = await response.read()
        except (_StaleConnection, HttpFailure):
            raise
        except aiohttp.ConnectionTimeoutError as exc:
            self.opened += 1
            raise HttpConnectFailure(
                f"cannot connect to {self.host}:{self.port} within {self.connect_timeout_s:g} s"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            self.opened += 1
            raise HttpConnectFailure(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from exc
        except aiohttp.ClientPayloadError as exc:
            raise HttpFailure(f"{self.host}:{self.port} broke off the response: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise HttpFailure(f"{self.host}:{self.port} broke off the exchange: {exc or type(exc).__name__}") from exc
        headers_in = tuple(
            (name.lower(), value) for name, value in response.raw_headers if name.lower() not in HOP_BY_HOP
        )
        return HttpResponse(response.status, headers_in, received)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


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


class _BrokenOff(aiohttp.ClientError):
    """A new connection closed or failed before its answer came. Not one of
    the errors aiohttp itself sends again (a GET, a PUT, a DELETE): whether a
    request is sent again is `NodePools`' decision."""


def _response_class(pool: OriginPool) -> type[aiohttp.ClientResponse]:
    """aiohttp's response, told what the pool needs at the moment its status
    line is read: whether its connection carried a request before (a stale
    one is retried), and that a connection whose status leaves the server in
    an unknown state never carries another."""

    class Response(aiohttp.ClientResponse):
        async def start(self, connection):
            protocol = connection.protocol
            reused = protocol in pool._carried
            if not reused:
                pool._carried.add(protocol)
                pool.opened += 1
            try:
                await super().start(connection)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if reused:
                    raise _StaleConnection() from exc
                raise _BrokenOff(str(exc) or type(exc).__name__) from exc
            if not reusable(self.status):
                # Still held (its body is on its way): closed when it ends
                # instead of going back. Already back (the whole answer came
                # with the head): closed now, before anyone takes it; nothing
                # ran in between.
                protocol.force_close()
                if self.connection is None:
                    protocol.close()
            return self

    return Response
