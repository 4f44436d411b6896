"""``GET /`` and ``HEAD /``, which the frameworks' stores call before anything
else (LangChain's and LlamaIndex's ``ElasticsearchStore``, Haystack's
``ElasticsearchDocumentStore`` check their connection with it).

Forward mode: where the cluster cannot answer them (the Elasticsearch test
distribution answers 405), the root document rebuilt from ``_nodes/_local``
and the cluster state (``chunkrag_core.engines.root_info``), both asked with
the caller's credentials, so the cluster still decides who may see it.

Service mode: the gateway answers itself (``GatewayRoot``). A derived key
holds no cluster privilege, so the cluster refuses it ``GET /`` (403) and a
store could never connect; and a caller the cluster does not know is told
the engine's version and tagline, nothing else of the cluster (no name,
uuid or build). The version is read with the gateway's own credentials
(which hold ``monitor``) and kept a minute."""

from __future__ import annotations

import time
from typing import Callable

import orjson
from starlette.responses import Response

from chunkrag_core.engines.profile import engine_of
from chunkrag_core.engines.root_info import (
    NODE_PATH,
    UUID_PATH,
    VERSION_PATH,
    gateway_root_document,
    node_version,
    root_document,
    root_headers,
)
from chunkrag_gateway import errors
from chunkrag_gateway.identity import Caller
from chunkrag_gateway.passthrough import Passthrough

# How long the cluster's version is kept (a rolling upgrade changes it).
VERSION_TTL_S = 60.0

# The cluster's statuses for a method a path does not serve.
NOT_SERVED = frozenset({405})


def is_root(method: str, path: str) -> bool:
    return method in ("GET", "HEAD") and path == "/"


async def cluster_root(passthrough: Passthrough, headers, caller: Caller) -> Response:
    """The root document, or the cluster's own answer to ``_nodes`` when it
    refuses that (a 401 or 403 stands as the cluster gave it)."""
    asked = [(name, value) for name, value in headers if name.lower() not in (b"content-length", b"content-type")]
    nodes = await passthrough.forward("GET", NODE_PATH, asked, b"", caller)
    if nodes.status_code != 200:
        return nodes
    state = await passthrough.forward("GET", UUID_PATH, asked, b"", caller)
    uuid = orjson.loads(state.body) if state.status_code == 200 else {}
    document = root_document(engine_of(passthrough.settings).name, orjson.loads(nodes.body), uuid)
    if document is None:
        return nodes
    kept = [(n, v) for n, v in nodes.raw_headers if n.lower() in (b"content-type", b"x-elastic-product")]
    body = orjson.dumps(document)
    # The server sends no body to a HEAD, only its length, as the cluster would.
    response = Response(body, status_code=200)
    response.raw_headers = [*kept, (b"content-length", str(len(body)).encode("ascii"))]
    return response


class GatewayRoot:
    """Service mode's ``GET /`` and ``HEAD /``, answered by the gateway."""

    def __init__(
        self, passthrough: Passthrough, ttl_s: float = VERSION_TTL_S, clock: Callable[[], float] = time.monotonic
    ):
        self.passthrough, self.ttl_s, self.clock = passthrough, ttl_s, clock
        self._engine = engine_of(passthrough.settings).name
        self._known: tuple[str, float] | None = None

    async def response(self) -> Response:
        body = orjson.dumps(gateway_root_document(self._engine, await self.version()))
        # The server sends no body to a HEAD, only its length.
        response = Response(body, status_code=200)
        response.raw_headers = [*root_headers(self._engine), (b"content-length", str(len(body)).encode("ascii"))]
        return response

    async def version(self) -> str:
        """The cluster's version, asked with the gateway's own credentials,
        kept ``ttl_s``; a 503 when the cluster does not say it (nothing kept)."""
        now = self.clock()
        if self._known is not None and now - self._known[1] < self.ttl_s:
            return self._known[0]
        try:
            status, nodes = await self.passthrough.get_json(VERSION_PATH)
        except orjson.JSONDecodeError:
            status, nodes = 0, {}
        version = node_version(nodes) if status == 200 else None
        if version is None:
            raise errors.unavailable(
                "the gateway could not read the cluster's version with its own credentials "
                "(they need the cluster privilege monitor)",
                detail=f"GET {VERSION_PATH} answered {status}",
            )
        self._known = (version, now)
        return version
