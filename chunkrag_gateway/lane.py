"""The pass-through lane: a request meant for Elasticsearch goes to it as it
came, before FastAPI's routing, request objects and dependency solving
(measured: ~0.2 ms of CPU per request, out of a ~1 ms budget).

The gateway owns /v1/*, /openapi.json and the ``_search`` of an index whose
body carries ext.chunkrag; everything else is forwarded. Forwarding every
other path, rather than a list of endpoints, because the official clients use
dozens of them (HEAD /{index} for ``exists``, _mapping, _count, scroll,
PIT, ...). Which of them may pass is decided before, by the guard
(``guard.py``, the endpoint classes of ``policy.py``); what the body of a
search names (an _msearch's indices, a PIT) is checked here, where the body
is read anyway, and in service mode the strict second line (``body_reads.py``).
The request goes with the caller's credentials (forward mode) or its gateway
key's derived key (service mode), see ``identity.py`` and ``derived_keys.py``.
"""

from __future__ import annotations

from urllib.parse import unquote

import anyio
import orjson

from chunkrag_core.engines.profile import ELASTICSEARCH, PointInTimeApi
from chunkrag_gateway import errors, playground, root, telemetry
from chunkrag_gateway.aliases import ForeignAliases
from chunkrag_gateway.body_reads import (
    JSON_MEDIA_TYPES,
    MAX_DECODED_BYTES,
    body_parameters,
    check_content_coding,
    check_search_body,
    clears_all_scrolls,
    content_coding,
    decoded_body,
    index_expressions,
    media_type,
    non_json_format,
    parse_msearch,
    referenced_indices,
    strict_json,
)
from chunkrag_gateway.context_ids import msearch_pit_ids, opened_id, presented_ids
from chunkrag_gateway.identity import Caller, check_indices
from chunkrag_gateway.passthrough import Passthrough
from chunkrag_gateway.policy import (
    Endpoint,
    has_chunkrag_ext,
    refuse_chunkrag_outside_index_search,
    segments,
)
from chunkrag_gateway.responses import accept_of, error_response
from chunkrag_gateway.shared_state import LocalContexts

# The gateway's own routes, exactly: any other path (/v1/_search included)
# is classified by the guard and forwarded like every other.
GATEWAY_ROUTES = frozenset(
    {
        "/v1/ask",
        "/v1/health",
        "/openapi.json",
        "/v1/docs",
        "/v1/docs/oauth2-redirect",
        *playground.PUBLIC_PATHS,
        playground.INDICES,
    }
)
# Most searches carry no ext.chunkrag: their bytes are forwarded without
# being decoded (vectors make bodies large). A body that holds the word
# elsewhere is decoded by the route, which forwards it when ext lacks it.
CHUNKRAG_MARK = b'"chunkrag"'


