"""Forwarding requests to Elasticsearch unchanged, over a pool of keep-alive
connections made on first use (one per node when ES_URL or OPENSEARCH_URL
lists several: `origin.NodePools`)."""

from __future__ import annotations

import base64
import dataclasses
import functools
import ssl
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import orjson
from starlette.responses import Response

from chunkrag_core import tracing
from chunkrag_core.engines.profile import engine_of
from chunkrag_core.settings import Settings
from chunkrag_gateway import errors
from chunkrag_gateway.cluster_internals import may_name_internals, scrub_internals
from chunkrag_gateway.derived_keys import DerivedKeys
from chunkrag_gateway.identity import (
    Caller,
    forwardable_header,
    forwarded_headers,
    may_name_cluster_identity,
    scrub_security_errors,
    service_refusal,
)
from chunkrag_gateway.origin import HOP_BY_HOP, HttpFailure, HttpResponse, HttpTimeout, NodePools, OriginPool

# Besides the hop-by-hop ones: Host and Content-Length are set for the new
# message; Authorization is set by identity.py (the caller's in forward mode,
# a derived key in service mode, never both); cookies are the gateway's
# business with its caller, not the cluster's. Every other header passes only
# if ``identity.forwardable_header`` allows it (an allow-list).
_NOT_FORWARDED = HOP_BY_HOP | {b"host", b"content-length", b"authorization", b"cookie", b"expect"}
# Service mode reads the cluster's answers for its refusals (``forward``): they come uncompressed.
_NOT_FORWARDED_FOR_KEYS = _NOT_FORWARDED | {b"accept-encoding"}


@functools.lru_cache(maxsize=1024)  # a caller's few header names, asked on every request: bounded
def _passes(name: bytes, trusted_proxy: bool, service: bool) -> bool:
    """Whether a caller's header ``name`` is forwarded (see ``_NOT_FORWARDED``)."""
    dropped = _NOT_FORWARDED_FOR_KEYS if service else _NOT_FORWARDED
    return name.lower() not in dropped and forwardable_header(name, trusted_proxy=trusted_proxy)


# What a SigV4 signature adds to a request (Host is the pool's own).
_SIGV4_HEADERS = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}


