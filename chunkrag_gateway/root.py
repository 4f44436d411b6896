"""``GET /`` and ``HEAD /`` where the cluster cannot answer them (the
Elasticsearch test distribution answers 405): the root document rebuilt from
``_nodes/_local`` and the cluster state (``chunkrag_core.engines.root_info``),
both asked with the caller's credentials, so the cluster still decides who
may see it. The frameworks' stores call it before anything else."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from chunkrag_core.engines.profile import engine_of
from chunkrag_core.engines.root_info import NODE_PATH, UUID_PATH, root_document
from chunkrag_gateway.identity import Caller
from chunkrag_gateway.passthrough import Passthrough

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
