"""What the project asks of a search engine: the :class:`SearchBackend`
protocol, what a cluster offers (:class:`ClusterCapabilities`), and the
helpers both backends share.

Everything the project asks of Elasticsearch or OpenSearch goes through a
backend: create a chunk index, bulk write, search and msearch, fetch by id,
delete by id, pause and restore refreshes, probe capabilities, health.
Request bodies are built once, in Elasticsearch's shape (`engines.schema`,
`search_extension.queries`); the OpenSearch backend translates them
(`engines.opensearch_dialect`). Only backends cross the seam: no caller
holds a raw client, and every client failure leaves a backend as one of the
errors in `engines.errors`.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from chunkrag_core import tracing

BulkItem = tuple[bool, dict[str, Any]]

# A backend's translation of its client's exception (and the address it
# talks to) into an `engines.errors` error; anything else comes back as is.
EngineErrorOf = Callable[[BaseException, str], BaseException]


# Retries of a request that could not reach a node (refused, reset, cut),
# each on the next live node: the clients' own default, three, reaches every
# node of a three-node cluster; a longer node list gets one try per node.
MIN_NODE_RETRIES = 3


def node_retries(nodes: Sequence[str]) -> int:
    """The clients' ``max_retries`` for a cluster reached through ``nodes``."""
    return max(MIN_NODE_RETRIES, len(nodes))


@dataclass(frozen=True, slots=True)
class ClusterCapabilities:
    version: str
    has_english_analyzer: bool
    has_rrf_retriever: bool
    has_linear_retriever: bool
    engine: str = "elasticsearch"
    # OpenSearch's neural-search plugin: the `hybrid` query with a
    # normalization pipeline fuses BM25 and kNN inside the cluster.
    has_hybrid_query: bool = False


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    status: str  # green | yellow (red is raised as EngineUnavailable)
    nodes: int


@runtime_checkable
class SearchBackend(Protocol):
    """What the project asks of a search engine. Bodies are Elasticsearch-shaped.
    Failures are raised as `engines.errors` (unavailable, timeout, refused,
    not found), never as the client's own exceptions."""

    engine: str
    display_url: str

    def with_headers(self, headers: Mapping[str, str]) -> SearchBackend: ...
    def health(self) -> str: ...
    def cluster_health(self) -> ClusterHealth: ...
    def capabilities(self) -> ClusterCapabilities: ...
    def offers_hybrid_query(self) -> bool: ...
    def index_exists(self, index: str) -> bool: ...
    def mapping_properties(self, index: str) -> dict[str, Any]: ...
    def field_types(self, index: str) -> dict[str, tuple[str, ...]]: ...
    def concrete_indices(self, expression: str, fields: Sequence[str]) -> dict[str, dict[str, tuple[str, ...]]]: ...
    def create_index(self, index: str, body: Mapping[str, Any]) -> None: ...
    def add_mapping_properties(self, index: str, properties: Mapping[str, Any]) -> None: ...
    def delete_index(self, index: str) -> None: ...
    def refresh(self, index: str) -> None: ...
    def refresh_interval(self, index: str) -> str | None: ...
    def set_refresh_interval(self, index: str, value: str | None) -> None: ...
    def index_hidden(self, index: str) -> bool: ...
    def hide_index(self, index: str) -> None: ...
    def bulk(
        self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float
    ) -> Iterator[BulkItem]: ...
    def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def msearch(self, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]: ...
    def hybrid_search(self, index: str, body: Mapping[str, Any], weights: Sequence[float]) -> dict[str, Any]: ...
    def fetch(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]: ...
    def delete_ids(self, index: str, ids: Sequence[str]) -> int: ...
    def count(self, index: str) -> int: ...
    def index_meta(self, index: str) -> dict[str, Any]: ...
    def set_index_meta(self, index: str, meta: Mapping[str, Any]) -> None: ...
    def open_point_in_time(self, index: str, keep_alive: str) -> str: ...
    def read_page(
        self, pit_id: str, *, keep_alive: str, size: int, search_after: Sequence[Any] | None, source: Any = True
    ) -> Page: ...
    def close_point_in_time(self, pit_id: str) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a whole-index read through a point in time: the hits
    (each with ``_seq_no`` and ``_primary_term``), the point in time's id to
    send next (engines may change it between pages), and where the next page
    starts (None: this page was the last)."""

    hits: tuple[dict[str, Any], ...]
    pit_id: str
    search_after: tuple[Any, ...] | None


def page_body(
    pit_id: str, *, keep_alive: str, size: int, search_after: Sequence[Any] | None, source: Any
) -> dict[str, Any]:
    """The search body of one page of a point-in-time read, the same on
    both engines: index order (``_shard_doc``, the cheapest sort there is),
    each hit's sequence number and primary term, no total counted."""
    body: dict[str, Any] = {
        "size": size,
        "pit": {"id": pit_id, "keep_alive": keep_alive},
        "sort": [{"_shard_doc": "asc"}],
        "seq_no_primary_term": True,
        "track_total_hits": False,
        "_source": source,
    }
    if search_after is not None:
        body["search_after"] = list(search_after)
    return body


