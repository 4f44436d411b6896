"""Scroll and PIT ids bound to the gateway key that opened them (service mode).

Elasticsearch refuses to read a scroll through an API key other than the
one that opened it, but it ends (and, on a read by the wrong key, drops) a
scroll or PIT for anyone who presents its id. In service mode every key's
derived key belongs to the same service account, and ids are not secrets: a
scroll id is a node session id, which a caller sees in its own ids, and a
counter. So one key could end every other key's scrolls by counting, and
where the gateway's checks are the only line (OpenSearch, a cluster without
security) read them. The gateway therefore remembers which key each scroll
and PIT id it handed out belongs to, and refuses any other key that
presents it, as Elasticsearch answers a missing context (404).

``ContextOwners`` keeps the memory in this process: behind several gateway
instances a caller's scroll and PIT requests must then reach the instance
that opened them, and after a restart open scrolls and PITs are refused and
must be opened again. With CHUNKRAG_GATEWAY_SHARED_STATE=redis the same
bindings live in Redis (``shared_state.RedisContexts``), shared by every
instance, and each instance remembers those it made or checked too, so an
owner keeps what it opened when Redis loses its data. At most ``capacity``
ids are kept per key, its oldest dropped first.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Iterable
from urllib.parse import parse_qsl

import orjson

from chunkrag_core.engines.profile import ELASTICSEARCH, PointInTimeApi
from chunkrag_gateway import errors
from chunkrag_gateway.body_reads import parse_msearch

# Ids kept per gateway key at most (each a few hundred bytes): far more than
# the scrolls and PITs one caller keeps open (Elasticsearch's own default cap
# is 500 open scrolls per node).
CAPACITY = 10_000
# Elasticsearch writes an answer's scroll or PIT id as its first field
# (search: _scroll_id, then pit_id; PIT open: id; OpenSearch's PIT open:
# pit_id), pretty-printed or not.
_LEADING_ID = re.compile(rb'\A\s*\{\s*"(?:_scroll_id|pit_id|id)"\s*:\s*"([^"\\]{1,8192})"')


def opened_id(body: bytes) -> str | None:
    """The scroll or PIT id an answer hands out, if any."""
    found = _LEADING_ID.match(body)
    return found.group(1).decode("latin-1") if found else None


def presented_ids(
    method: str,
    parts: tuple[str, ...],
    query_string: str,
    body: bytes,
    pit: PointInTimeApi = ELASTICSEARCH.point_in_time,
) -> list[str]:
    """The scroll and PIT ids a request continues, searches through or ends:
    ``/_search/scroll`` (path, ``scroll_id`` parameter, body), the close of
    a point in time (``pit``: Elasticsearch's ``DELETE /_pit`` with body
    ``id``, OpenSearch's ``DELETE /_search/point_in_time`` with body
    ``pit_id``), a search body's ``pit.id`` (``_search``, ``_async_search``),
    and every ``pit.id`` of an ``_msearch``'s searches (read as the second
    line reads them: a body it would refuse is a 400 here too)."""
    # Only the endpoints that take an id have their body decoded (a write's is left alone).
    if parts[:2] == ("_search", "scroll"):
        named = [parts[2]] if len(parts) == 3 else []
        named += [value for name, value in parse_qsl(query_string, keep_blank_values=True) if name == "scroll_id"]
        named += _as_list(_decoded(body).get("scroll_id"))
        return [i for value in named for i in _split(value)]
    if parts == pit.close and method == "DELETE":
        return [i for value in _as_list(_decoded(body).get(pit.close_key)) for i in _split(value)]
    # ``/_msearch`` or ``/<index>/_msearch``, and the searches likewise (``/<index>/_doc/_search``
    # writes a document whose id is "_search").
    if 1 <= len(parts) <= 2 and parts[-1] == "_msearch":
        return [i for _, search in parse_msearch(body) for i in _pit_ids(search)] if body.strip() else []
    if 1 <= len(parts) <= 2 and parts[-1] in SEARCHES_THROUGH_A_PIT:
        return _pit_ids(_decoded(body))
    return []


# The endpoints whose body searches through a point in time (``pit``):
# Elasticsearch's async search takes one as its search does.
SEARCHES_THROUGH_A_PIT = frozenset({"_search", "_async_search"})


def _pit_ids(search: dict[str, Any]) -> list[str]:
    pit = search.get("pit")
    if not isinstance(pit, dict):
        return []
    return [i for value in _as_list(pit.get("id")) for i in _split(value)]


def msearch_pit_ids(body: bytes) -> list[str]:
    """The point-in-time ids an ``_msearch`` answer hands out (each search's
    ``pit_id``, which Elasticsearch may change from the one presented), to
    be bound to the key that searched through them."""
    document = _decoded(body)
    responses = document.get("responses")
    if not isinstance(responses, list):
        return []
    return [item["pit_id"] for item in responses if isinstance(item, dict) and isinstance(item.get("pit_id"), str)]


def _decoded(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError:
        return {}  # the second line refused what it could not read; Elasticsearch names the rest
    return document if isinstance(document, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _split(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        return (part.strip() for part in value.split(",") if part.strip())
    # Not a string: whatever it is, it is no id this key was given.
    return () if value is None else (orjson.dumps(value).decode(),)


class ContextOwners:
    """Which gateway key each id was handed out to; at most ``capacity`` ids
    per key, that key's oldest forgotten first (one key opening PITs by the
    thousand forgets only its own)."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._owner_of: dict[str, str] = {}
        self._ids_of: dict[str, OrderedDict[str, None]] = {}

    def remember(self, owner: str, context_id: str) -> None:
        if self._owner_of.setdefault(context_id, owner) != owner:
            return  # handed out to another key first: it stays theirs
        ids = self._ids_of.setdefault(owner, OrderedDict())
        ids[context_id] = None
        ids.move_to_end(context_id)
        while len(ids) > self.capacity:
            forgotten, _ = ids.popitem(last=False)
            del self._owner_of[forgotten]

    def owner_of(self, context_id: str) -> str | None:
        """The key ``context_id`` was handed out to, if it is remembered."""
        return self._owner_of.get(context_id)

    def check(self, owner: str, ids: Iterable[str]) -> None:
        """A 404 unless every id was handed out to ``owner``."""
        for context_id in ids:
            if self._owner_of.get(context_id) != owner:
                raise context_missing(owner)


def context_missing(owner: str) -> errors.GatewayError:
    """Elasticsearch's answer to an id it does not know, for an id ``owner`` was not given."""
    return errors.GatewayError(
        404,
        "search_context_missing_exception",
        f"no search context found for this id under gateway API key [{owner}]: "
        "scroll and PIT ids answer only the key that opened them",
    )