class PassthroughLane:
    def __init__(
        self,
        app,
        passthrough: Passthrough,
        contexts=None,
        aliases: ForeignAliases | None = None,
        point_in_time: PointInTimeApi = ELASTICSEARCH.point_in_time,
        max_body_bytes: int = MAX_DECODED_BYTES,
    ):
        self.app, self.passthrough = app, passthrough
        # The engine's point-in-time API: which request closes which ids.
        self.point_in_time = point_in_time
        # Service mode: the most a compressed body may decode to (CHUNKRAG_GATEWAY_MAX_BODY_BYTES).
        self.max_body_bytes = max_body_bytes
        # Service mode with CHUNKRAG_GATEWAY_REFUSE_FOREIGN_ALIASES: aliases pointing outside a key's patterns.
        self.aliases = aliases
        # Service mode: which gateway key each scroll and PIT id belongs to
        # (in this process, or shared by the instances: shared_state.py).
        self.contexts = contexts if contexts is not None else LocalContexts()
        # Service mode: GET / answered by the gateway itself (root.py).
        self.gateway_root = root.GatewayRoot(passthrough)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in GATEWAY_ROUTES:
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:
            return  # the client went away: nobody to answer
        state = scope.get("state", {})
        caller = state.get("caller", Caller())
        try:
            endpoint = state.get("endpoint")
            if endpoint is None:  # the guard classifies every path it lets through
                raise errors.forbidden_endpoint(f"the gateway does not forward {scope['method']} {scope['path']}")
            if caller.key is not None and endpoint.kind != "read" and not await self.passthrough.cluster_limits(caller):
                # The second line reads the bodies of the read class only (a
                # _bulk or _mget names indices in its body too).
                raise errors.forbidden_endpoint(
                    f"the gateway does not forward {scope['method']} {scope['path']} for a gateway API key: "
                    "where the cluster cannot limit the key itself, only read APIs pass"
                )
            if (coding := content_coding(scope["headers"])) is not None:
                # Decoding costs CPU in proportion to what comes out: off the loop.
                if caller.key is not None:
                    # Service mode's second line reads the body: it reads the
                    # decoded one, and forwards what it read, as it read it.
                    body = await anyio.to_thread.run_sync(decoded_body, coding, body, self.max_body_bytes)
                    scope = {**scope, "headers": without_coding(scope["headers"])}
                else:
                    await anyio.to_thread.run_sync(check_content_coding, coding, body)
            check_request(endpoint, caller, scope, body, self.point_in_time)
            if self.aliases is not None and caller.key is not None:
                for named in indices_named(endpoint, body):
                    await self.aliases.check(caller, named)
            presented: list[str] = []
            if caller.key is not None:
                # Every class: with derived keys an async search (cluster or
                # write class, when forwarded) searches through a PIT too.
                query = scope.get("query_string", b"").decode("latin-1")
                parts = segments(raw_path_of(scope))
                presented = presented_ids(scope["method"], parts, query, body, self.point_in_time)
                await self.contexts.verify(caller.key.name, presented)
            if is_filtered_search(scope["method"], raw_path_of(scope)) and carries_chunkrag(body):
                return await self.app(scope, replay(body, receive), send)
            telemetry.note(scope, mode="passthrough")
            if caller.key is not None and root.is_root(scope["method"], scope["path"]):
                response = await self.gateway_root.response()
            else:
                response = await self._forwarded(scope, body, caller, endpoint, presented)
        except errors.GatewayError as exc:
            response = error_response(exc, accept_of(scope))
        await response(scope, receive, send)

    async def _forwarded(self, scope, body: bytes, caller: Caller, endpoint: Endpoint, presented: list[str]):
        """The cluster's answer (``GET /`` rebuilt where it answers 405); in
        service mode each scroll or PIT id a read hands out is bound to the key."""
        response = await self.passthrough.forward(
            scope["method"], request_target(scope), scope["headers"], body, caller
        )
        if response.status_code in root.NOT_SERVED and root.is_root(scope["method"], scope["path"]):
            response = await root.cluster_root(self.passthrough, scope["headers"], caller)
        if caller.key is None or endpoint.kind != "read" or response.status_code != 200:
            return response
        if (opened := opened_id(response.body)) is not None:
            await self.contexts.bind(caller.key.name, opened)
        if endpoint.msearch and presented:
            # Each search through a PIT answers with its (possibly new) id: the key's too.
            for opened in msearch_pit_ids(response.body):
                await self.contexts.bind(caller.key.name, opened)
        return response


def check_request(
    endpoint: Endpoint, caller: Caller, scope, body: bytes, pit: PointInTimeApi = ELASTICSEARCH.point_in_time
) -> None:
    """Everything the gateway checks beyond the path: clearing every scroll
    or closing every point in time (both modes), then what only the body
    tells (``check_body``), and in service mode the strict second line
    (``check_service_body``)."""
    raw_path = raw_path_of(scope)
    query = scope.get("query_string", b"").decode("latin-1")
    if clears_all_scrolls(scope["method"], segments(raw_path), body, query):
        raise errors.forbidden_endpoint(
            "clearing every scroll (_all) is refused by the gateway: clear your own scrolls by their ids"
        )
    if scope["method"] == "DELETE" and pit.close_all is not None and segments(raw_path) == pit.close_all:
        raise errors.forbidden_endpoint(
            "closing every point in time (_all) is refused by the gateway: "
            f"close your own by their ids (DELETE /{'/'.join(pit.close)} with [{pit.close_key}])"
        )
    if caller.key is not None:
        check_service_body(endpoint, caller, scope, body)
    check_body(endpoint, caller, body)


def check_service_body(endpoint: Endpoint, caller: Caller, scope, body: bytes) -> None:
    """Service mode's second line: a body the gateway cannot read exactly as
    Elasticsearch would is refused, and so is any clause that reads an index
    the gateway key may not read."""
    named = body_parameters(scope.get("query_string", b"").decode("latin-1"))
    if named:
        raise errors.bad_request(
            f"request bodies in URL parameters ([{', '.join(named)}]) are refused by this gateway: send the body itself"
        )
    other = non_json_format(scope.get("query_string", b"").decode("latin-1"), scope["headers"])
    if other is not None:
        raise errors.bad_request(f"this gateway answers in JSON only, got a request for [{other}]")
    if endpoint.kind != "read" or not body.strip():
        return
    kind = media_type(scope["headers"], "application/json")
    if kind not in JSON_MEDIA_TYPES:
        raise errors.bad_request(f"this gateway reads request bodies as JSON only, got content type [{kind}]")

    def allowed(indices, what):
        check_indices(caller, indices, what=what)

    if endpoint.msearch:
        for header, search in parse_msearch(body):
            indices = endpoint.indices
            if "index" in header:
                indices = index_expressions(header["index"], "an _msearch header")
            if not through_a_pit(indices, search):
                check_indices(caller, indices, what="an _msearch search")
            check_search_body(search, allowed)
        return
    check_search_body(strict_json(body, "the request body"), allowed)


