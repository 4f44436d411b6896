"""Which pass-through requests the gateway forwards: a pure classification of
method and path into an endpoint class, and the indices a request names.

Read-only by default. The classes (``CHUNKRAG_GATEWAY_PASSTHROUGH``):

- ``read``: _search, _count, _msearch, _mapping, _field_caps, scroll, PIT
  open/close (the engine's paths: Elasticsearch's ``_pit``, OpenSearch's
  ``_search/point_in_time``), HEAD/GET of an index (existence) and of ``/``
  (ping, info); always forwarded, the other classes add to it;
- ``write``: every other API under an index (documents, _bulk, settings,
  index creation and deletion), and the root _bulk, _mget, _reindex;
- ``cluster``: every other ``/_...`` API (_cluster, _cat, _nodes, _security, ...),
  and the index APIs that answer with the cluster's nodes (``NODE_APIS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

import orjson

from chunkrag_core.engines.profile import ELASTICSEARCH, PointInTimeApi
from chunkrag_core.settings import PASSTHROUGH_CLASSES, passthrough_classes
from chunkrag_gateway import errors

CLASSES = PASSTHROUGH_CLASSES
# (method set, path shape) of the read class; "{index}" is an index
# expression, "*" any one segment.
_READ = (
    ({"GET", "HEAD"}, ()),
    ({"GET", "HEAD"}, ("{index}",)),
    ({"GET", "POST"}, ("_search",)),
    ({"GET", "POST"}, ("{index}", "_search")),
    ({"GET", "POST"}, ("_count",)),
    ({"GET", "POST"}, ("{index}", "_count")),
    ({"GET", "POST"}, ("_msearch",)),
    ({"GET", "POST"}, ("{index}", "_msearch")),
    ({"GET"}, ("_mapping",)),
    ({"GET"}, ("{index}", "_mapping")),
    ({"GET"}, ("_mapping", "field", "*")),
    ({"GET"}, ("{index}", "_mapping", "field", "*")),
    ({"GET", "POST"}, ("_field_caps",)),
    ({"GET", "POST"}, ("{index}", "_field_caps")),
    ({"GET", "POST", "DELETE"}, ("_search", "scroll")),
    ({"GET", "POST", "DELETE"}, ("_search", "scroll", "*")),
)
# The point-in-time open and close are read APIs too; their paths are the
# engine's (``EngineProfile.point_in_time``).
# Root-level APIs that write (or read documents by id): the write class.
_ROOT_WRITES = ("_bulk", "_mget", "_reindex")
# Index APIs whose answer names the cluster's nodes (names, ids, transport
# addresses and attributes): the cluster class, like _nodes and _cat, whatever
# index they are asked about. A caller who may search an index learns nothing
# from them it needs, and an attacker learns where to go next.
NODE_APIS = frozenset({"_search_shards", "_recovery", "_shard_stores", "_segments"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    kind: str  # read, write or cluster
    # The index expressions the path names; None: none (all, or not index-scoped).
    indices: tuple[str, ...] | None
    # The path names an index search or msearch whose body may name more.
    search: bool = False
    msearch: bool = False
    # Reads no index data by name: ping and info, or continues a scroll or
    # closes a PIT by an id the caller got from an allowed search.
    no_data: bool = False


def parse_classes(raw: str) -> frozenset[str]:
    """The classes CHUNKRAG_GATEWAY_PASSTHROUGH forwards; read always (declared in chunkrag_core.settings)."""
    return passthrough_classes(raw)


def segments(raw_path: str) -> tuple[str, ...]:
    """Path segments, each percent-decoded after splitting (a date-math index
    name holds an encoded "/")."""
    return tuple(unquote(part) for part in raw_path.split("?", 1)[0].strip("/").split("/") if part != "")


def _is_index(segment: str) -> bool:
    # Index names cannot begin with "_"; _all is the one keyword that names indices.
    return not segment.startswith("_") or segment == "_all"


def read_shapes(pit: PointInTimeApi) -> tuple[tuple[set[str], tuple[str, ...]], ...]:
    """The read class's (method set, path shape) pairs with ``pit``'s open and close."""
    return (*_READ, ({"POST"}, ("{index}", *pit.open)), ({"DELETE"}, pit.close))


def classify(method: str, raw_path: str, pit: PointInTimeApi = ELASTICSEARCH.point_in_time) -> Endpoint:
    """The class of ``method`` on ``raw_path``, the point-in-time API being
    ``pit`` (the engine's)."""
    parts = segments(raw_path)
    indices = tuple(parts[0].split(",")) if parts and _is_index(parts[0]) else None
    shape = tuple("{index}" if i == 0 and _is_index(p) else p for i, p in enumerate(parts))
    for methods, pattern in read_shapes(pit):
        if (
            method in methods
            and len(pattern) == len(shape)
            and all(want in ("*", got) for want, got in zip(pattern, shape))
        ):
            tail = shape[-1] if shape else ""
            no_data = not shape or shape == pit.close or shape[:2] == ("_search", "scroll")
            return Endpoint("read", indices, search=tail == "_search", msearch=tail == "_msearch", no_data=no_data)
    if indices is not None and len(parts) > 1 and parts[1] in NODE_APIS:
        return Endpoint("cluster", indices)
    if indices is not None or (parts and parts[0] in _ROOT_WRITES):
        return Endpoint("write", indices)
    return Endpoint("cluster", None)


def refuse_odd_paths(raw_path: str) -> None:
    """Empty, ``.`` and ``..`` segments: what the gateway classified must be
    what the cluster resolves, so paths a server might normalise are refused."""
    path = raw_path.split("?", 1)[0]
    parts = path.split("/")[1:]
    if "//" in path or any(unquote(part) in (".", "..") for part in parts):
        raise errors.bad_request(
            f"the path [{path}] holds an empty, . or .. segment; the gateway forwards only plain paths"
        )


def refuse_unless_allowed(endpoint: Endpoint, method: str, raw_path: str, allowed: frozenset[str]) -> None:
    if endpoint.kind in allowed:
        return
    raise errors.forbidden_endpoint(
        f"the gateway does not forward {method} {raw_path.split('?', 1)[0]}: "
        f"it is a {endpoint.kind} API and this gateway forwards only "
        f"[{', '.join(sorted(allowed))}] APIs (CHUNKRAG_GATEWAY_PASSTHROUGH)"
    )


def has_chunkrag_ext(document: object) -> bool:
    """Whether a decoded body's ``ext`` holds ``chunkrag``, whatever its
    value: a ``null`` or a list is the gateway's to refuse by name (the
    cluster would answer that it knows no ``SearchExtBuilder`` of that name)."""
    return isinstance(document, dict) and isinstance(document.get("ext"), dict) and "chunkrag" in document["ext"]


def refuse_chunkrag_outside_index_search(endpoint: Endpoint, body: bytes) -> None:
    """ext.chunkrag works on ``/{index}/_search``, and on ``/_search`` through
    a point in time: say so on _msearch and on another index-less _search
    rather than let Elasticsearch reject ``ext`` with a message about a plugin."""
    if endpoint.msearch:
        for line in body.split(b"\n")[1::2]:
            try:
                if has_chunkrag_ext(orjson.loads(line)):
                    raise errors.bad_request(
                        "ext.chunkrag is not supported in _msearch: "
                        "each filtered search costs model calls and is answered by the gateway, "
                        "so send each one as its own POST /{index}/_search"
                    )
            except orjson.JSONDecodeError:
                continue  # Elasticsearch names the broken line itself
        return
    if endpoint.search and endpoint.indices is None:
        try:
            decoded = orjson.loads(body) if body.strip() else None
        except orjson.JSONDecodeError:
            return
        if has_chunkrag_ext(decoded) and not isinstance(decoded.get("pit"), dict):
            raise errors.bad_request(
                "ext.chunkrag needs an index in the path (POST /{index}/_search), "
                "or a point in time (pit.id) to page through on POST /_search: "
                "a search without either would span every index"
            )