def page_of(response: Mapping[str, Any], pit_id: str, size: int) -> Page:
    """A :class:`Page` from a point-in-time search answer."""
    hits = tuple(response.get("hits", {}).get("hits", []))
    after = tuple(hits[-1]["sort"]) if len(hits) == size and hits else None
    return Page(hits, response.get("pit_id") or pit_id, after)


def refresh_interval_of(response: Mapping[str, Any], index: str) -> str | None:
    return response.get(index, {}).get("settings", {}).get("index", {}).get("refresh_interval")


def hidden_of(response: Mapping[str, Any], index: str) -> bool:
    """Whether a ``_settings`` answer for ``index.hidden`` says the index is
    hidden (both engines answer ``"true"``, a string; absent: not hidden)."""
    value = response.get(index, {}).get("settings", {}).get("index", {}).get("hidden")
    return str(value).lower() == "true"


def hidden_settings() -> dict[str, Any]:
    """The index settings of a hidden index (both engines' ``index.hidden``):
    reached by its own name, never by a wildcard, ``_all`` or ``*`` unless a
    request says ``expand_wildcards=all``, so searches, counts and
    aggregations over a pattern leave it out."""
    return {"index": {"hidden": True}}


def field_types_of(response: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each field's types (dotted path -> sorted types) from a ``_field_caps``
    answer, the metadata fields (``_id``, ``_source``...) left out. Both
    engines answer in the same shape; a field mapped differently in the
    indices of an expression lists every type."""
    fields = response.get("fields") or {}
    return {
        path: tuple(sorted(types))
        for path, types in fields.items()
        if isinstance(types, Mapping) and not path.startswith("_")
    }


def concrete_indices_of(response: Mapping[str, Any]) -> dict[str, dict[str, tuple[str, ...]]]:
    """Each concrete index a ``_field_caps`` answer (asked with
    ``include_unmapped``) covers, with the types it maps for each field
    asked for (a field it does not map is absent). Both engines answer in
    the same shape: the top-level ``indices`` are the concrete indices the
    expression resolved to; a type lists its ``indices`` unless every one
    of them maps the field so."""
    listed = response.get("indices") or []
    concrete = [listed] if isinstance(listed, str) else [str(name) for name in listed]
    out: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in concrete}
    for path, types in (response.get("fields") or {}).items():
        if not isinstance(types, Mapping):
            continue
        for kind, caps in types.items():
            if kind == "unmapped" or not isinstance(caps, Mapping):
                continue
            holders = caps.get("indices")
            for name in ([holders] if isinstance(holders, str) else holders) if holders else concrete:
                if name in out:
                    out[name][path] = tuple(sorted({*out[name].get(path, ()), kind}))
    return out


def streaming_bulk(
    helpers,
    client,
    actions: Iterable[dict[str, Any]],
    *,
    chunk_size: int,
    max_retries: int,
    initial_backoff: float,
    **request: Any,
) -> Iterator[BulkItem]:
    """Each action's (ok, item) from either client's ``helpers.streaming_bulk``
    (the same options in both): failures are reported per item, not raised."""
    return helpers.streaming_bulk(
        client,
        actions,
        chunk_size=chunk_size,
        max_retries=max_retries,
        initial_backoff=initial_backoff,
        raise_on_error=False,
        raise_on_exception=False,
        **request,
    )


def delete_ids(backend: SearchBackend, index: str, ids: Sequence[str]) -> int:
    """Delete by id through the backend's bulk; the count deleted."""
    actions = ({"_op_type": "delete", "_index": index, "_id": chunk_id} for chunk_id in ids)
    return sum(ok for ok, _ in backend.bulk(actions, chunk_size=500, max_retries=0, initial_backoff=1))


@contextmanager
def translated(engine_error: EngineErrorOf, where: str) -> Iterator[None]:
    """Client exceptions raised inside leave as project errors."""
    try:
        yield
    except Exception as exc:
        error = engine_error(exc, where)
        if error is exc:
            raise
        raise error from exc


def translating(method):
    """A backend method whose client exceptions leave as project errors
    (through the backend's ``engine_error``)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        # One span per engine call when tracing is on (its URL without credentials).
        with (
            tracing.span(f"engine {method.__name__}", "client", {"server.address": self.display_url}),
            translated(self.engine_error, self.display_url),
        ):
            return method(self, *args, **kwargs)

    return call


def translated_items(items: Iterable[BulkItem], engine_error: EngineErrorOf, where: str) -> Iterator[BulkItem]:
    """``items`` (a lazy bulk), its client exceptions translated as they happen."""
    with translated(engine_error, where):
        yield from items
