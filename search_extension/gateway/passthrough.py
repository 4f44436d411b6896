"""Forwarding requests to Elasticsearch unchanged, over a pool of keep-alive
connections made on first use."""

from __future__ import annotations

import base64
import ssl
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import orjson
from starlette.responses import Response

from chunkrag_core.settings import Settings
from search_extension.gateway import errors
from search_extension.gateway.http11 import HOP_BY_HOP, Http11Pool, HttpFailure, HttpResponse, HttpTimeout
from search_extension.gateway.identity import Caller, forwarded_headers

# Besides the hop-by-hop ones: Host and Content-Length are set for the new
# message; Authorization is set by identity.py (the caller's in forward mode,
# the gateway's in service mode, never both); cookies are the gateway's
# business with its caller, not the cluster's.
_NOT_FORWARDED = HOP_BY_HOP | {b"host", b"content-length", b"authorization", b"cookie", b"expect"}


class HttpTransport(Protocol):
    """What the pass-through sends through (``Http11Pool``; a double in tests)."""

    async def request(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse: ...

    async def aclose(self) -> None: ...


class ForwardedResponse(Response):
    """Elasticsearch's status, headers (repeated ones too) and body as received."""

    def __init__(self, forwarded: HttpResponse):
        self.status_code = forwarded.status
        self.body = forwarded.body
        self.background = None
        headers = list(forwarded.headers)
        if not any(name == b"content-length" for name, _ in headers):
            headers.append((b"content-length", str(len(forwarded.body)).encode("ascii")))
        self.raw_headers = headers


class Passthrough:
    def __init__(self, settings: Settings, transport: HttpTransport | None = None):
        self.settings = settings
        self._transport = transport
        # A cluster behind a reverse proxy may live under a path.
        # Elasticsearch or OpenSearch, as SEARCH_BACKEND says.
        self._prefix = urlsplit(settings.search_url).path.rstrip("/")
        self._service_mode = settings.gateway.auth == "service"
        # The gateway's own credentials: every request in service mode, and
        # the health probe in either mode.
        self._own_headers = service_credentials(settings)

    @property
    def transport(self) -> HttpTransport:
        if self._transport is None:
            self._transport = _make_pool(self.settings)
        return self._transport

    async def forward(self, method: str, target: str, raw_headers: list[tuple[bytes, bytes]], body: bytes, caller: Caller = Caller()) -> Response:
        """Send the request as it came (``target`` = raw path and query) with
        the caller's or the gateway's credentials; return Elasticsearch's
        status, body and headers (X-Elastic-Product, Warning, Content-Type
        among them)."""
        outgoing = [(name, value) for name, value in raw_headers if name.lower() not in _NOT_FORWARDED]
        outgoing += self._own_headers if self._service_mode else forwarded_headers(caller)
        return ForwardedResponse(await self._send(method, target, outgoing, body))

    async def get_json(self, path: str) -> tuple[int, Any]:
        response = await self._send("GET", path, [(b"accept", b"application/json"), *self._own_headers], b"")
        return response.status, orjson.loads(response.body)

    async def _send(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
        where = self.settings.search_url_for_display
        engine = "OpenSearch" if self.settings.search_backend == "opensearch" else "Elasticsearch"
        try:
            return await self.transport.request(method, self._prefix + target, headers, body)
        except HttpTimeout as exc:
            raise errors.timed_out(f"{engine} at {where} did not answer in time ({exc})") from exc
        except HttpFailure as exc:
            raise errors.unavailable(f"{engine} at {where} is not reachable ({exc})") from exc
        except ValueError as exc:
            raise errors.bad_request(f"cannot forward this request: {exc}") from exc

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()


def service_credentials(settings: Settings) -> list[tuple[bytes, bytes]]:
    """The gateway's own Authorization (ES_API_KEY, else the ES_URL user)."""
    parts = urlsplit(settings.search_url)
    if settings.es_api_key and settings.search_backend != "opensearch":
        return [(b"authorization", b"ApiKey " + settings.es_api_key.encode())]
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        return [(b"authorization", b"Basic " + base64.b64encode(credentials))]
    return []


def _make_pool(settings: Settings) -> Http11Pool:
    """The connection pool; it holds no credentials (each request carries its own)."""
    parts = urlsplit(settings.search_url)
    context = None
    if parts.scheme == "https":
        # Verified against ES_CA_CERTS (a PEM bundle), else the system's CAs.
        context = ssl.create_default_context(cafile=settings.opensearch_ca_certs if settings.search_backend == "opensearch" else settings.es_ca_certs)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Http11Pool(parts.hostname or "127.0.0.1", port, ssl=context, timeout_s=settings.es_request_timeout_s)