class HttpTransport(Protocol):
    """What the pass-through sends through (``OriginPool``; a double in tests)."""

    async def request(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> HttpResponse: ...

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


def _from_a_browser(raw_headers: list[tuple[bytes, bytes]]) -> bool:
    """Browsers send Fetch Metadata (``Sec-Fetch-Mode``) on every request,
    page loads included, and no API client does; a script cannot forge it."""
    return any(name.lower() == b"sec-fetch-mode" for name, _ in raw_headers)


def _without_challenge(response: HttpResponse) -> HttpResponse:
    """A 401 without its ``WWW-Authenticate``: a browser shown a Basic
    challenge asks for a password itself and then sends it, unasked, with
    every request to the gateway's origin, those other sites make it send
    included. API clients, which rely on the challenge, keep it."""
    kept = tuple((name, value) for name, value in response.headers if name.lower() != b"www-authenticate")
    return dataclasses.replace(response, headers=kept)


class Passthrough:
    def __init__(self, settings: Settings, transport: HttpTransport | None = None, shared_redis=None):
        self.settings = settings
        self._engine = engine_of(settings)
        self._transport = transport
        # A cluster behind a reverse proxy may live under a path.
        # Elasticsearch or OpenSearch, as SEARCH_BACKEND says.
        # (Every node URL has the same path: settings.node_urls.)
        self._prefix = urlsplit(settings.search_nodes[0]).path.rstrip("/")
        self._service_mode = settings.gateway.auth == "service"
        # The gateway's own credentials: every request in service mode, and
        # the health probe in either mode.
        self._own_headers = service_credentials(settings)
        # SigV4 (OpenSearch on AWS, service mode only): each request is signed
        # here, as the pool is about to send it; the signer is made on first use.
        self._sigv4 = self._engine.sigv4(settings)
        self._signer = None
        self._trusted_proxy = settings.gateway.trusted_proxy
        # Service mode on an engine that mints derived keys (Elasticsearch):
        # each gateway key's requests go with an API key the cluster limits
        # to its indices (derived_keys.py).
        self.derived: DerivedKeys | None = None
        if self._service_mode and self._engine.derived_keys:
            self.derived = DerivedKeys(
                self._send,
                self._own_headers,
                ttl_s=settings.gateway.derived_key_ttl_s,
                gateway_only_accepted=settings.gateway.enforce_in_gateway_only,
                shared=_shared_keys(shared_redis, self._own_headers, settings.gateway.derived_key_ttl_s),
            )

    @property
    def transport(self) -> HttpTransport:
        if self._transport is None:
            self._transport = _make_pool(self.settings)
        return self._transport

    async def forward(
        self, method: str, target: str, raw_headers: list[tuple[bytes, bytes]], body: bytes, caller: Caller = Caller()
    ) -> Response:
        """Send the request as it came (``target`` = raw path and query) with
        the caller's or the gateway's credentials; return Elasticsearch's
        status, body and headers (X-Elastic-Product, Warning, Content-Type
        among them)."""
        trusted, service = self._trusted_proxy, caller.key is not None
        outgoing = [(name, value) for name, value in raw_headers if _passes(name, trusted, service)]
        outgoing += forwarded_headers(await self.bind(caller))
        if not tracing.active():
            response = await self._send(method, without_error_trace(target), outgoing, body)
        else:
            with tracing.span(f"forward {method}", "client", {"http.request.method": method}) as current:
                # The cluster's trace continues this span, not the caller's.
                outgoing = [(n, v) for n, v in outgoing if n.lower() not in (b"traceparent", b"tracestate")]
                outgoing += [(name.encode(), value.encode()) for name, value in tracing.headers().items()]
                response = await self._send(method, without_error_trace(target), outgoing, body)
                tracing.set_attributes(current, {"http.response.status_code": response.status})
        if caller.key is not None and (response.status in (401, 403) or may_name_cluster_identity(response.body)):
            if response.status == 401:
                self.forget(caller)  # an invalidated derived key: make a new one next time
            response = _without_cluster_identity(response, caller)
        if caller.key is not None and may_name_internals(response.body):
            response = _without_internals(response)
        if response.status == 401 and _from_a_browser(raw_headers):
            response = _without_challenge(response)
        return ForwardedResponse(response)

    def forget(self, caller: Caller) -> None:
        if self.derived is not None and caller.key is not None:
            self.derived.forget(caller.key)

    async def bind(self, caller: Caller) -> Caller:
        """``caller`` with the credentials its requests carry: its own
        (forward mode), its gateway key's derived key (service mode on a
        secured Elasticsearch), or the gateway's own where the cluster cannot
        limit them (OpenSearch; a cluster without security, when accepted)."""
        if not self._service_mode or caller.authorization is not None:
            return caller
        if caller.key is None:  # the guard admits no keyless caller in service mode
            raise errors.unavailable("the gateway has no credentials for this request")
        derived = await self.derived.authorization(caller.key) if self.derived is not None else None
        if derived is not None:
            return dataclasses.replace(caller, authorization=derived)
        return dataclasses.replace(caller, authorization=_authorization_of(self._own_headers))

    async def cluster_limits(self, caller: Caller) -> bool:
        """Whether the cluster itself limits ``caller``'s requests: a derived
        key (service mode on a secured Elasticsearch). Where it does not
        (OpenSearch, a cluster without security), the gateway's checks are
        the only line."""
        if caller.key is None or self.derived is None:
            return False
        return await self.derived.authorization(caller.key) is not None

    async def ask_as(self, authorization: bytes, path: str) -> tuple[int, bytes]:
        """``GET path`` with a caller's credentials alone (who the cluster
        takes them for: ``cluster_users.py``)."""
        response = await self._send(
            "GET", path, [(b"accept", b"application/json"), (b"authorization", authorization)], b""
        )
        return response.status, response.body

    async def get_json(self, path: str) -> tuple[int, Any]:
        response = await self._send("GET", path, [(b"accept", b"application/json"), *self._own_headers], b"")
        return response.status, orjson.loads(response.body)

    async def _send(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
        if self._sigv4 is not None:
            # A caller's own x-amz-* headers would sit beside the gateway's.
            kept = [(name, value) for name, value in headers if name.lower().decode("latin-1") not in _SIGV4_HEADERS]
            headers = [*kept, *self._signed(method, self._prefix + target, body)]
        try:
            return await self.transport.request(method, self._prefix + target, headers, body)
        except HttpTimeout as exc:
            raise errors.timed_out(f"{self._engine.product} did not answer in time", detail=self._where(exc)) from exc
        except HttpFailure as exc:
            raise errors.unavailable(f"{self._engine.product} is not reachable", detail=self._where(exc)) from exc
        except ValueError as exc:
            raise errors.bad_request(f"cannot forward this request: {exc}") from exc

    def _where(self, exc: Exception) -> str:
        # Worked out only for an error: redacting the URL costs on every request otherwise.
        return f"{self.settings.search_url_for_display}: {exc}"

    def _signed(self, method: str, target: str, body: bytes) -> list[tuple[bytes, bytes]]:
        """The SigV4 headers for this request, signed over the Host header the
        pool sends (``host:port``). Signing is a few HMACs; a credentials
        refresh (a role's, hourly) may block the loop once for a moment."""
        if self._signer is None:
            self._signer = self._engine.request_signer(self.settings)
        # SigV4 takes one endpoint, never a node list (settings.Settings).
        parts = urlsplit(self.settings.search_nodes[0])
        host = pool_host_header(parts)
        signed = self._signer.sign(method, f"{parts.scheme}://{host}{target}", body, {"host": host})
        return [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in signed.items()
            if name.lower() in _SIGV4_HEADERS
        ]

    async def aclose(self) -> None:
        if self.derived is not None and self._transport is not None:
            await self.derived.invalidate_all()
        if self._transport is not None:
            await self._transport.aclose()


def _without_cluster_identity(response: HttpResponse, caller: Caller) -> HttpResponse:
    """Service mode: the cluster's refusals name the service account and its
    roles; the caller gets the gateway's own words instead."""
    if response.status in (401, 403):
        raise service_refusal(caller, response.status)
    try:
        document = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        raise service_refusal(caller) from None
    if not scrub_security_errors(document, service_refusal(caller).reason):
        return response
    body = orjson.dumps(document)
    headers = [(name, value) for name, value in response.headers if name.lower() != b"content-length"]
    return dataclasses.replace(response, headers=tuple(headers), body=body)


def _without_internals(response: HttpResponse) -> HttpResponse:
    """Service mode: the answer's errors without Java class names and the
    cluster's ids (``cluster_internals.py``); an answer that is not JSON as it came."""
    try:
        document = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return response
    if not scrub_internals(document):
        return response
    body = orjson.dumps(document)
    headers = [(name, value) for name, value in response.headers if name.lower() != b"content-length"]
    return dataclasses.replace(response, headers=tuple(headers), body=body)


# Query parameters the cluster is never sent: ``error_trace`` adds Java stack
# traces to its errors, naming nodes, transport addresses and classes.
_DROPPED_PARAMETERS = frozenset({"error_trace"})


def without_error_trace(target: str) -> str:
    """``target`` without the parameters the cluster is never sent, their
    names read percent-decoded as Elasticsearch reads them (``%65rror_trace``
    too); the rest of the target is kept byte for byte."""
    path, mark, query = target.partition("?")
    if not mark or "trace" not in unquote(query):
        return target
    kept = [part for part in query.split("&") if unquote(part.partition("=")[0]) not in _DROPPED_PARAMETERS]
    return path + ("?" + "&".join(kept) if kept else "")


def _authorization_of(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    return next((value for name, value in headers if name == b"authorization"), None)


def _shared_keys(shared_redis, own_headers: list[tuple[bytes, bytes]], ttl_s: float):
    """With state shared by several instances (``shared_redis``, a
    ``shared_state.SharedRedis``), the derived keys they share, sealed with
    the gateway's own credentials; None otherwise."""
    if shared_redis is None or not own_headers:
        return None
    from chunkrag_gateway.shared_state import SharedDerivedKeys

    return SharedDerivedKeys(shared_redis, b"\n".join(value for _, value in own_headers), ttl_s)


def service_credentials(settings: Settings) -> list[tuple[bytes, bytes]]:
    """The gateway's own Authorization (ES_API_KEY where the engine takes API
    keys, else the user in the engine's URL)."""
    parts = urlsplit(settings.search_nodes[0])
    if settings.es_api_key and engine_of(settings).api_key_auth:
        return [(b"authorization", b"ApiKey " + settings.es_api_key.encode())]
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        return [(b"authorization", b"Basic " + base64.b64encode(credentials))]
    return []


def _pool_address(parts) -> tuple[str, int]:
    return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)


def pool_host_header(parts) -> str:
    """The Host header ``OriginPool`` sends for the URL ``parts``."""
    host, port = _pool_address(parts)
    return (f"[{host}]" if ":" in host else host) + f":{port}"


def _make_pool(settings: Settings) -> OriginPool | NodePools:
    """The connection pool, one per node when the URL lists several; it holds
    no credentials (each request carries its own)."""
    nodes = [urlsplit(url) for url in settings.search_nodes]
    context = None
    if any(parts.scheme == "https" for parts in nodes):
        # Verified against ES_CA_CERTS or OPENSEARCH_CA_CERTS (a PEM bundle), else the system's CAs.
        context = ssl.create_default_context(cafile=settings.search_ca_certs)
    # One node: its one attempt has the whole request timeout. Several: each
    # attempt `Settings.attempt_timeout_s`, all of them the whole timeout.
    attempt_s = settings.attempt_timeout_s(settings.search_nodes)
    pools = [
        OriginPool(
            *_pool_address(parts),
            ssl=context if parts.scheme == "https" else None,
            timeout_s=attempt_s,
            connect_timeout_s=settings.engine.connect_timeout_s,
        )
        for parts in nodes
    ]
    if len(pools) == 1:
        return pools[0]
    return NodePools(pools, failover=engine_of(settings).failover, timeout_s=settings.es_request_timeout_s)