def indices_named(endpoint: Endpoint, body: bytes) -> list[tuple[str, ...] | None]:
    """Every list of index expressions a request names: its path's, and for
    a read with a body (already passed by ``check_service_body``) its
    _msearch headers' and those of the clauses that read by reference."""
    named = [endpoint.indices]
    if endpoint.kind != "read" or not body.strip():
        return named
    if endpoint.msearch:
        for header, search in parse_msearch(body):
            if "index" in header:
                named.append(index_expressions(header["index"], "an _msearch header"))
            named.extend(indices for _, indices in referenced_indices(search))
    else:
        named.extend(indices for _, indices in referenced_indices(strict_json(body, "the request body")))
    return named


def check_body(endpoint: Endpoint, caller: Caller, body: bytes) -> None:
    """What only the body tells: ext.chunkrag where the gateway cannot serve
    it, and, for a caller limited to some indices, the indices an _msearch
    names and whether an index-less search continues a PIT."""
    if CHUNKRAG_MARK in body:
        refuse_chunkrag_outside_index_search(endpoint, body)
    if caller.indices is None:
        return
    if endpoint.msearch:
        # Read as the second line read it (``check_service_body``: only a
        # caller limited to some indices, a gateway key, comes here).
        for header, search in parse_msearch(body) if body.strip() else ():
            named = index_expressions(header["index"], "an _msearch header") if "index" in header else endpoint.indices
            if not through_a_pit(named, search):
                check_indices(caller, named, what="an _msearch search")
    elif endpoint.search and endpoint.indices is None:
        try:
            decoded = orjson.loads(body) if body.strip() else None
        except orjson.JSONDecodeError:
            decoded = None
        # A PIT id came from an open on an allowed index.
        if not (isinstance(decoded, dict) and isinstance(decoded.get("pit"), dict)):
            check_indices(caller, None, what="a search without an index (other than a PIT search)")


def through_a_pit(indices: tuple[str, ...] | None, search: object) -> bool:
    """A search that names no index and goes through a point in time: the
    PIT's id decides its indices (it came from an open on an index the key
    may read), and the id is checked against the key it was handed to
    (``context_ids.py``), as for a search's ``pit``."""
    return indices is None and isinstance(search, dict) and isinstance(search.get("pit"), dict)


def carries_chunkrag(body: bytes) -> bool:
    """Whether a search body holds ext.chunkrag (or may: broken JSON that
    names it): only those go to the route; every other search is forwarded
    here, where the scroll or PIT id it hands out is bound to its key."""
    if CHUNKRAG_MARK not in body:
        return False
    try:
        return has_chunkrag_ext(orjson.loads(body))
    except orjson.JSONDecodeError:
        return True  # the route names what is wrong with it


def is_filtered_search(method: str, raw_path: str) -> bool:
    """A search ext.chunkrag changes: ``/{index}/_search``, or ``/_search``
    (through a point in time, which ``check_body`` has required)."""
    return is_index_search(method, raw_path) or (method in ("GET", "POST") and raw_path.split("?", 1)[0] == "/_search")


def is_index_search(method: str, raw_path: str) -> bool:
    """``GET|POST /{index}/_search``: the one request ext.chunkrag changes.
    Read from the raw path, segment by segment, as the guard read it: an
    encoded "/" inside the index segment (``/a%2F_search``) is not a search
    of an index ``a``, whatever the decoded path looks like."""
    parts = raw_path.split("?", 1)[0].split("/")
    return (
        method in ("GET", "POST")
        and len(parts) == 3
        and parts[0] == ""
        and unquote(parts[2]) == "_search"
        and bool(parts[1])
        and "/" not in unquote(parts[1])
    )


def without_coding(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers of a request whose body was decoded: no Content-Encoding,
    nor the encoded body's Content-Length."""
    return [(name, value) for name, value in headers if name.lower() not in (b"content-encoding", b"content-length")]


def raw_path_of(scope) -> str:
    return (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")


def request_target(scope) -> str:
    """Path and query as the client sent them: the raw path keeps its
    percent-encoding (date-math index names, ids holding "/")."""
    query = scope.get("query_string", b"").decode("latin-1")
    return raw_path_of(scope) + (f"?{query}" if query else "")


async def read_body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive):
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
