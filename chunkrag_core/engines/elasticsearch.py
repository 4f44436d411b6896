"""The Elasticsearch backend: the `elasticsearch` client made from settings,
what the cluster offers (asked, not guessed), and its exceptions translated
into `engines.errors`. The client library is imported on first use."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Sequence

from chunkrag_core.engines import base, probe
from chunkrag_core.engines.base import BulkItem, ClusterCapabilities, ClusterHealth, Page, node_retries
from chunkrag_core.engines.errors import EngineTimeout, EngineUnavailable, refused
from chunkrag_core.settings import Settings

NAME = "Elasticsearch"


def make_client(settings: Settings):
    """An ``Elasticsearch`` client for every node of ``settings.es_url``
    (credentials in the URLs or ``ES_API_KEY``). Creating it opens no
    connection.

    Failover is the client's own (elastic-transport's node pool): requests go
    round the nodes; a connection refused, reset or cut marks the node dead
    (skipped for 1 s, doubling up to 30 s while it stays dead) and the request
    is sent again to the next node, whatever the method. Bulk requests are
    retried too: every chunk is written under its deterministic id, so a bulk
    sent twice writes nothing twice. A timeout is not retried (the next node
    would get the same request after a full timeout already spent): this is
    what every write gets. Reads get `read_options` on top."""
    from elasticsearch import Elasticsearch

    options: dict[str, Any] = {
        "request_timeout": settings.es_request_timeout_s,
        "max_retries": node_retries(settings.es_nodes),
    }
    try:
        from elasticsearch.serializer import OrjsonSerializer

        # Bulk bodies are mostly float vectors: orjson encodes them several
        # times faster than the standard library, on the embedder's CPU.
        options["serializer"] = OrjsonSerializer()
    except ImportError:
        pass
    if settings.es_api_key:
        options["api_key"] = settings.es_api_key
    if settings.es_ca_certs:
        options["ca_certs"] = settings.es_ca_certs
    return Elasticsearch(list(settings.es_nodes), **options)


def read_options(settings: Settings) -> dict[str, Any]:
    """What a read (a search, msearch, mget, count, an index or cluster
    read: nothing it sends changes the cluster) adds to `make_client`'s
    options, through ``client.options(...)``, which shares the node pool.

    With several nodes one attempt waits `Settings.attempt_timeout_s` (10 s)
    and a node silent that long (one that hangs: alive, its sockets open,
    nothing answering) is marked dead and the read sent to the next node
    (``retry_on_timeout``): a read sent twice changes nothing. Writes (bulk,
    index creation, mappings, settings, refresh, deletion) never get this:
    on a cluster that is slow rather than hung (an index red after a node
    lost, shards recovering) a write given 10 s per node timed out on every
    node in turn and the client marked them all dead, again and again, where
    the whole timeout lets it finish. With one node nothing is added: there
    is no other node to go to."""
    if len(settings.es_nodes) < 2:
        return {}
    return {"request_timeout": settings.attempt_timeout_s(settings.es_nodes), "retry_on_timeout": True}


def engine_error(exc: BaseException, where: str) -> BaseException:
    """The project error for an exception of the `elasticsearch` client
    (anything else is returned as it is)."""
    import elasticsearch

    if isinstance(exc, elasticsearch.ApiError):
        return refused(NAME, exc.meta.status, exc.body, str(exc.message), where)
    if isinstance(exc, elasticsearch.ConnectionTimeout):
        return EngineTimeout(f"{NAME} at {where} did not answer in time: {exc}", engine=NAME)
    if isinstance(exc, elasticsearch.TransportError):
        return EngineUnavailable(f"{NAME} at {where} is not reachable: {exc}", engine=NAME)
    return exc


def capability_questions(client) -> probe.Questions:
    """What the probe asks the cluster, rather than guess from its version or
    licence: a feature absent from the distribution (400: unknown retriever
    or analyzer) and one refused by the licence (a 403 naming it) both say
    absent; a refusal of the caller's credentials says nothing
    (`engines.probe`)."""

    empty = {"standard": {"query": {"match_none": {}}}}
    rrf = {"rrf": {"retrievers": [empty, empty]}}
    linear = {"linear": {"retrievers": [{"retriever": empty, "weight": 0.5, "normalizer": "minmax"}] * 2}}
    # A search of `*` that may match no index: a caller who reads no index
    # still has the body parsed, so an unknown retriever is still a 400.
    everywhere = {"index": "*", "size": 0, "allow_no_indices": True}
    return {
        "version": (
            lambda: client.cluster.stats(filter_path="nodes.versions")["nodes"]["versions"][0],
            probe.UNKNOWN_VERSION,
        ),
        "has_english_analyzer": (
            probe.succeeds(lambda: client.indices.analyze(analyzer="english", text="probe")),
            False,
        ),
        "has_rrf_retriever": (probe.succeeds(lambda: client.search(retriever=rrf, **everywhere)), False),
        "has_linear_retriever": (probe.succeeds(lambda: client.search(retriever=linear, **everywhere)), False),
    }


def probe_capabilities(client, probed: probe.Probed | None = None, where: str = NAME) -> ClusterCapabilities:
    """The cluster's capabilities as ``client``'s credentials may learn them,
    settled answers remembered in ``probed`` for every later caller."""
    return (probed or probe.Probed()).get(
        capability_questions(client), lambda answers: ClusterCapabilities(**answers), engine_error, where
    )


class ElasticsearchBackend:
    engine = "elasticsearch"
    engine_error = staticmethod(engine_error)

    def __init__(
        self,
        client,
        display_url: str = NAME,
        *,
        reads: Mapping[str, Any] | None = None,
        _probed: probe.Probed | None = None,
        _owner: bool = True,
    ):
        """``client`` sends the writes as it is; reads go through
        ``client.options(**reads)`` (`read_options`; the same node pool)."""
        self.client = client
        self._reads = dict(reads or {})
        self.reader = client.options(**self._reads) if self._reads else client
        self.display_url = display_url
        self._probed = _probed or probe.Probed()
        self._owner = _owner

    @classmethod
    def from_settings(cls, settings: Settings) -> ElasticsearchBackend:
        return cls(make_client(settings), settings.es_url_for_display, reads=read_options(settings))

    def with_headers(self, headers: Mapping[str, str]) -> ElasticsearchBackend:
        """A view that sends ``headers`` (e.g. the caller's Authorization) on every request."""
        return ElasticsearchBackend(
            self.client.options(headers=dict(headers)),
            self.display_url,
            reads=self._reads,
            _probed=self._probed,
            _owner=False,
        )

    def health(self) -> str:
        """The cluster's status; raises `EngineUnavailable` with the cause.
        ``_cluster/health`` rather than ``GET /``: the test distribution has
        no root endpoint."""
        return self.cluster_health().status

    def cluster_health(self) -> ClusterHealth:
        try:
            health = self.reader.cluster.health(timeout="5s")
        except Exception as exc:
            raise EngineUnavailable(
                f"{NAME} at {self.display_url} is not reachable ({type(exc).__name__}: {exc}); "
                "start it with `chunkrag services up` or point ES_URL at a cluster",
                engine=NAME,
            ) from exc
        if health["status"] == "red":
            raise EngineUnavailable(f"{NAME} at {self.display_url} is red", engine=NAME)
        return ClusterHealth(health["status"], int(health.get("number_of_nodes") or 0))

    @base.translating
    def capabilities(self) -> ClusterCapabilities:
        """Asked with this view's credentials; what the cluster settled is
        shared by every view, what a caller's rights left open is not
        (`engines.probe`)."""
        return probe_capabilities(self.reader, self._probed, self.display_url)

    def offers_hybrid_query(self) -> bool:
        # Elasticsearch has no neural-search `hybrid` query: nothing to probe.
        return False

    @base.translating
    def index_exists(self, index: str) -> bool:
        return bool(self.reader.indices.exists(index=index))

    @base.translating
    def mapping_properties(self, index: str) -> dict[str, Any]:
        mapping = self.reader.indices.get_mapping(index=index)
        return dict(next(iter(mapping.values()))["mappings"].get("properties", {}))

    @base.translating
    def field_types(self, index: str) -> dict[str, tuple[str, ...]]:
        # _field_caps needs only the read privilege (a mapping read needs
        # view_index_metadata) and applies field-level security.
        return base.field_types_of(self.reader.field_caps(index=index, fields="*"))

    @base.translating
    def concrete_indices(self, expression: str, fields: Sequence[str]) -> dict[str, dict[str, tuple[str, ...]]]:
        """The concrete indices ``expression`` (wildcards, lists, aliases,
        data streams, exclusions) covers for these credentials, as a search
        would resolve it, each with its types of ``fields``: one
        ``_field_caps``, which needs only the read privilege (``_resolve/index``
        and a mapping read need view_index_metadata)."""
        answer = self.reader.field_caps(index=expression, fields=list(fields), include_unmapped=True)
        return base.concrete_indices_of(answer)

    @base.translating
    def create_index(self, index: str, body: Mapping[str, Any]) -> None:
        self.client.indices.create(index=index, settings=body["settings"], mappings=body["mappings"])

    @base.translating
    def add_mapping_properties(self, index: str, properties: Mapping[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, properties=dict(properties))

    @base.translating
    def delete_index(self, index: str) -> None:
        self.client.indices.delete(index=index, ignore_unavailable=True)

    @base.translating
    def refresh(self, index: str) -> None:
        self.client.indices.refresh(index=index)

    @base.translating
    def refresh_interval(self, index: str) -> str | None:
        return base.refresh_interval_of(
            self.reader.indices.get_settings(index=index, name="index.refresh_interval"), index
        )

    @base.translating
    def set_refresh_interval(self, index: str, value: str | None) -> None:
        self.client.indices.put_settings(index=index, settings={"index": {"refresh_interval": value}})

    @base.translating
    def index_hidden(self, index: str) -> bool:
        return base.hidden_of(self.reader.indices.get_settings(index=index, name="index.hidden"), index)

    @base.translating
    def hide_index(self, index: str) -> None:
        self.client.indices.put_settings(index=index, settings=base.hidden_settings())

    def bulk(
        self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float
    ) -> Iterator[BulkItem]:
        from elasticsearch import helpers

        items = base.streaming_bulk(
            helpers,
            self.client,
            actions,
            chunk_size=chunk_size,
            max_retries=max_retries,
            initial_backoff=initial_backoff,
        )
        return base.translated_items(items, self.engine_error, self.display_url)

    @base.translating
    def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.reader.search(index=index, body=dict(body))

    @base.translating
    def msearch(self, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.reader.msearch(searches=list(searches))

    def hybrid_search(self, index: str, body: Mapping[str, Any], weights: Sequence[float]) -> dict[str, Any]:
        raise NotImplementedError("Elasticsearch has no neural-search `hybrid` query; fuse client-side (mode `minmax`)")

    @base.translating
    def fetch(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        docs = self.reader.mget(index=index, ids=list(ids))["docs"]
        return [doc for doc in docs if doc.get("found")]

    def delete_ids(self, index: str, ids: Sequence[str]) -> int:
        return base.delete_ids(self, index, ids)

    @base.translating
    def count(self, index: str) -> int:
        return int(self.reader.count(index=index)["count"])

    @base.translating
    def index_meta(self, index: str) -> dict[str, Any]:
        mapping = self.reader.indices.get_mapping(index=index)
        return dict(next(iter(mapping.values()))["mappings"].get("_meta") or {})

    @base.translating
    def set_index_meta(self, index: str, meta: Mapping[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, meta=dict(meta))

    @base.translating
    def open_point_in_time(self, index: str, keep_alive: str) -> str:
        return str(self.reader.open_point_in_time(index=index, keep_alive=keep_alive)["id"])

    @base.translating
    def read_page(
        self, pit_id: str, *, keep_alive: str, size: int, search_after: Sequence[Any] | None, source: Any = True
    ) -> Page:
        body = base.page_body(pit_id, keep_alive=keep_alive, size=size, search_after=search_after, source=source)
        return base.page_of(self.reader.search(body=body), pit_id, size)

    @base.translating
    def close_point_in_time(self, pit_id: str) -> None:
        self.reader.close_point_in_time(id=pit_id)

    def close(self) -> None:
        if self._owner:
            self.client.close()
