"""A minimal keep-alive HTTP/1.1 client for one origin, on asyncio streams.

Why not httpx: forwarding a search through ``httpx.AsyncClient`` cost ~2 ms
of CPU per request on this project's 2-core machine, against ~0.25 ms for
this (bench/REPORT.md, gateway section); the pass-through's budget is 10% of
a ~12 ms search. It only has to speak to Elasticsearch: Content-Length or
chunked bodies, keep-alive, TLS through an ``ssl.SSLContext``. Bodies are
passed on as they are (compressed ones too), never decoded.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from dataclasses import dataclass

# Framing and hop-by-hop headers: they describe this connection, not the
# message, so they are never passed on.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"proxy-connection", b"proxy-authenticate", b"proxy-authorization"})
MAX_HEAD_BYTES = 1 << 20


class HttpFailure(ConnectionError):
    """The origin could not be reached, or broke the exchange off."""


class HttpTimeout(TimeoutError):
    """The origin did not answer within the timeout."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    # As received, lower-cased names, hop-by-hop headers removed; a
    # Content-Length is present unless the body came chunked.
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class Http11Pool:
    def __init__(self, host: str, port: int, *, ssl: ssl_module.SSLContext | None = None, timeout_s: float = 30.0, max_connections: int = 64, default_headers: tuple[tuple[bytes, bytes], ...] = ()):
        self.host, self.port, self.ssl, self.timeout_s = host, port, ssl, timeout_s
        host_header = host if ":" not in host else f"[{host}]"
        self._fixed_headers = ((b"host", f"{host_header}:{port}".encode("ascii")), *default_headers)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        # Made on first use: it must belong to the running event loop.
        self._slots: asyncio.Semaphore | None = None
        self._max_connections = max_connections

    async def request(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
        if any(c in target for c in "\r\n ") or not target.startswith("/"):
            raise ValueError(f"not a request target: {target!r}")
        message = self._encode(method, target, headers, body)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max_connections)
        async with self._slots:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await self._exchange(method, message)
            except TimeoutError:
                raise HttpTimeout(f"no answer within {self.timeout_s:g} s") from None

    async def _exchange(self, method: str, message: bytes) -> HttpResponse:
        while self._idle:
            reader, writer = self._idle.pop()
            if reader.at_eof():  # closed by the server while idle
                writer.close()
                continue
            try:
                return await self._send_on(reader, writer, method, message)
            except _StaleConnection:
                # The server closed a kept-alive connection before reading the
                # request: nothing was processed, so it is safe to resend.
                continue
        reader, writer = await self._connect()
        try:
            return await self._send_on(reader, writer, method, message)
        except _StaleConnection as exc:
            raise HttpFailure(f"{self.host}:{self.port} closed the connection without answering") from exc

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=MAX_HEAD_BYTES)
        except OSError as exc:
            raise HttpFailure(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from exc

    async def _send_on(self, reader, writer, method: str, message: bytes) -> HttpResponse:
        answered = False
        try:
            writer.write(message)
            head = await reader.readuntil(b"\r\n\r\n")
            answered = True
            status, headers, framing = _parse_head(head)
            while 100 <= status < 200:  # interim responses carry no body
                status, headers, framing = _parse_head(await reader.readuntil(b"\r\n\r\n"))
            body, reusable = await _read_body(reader, method, status, framing)
        except BaseException as exc:
            writer.close()
            if isinstance(exc, (ConnectionError, asyncio.IncompleteReadError)) and not answered:
                raise _StaleConnection() from exc
            if isinstance(exc, (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)):
                raise HttpFailure(f"{self.host}:{self.port} broke off the response: {exc}") from exc
            raise
        if reusable:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return HttpResponse(status, headers, body)

    def _encode(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
        lines = [f"{method} {target} HTTP/1.1".encode("latin-1")]
        for name, value in (*self._fixed_headers, *headers):
            if b"\r" in value or b"\n" in value:
                raise ValueError(f"header {name!r} holds a line break")
            lines.append(name + b": " + value)
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(b"content-length: " + str(len(body)).encode("ascii"))
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for _reader, writer in idle:
            writer.close()
        for _reader, writer in idle:
            try:
                await writer.wait_closed()
            except OSError:
                pass


class _StaleConnection(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Framing:
    content_length: int | None
    chunked: bool
    close: bool


def _parse_head(head: bytes) -> tuple[int, tuple[tuple[bytes, bytes], ...], _Framing]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(parts[1])
    kept: list[tuple[bytes, bytes]] = []
    length, chunked, close = None, False, parts[0] == b"HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = value.lower().endswith(b"chunked")
        elif name == b"connection":
            close = b"close" in value.lower()
        if name not in HOP_BY_HOP:
            kept.append((name, value))
    return status, tuple(kept), _Framing(length, chunked, close)


async def _read_body(reader: asyncio.StreamReader, method: str, status: int, framing: _Framing) -> tuple[bytes, bool]:
    """The body and whether the connection can carry another request."""
    if method == "HEAD" or status in (204, 304):
        return b"", not framing.close
    if framing.chunked:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return b"".join(parts), not framing.close
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if framing.content_length is not None:
        return await reader.readexactly(framing.content_length), not framing.close
    return await reader.read(), False  # delimited by the end of the connection
