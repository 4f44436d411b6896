"""The OpenSearch backend: Elasticsearch-shaped bodies translated
(`engines.opensearch_dialect`) and sent through `opensearch-py`, because the
`elasticsearch` client refuses OpenSearch servers; its exceptions translated
into `engines.errors`. The client library is imported on first use."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Sequence

from chunkrag_core.engines import base, probe
from chunkrag_core.engines import opensearch_dialect as osd
from chunkrag_core.engines.aws_signing import opensearch_sigv4
from chunkrag_core.engines.base import BulkItem, ClusterCapabilities, ClusterHealth, Page
from chunkrag_core.engines.errors import EngineTimeout, EngineUnavailable, refused
from chunkrag_core.settings import Settings

NAME = "OpenSearch"


def make_opensearch_client(
    urls: str | Sequence[str],
    *,
    request_timeout_s: float = 30.0,
    retry_on_timeout: bool = False,
    ca_certs: str | None = None,
    sigv4: tuple[str, str] | None = None,
):
    """An `opensearch-py` client for ``urls`` (one URL or every node's;
    credentials in the URLs: basic auth; ``sigv4`` = (region, service): every
    request signed with AWS credentials instead; https: TLS, verified against
    ``ca_certs`` when given). Opens no connection.

    Failover is opensearch-py's own connection pool: a connection refused,
    reset or cut marks the node dead (60 s, longer while it stays dead) and
    the request goes again to the next node, bulk requests included (chunk
    ids are deterministic, so a bulk sent twice writes nothing twice). Each
    attempt waits ``request_timeout_s``; a timeout is sent again to the next
    node only with ``retry_on_timeout`` (the reads' client: `read_client`).
    """
    from urllib.parse import unquote, urlsplit, urlunsplit

    from opensearchpy import OpenSearch

    urls = [urls] if isinstance(urls, str) else list(urls)
    parts = urlsplit(urls[0])
    options: dict[str, Any] = {
        "timeout": request_timeout_s,
        "max_retries": base.node_retries(urls),
        "retry_on_timeout": retry_on_timeout,
    }
    if sigv4 is not None:
        from chunkrag_core.engines import aws_signing

        options["http_auth"] = aws_signing.client_auth(*sigv4)
    elif parts.username is not None:
        # One cluster, one set of credentials (`settings.node_urls`): the first URL's.
        options["http_auth"] = (unquote(parts.username), unquote(parts.password or ""))
    if parts.scheme == "https":
        options.update(use_ssl=True, verify_certs=True)
        if ca_certs:
            options["ca_certs"] = ca_certs
    hosts = [urlunsplit(urlsplit(url)._replace(netloc=_without_userinfo(urlsplit(url)))) for url in urls]
    return OpenSearch(hosts, **options)


def read_client(settings: Settings, writes):
    """The client for reads (search, msearch, mget, count, index and cluster
    reads: nothing they send changes the cluster); ``writes`` (the client
    with the whole `es_request_timeout_s` and no retry on timeout) sends
    everything else, as it is with one node.

    With several nodes a read waits `Settings.attempt_timeout_s` (10 s) on one
    node, and a node silent that long (one that hangs) is marked dead and the
    read sent to the next node: a read sent twice changes nothing. Writes
    never get this: on a cluster slow rather than hung (an index red after a
    node lost) a bulk given 10 s per node timed out on every node and the
    client marked them all dead and back, again and again, for minutes.

    Why a second client: opensearch-py's ``Transport.perform_request`` takes
    the timeout per request (``request_timeout``, popped from the params by
    ``_resolve_request_args``) but reads ``self.retry_on_timeout``, set once in
    the Transport's constructor, when it catches a ``ConnectionTimeout``:
    there is no per-request retry on timeout, and flipping the attribute
    around a call would race with the other threads sharing the client (the
    gateway's, the workers'). So reads get a Transport of their own from the
    same factory (same URLs, credentials, TLS): its own connections and its
    own dead-node marks, so a node the reads passed over is still tried by a
    write, which then waits its whole timeout there as on one node."""
    nodes = settings.opensearch_nodes
    if len(nodes) < 2:
        return writes
    return make_opensearch_client(
        nodes,
        request_timeout_s=settings.attempt_timeout_s(nodes),
        retry_on_timeout=True,
        ca_certs=settings.opensearch_ca_certs,
        sigv4=opensearch_sigv4(settings),
    )


def _without_userinfo(parts) -> str:
    host = parts.hostname or ""
    return (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")


def engine_error(exc: BaseException, where: str) -> BaseException:
    """The project error for an exception of `opensearch-py` (anything else
    is returned as it is): the cluster's own status and error body, or
    unavailable / timed out when it could not answer."""
    import opensearchpy

    if isinstance(exc, opensearchpy.ConnectionTimeout):
        return EngineTimeout(f"{NAME} at {where} did not answer in time: {exc}", engine=NAME)
    if isinstance(exc, opensearchpy.ConnectionError):
        return EngineUnavailable(f"{NAME} at {where} is not reachable: {exc}", engine=NAME)
    if isinstance(exc, opensearchpy.TransportError) and isinstance(exc.status_code, int):
        return refused(NAME, exc.status_code, exc.info, str(exc.error), where)
    return exc


class OpenSearchBackend:
    engine = "opensearch"
    engine_error = staticmethod(engine_error)

    def __init__(
        self,
        client,
        display_url: str = NAME,
        *,
        reader=None,
        headers: Mapping[str, str] | None = None,
        _probed: probe.Probed | None = None,
        _owner: bool = True,
    ):
        """``client`` sends the writes; ``reader`` (default: ``client``) the
        reads (`read_client`)."""
        self.client = client
        self.reader = client if reader is None else reader
        self.display_url = display_url
        self._headers = dict(headers or {})
        self._probed = _probed or probe.Probed()
        self._pipelines: set[str] = set()
        self._owner = _owner

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenSearchBackend:
        client = make_opensearch_client(
            settings.opensearch_nodes,
            request_timeout_s=settings.es_request_timeout_s,
            ca_certs=settings.opensearch_ca_certs,
            sigv4=opensearch_sigv4(settings),
        )
        return cls(client, settings.opensearch_url_for_display, reader=read_client(settings, client))

    def _h(self) -> dict[str, Any]:
        # opensearch-py takes per-request headers on every API call.
        return {"headers": dict(self._headers)} if self._headers else {}

    def with_headers(self, headers: Mapping[str, str]) -> OpenSearchBackend:
        """A view that sends ``headers`` (e.g. the caller's Authorization) on every request."""
        return OpenSearchBackend(
            self.client,
            self.display_url,
            reader=self.reader,
            headers={**self._headers, **headers},
            _probed=self._probed,
            _owner=False,
        )

    def health(self) -> str:
        return self.cluster_health().status

    def cluster_health(self) -> ClusterHealth:
        try:
            health = self.reader.cluster.health(**self._h())
        except Exception as exc:
            raise EngineUnavailable(
                f"{NAME} at {self.display_url} is not reachable ({type(exc).__name__}: {exc}); "
                "start it with `chunkrag services up --only opensearch` or point OPENSEARCH_URL at a cluster",
                engine=NAME,
            ) from exc
        if health["status"] == "red":
            raise EngineUnavailable(f"{NAME} at {self.display_url} is red", engine=NAME)
        return ClusterHealth(health["status"], int(health.get("number_of_nodes") or 0))

    @base.translating
    def capabilities(self) -> ClusterCapabilities:
        """Asked with this view's credentials; what the cluster settled is
        shared by every view, what a caller's rights left open is not."""
        return self._probed.get(self._questions(), self._capabilities, self.engine_error, self.display_url)

    def offers_hybrid_query(self) -> bool:
        return self.capabilities().has_hybrid_query

    def _questions(self) -> probe.Questions:
        """Asked of the cluster, like Elasticsearch's probe: a query type the
        cluster lacks fails to parse (400) even when no index exists; a
        refusal of this view's credentials settles nothing (`engines.probe`)."""
        client, headers = self.reader, self._h()
        hybrid = {"size": 0, "query": {"hybrid": {"queries": [{"match_none": {}}]}}}
        english = {"analyzer": "english", "text": "probe"}
        return {
            "version": (
                lambda: client.cluster.stats(filter_path="nodes.versions", **headers)["nodes"]["versions"][0],
                probe.UNKNOWN_VERSION,
            ),
            "has_english_analyzer": (
                probe.succeeds(lambda: client.indices.analyze(body=english, **headers)),
                False,
            ),
            "has_hybrid_query": (
                probe.succeeds(lambda: client.search(index="*", body=hybrid, allow_no_indices=True, **headers)),
                False,
            ),
        }

    def _capabilities(self, answers) -> ClusterCapabilities:
        return ClusterCapabilities(**answers, has_rrf_retriever=False, has_linear_retriever=False, engine=self.engine)

    @base.translating
    def index_exists(self, index: str) -> bool:
        return bool(self.reader.indices.exists(index=index, **self._h()))

    @base.translating
    def mapping_properties(self, index: str) -> dict[str, Any]:
        mapping = self.reader.indices.get_mapping(index=index, **self._h())
        return dict(next(iter(mapping.values()))["mappings"].get("properties", {}))

    @base.translating
    def field_types(self, index: str) -> dict[str, tuple[str, ...]]:
        # _field_caps needs only the read privilege (a mapping read needs
        # view_index_metadata) and applies field-level security.
        return base.field_types_of(self.reader.field_caps(index=index, fields="*", **self._h()))

    @base.translating
    def concrete_indices(self, expression: str, fields: Sequence[str]) -> dict[str, dict[str, tuple[str, ...]]]:
        """The concrete indices ``expression`` (wildcards, lists, aliases,
        data streams, exclusions) covers for these credentials, as a search
        would resolve it, each with its types of ``fields``: one
        ``_field_caps``, which needs only the read privilege (``_resolve/index``
        and a mapping read need view_index_metadata)."""
        answer = self.reader.field_caps(index=expression, fields=list(fields), include_unmapped=True, **self._h())
        return base.concrete_indices_of(answer)

    @base.translating
    def create_index(self, index: str, body: Mapping[str, Any]) -> None:
        self.client.indices.create(index=index, body=osd.index_body(body), **self._h())

    @base.translating
    def add_mapping_properties(self, index: str, properties: Mapping[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, body={"properties": osd.properties(properties)}, **self._h())

    @base.translating
    def delete_index(self, index: str) -> None:
        self.client.indices.delete(index=index, ignore_unavailable=True, **self._h())

    @base.translating
    def refresh(self, index: str) -> None:
        self.client.indices.refresh(index=index, **self._h())

    @base.translating
    def refresh_interval(self, index: str) -> str | None:
        return base.refresh_interval_of(
            self.reader.indices.get_settings(index=index, name="index.refresh_interval", **self._h()), index
        )

    @base.translating
    def set_refresh_interval(self, index: str, value: str | None) -> None:
        self.client.indices.put_settings(index=index, body={"index": {"refresh_interval": value}}, **self._h())

    @base.translating
    def index_hidden(self, index: str) -> bool:
        return base.hidden_of(self.reader.indices.get_settings(index=index, name="index.hidden", **self._h()), index)

    @base.translating
    def hide_index(self, index: str) -> None:
        self.client.indices.put_settings(index=index, body=base.hidden_settings(), **self._h())

    def bulk(
        self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float
    ) -> Iterator[BulkItem]:
        from opensearchpy import helpers

        items = base.streaming_bulk(
            helpers,
            self.client,
            actions,
            chunk_size=chunk_size,
            max_retries=max_retries,
            initial_backoff=initial_backoff,
            **self._h(),
        )
        return base.translated_items(items, self.engine_error, self.display_url)

    @base.translating
    def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.reader.search(index=index, body=osd.search_body(body), **self._h())

    @base.translating
    def msearch(self, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.reader.msearch(body=osd.msearch_body(searches), **self._h())

    @base.translating
    def hybrid_search(self, index: str, body: Mapping[str, Any], weights: Sequence[float]) -> dict[str, Any]:
        """`query` + `knn` fused by the cluster (neural-search's `hybrid`
        query and a min-max normalisation pipeline, made on first use)."""
        name = osd.hybrid_pipeline_name(weights)
        if name not in self._pipelines:
            self.client.transport.perform_request(
                "PUT", f"/_search/pipeline/{name}", body=osd.hybrid_pipeline(weights), **self._h()
            )
            self._pipelines.add(name)
        return self.reader.search(
            index=index, body=osd.hybrid_body(body), params={"search_pipeline": name}, **self._h()
        )

    @base.translating
    def fetch(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        docs = self.reader.mget(index=index, body={"ids": list(ids)}, **self._h())["docs"]
        return [doc for doc in docs if doc.get("found")]

    def delete_ids(self, index: str, ids: Sequence[str]) -> int:
        return base.delete_ids(self, index, ids)

    @base.translating
    def count(self, index: str) -> int:
        return int(self.reader.count(index=index, **self._h())["count"])

    @base.translating
    def index_meta(self, index: str) -> dict[str, Any]:
        mapping = self.reader.indices.get_mapping(index=index, **self._h())
        return dict(next(iter(mapping.values()))["mappings"].get("_meta") or {})

    @base.translating
    def set_index_meta(self, index: str, meta: Mapping[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, body={"_meta": dict(meta)}, **self._h())

    @base.translating
    def open_point_in_time(self, index: str, keep_alive: str) -> str:
        # OpenSearch's own endpoint (Elasticsearch's is `_pit`).
        answer = self.reader.transport.perform_request(
            "POST", f"/{index}/_search/point_in_time", params={"keep_alive": keep_alive}, **self._h()
        )
        return str(answer["pit_id"])

    @base.translating
    def read_page(
        self, pit_id: str, *, keep_alive: str, size: int, search_after: Sequence[Any] | None, source: Any = True
    ) -> Page:
        body = base.page_body(pit_id, keep_alive=keep_alive, size=size, search_after=search_after, source=source)
        return base.page_of(self.reader.search(body=body, **self._h()), pit_id, size)

    @base.translating
    def close_point_in_time(self, pit_id: str) -> None:
        self.reader.transport.perform_request(
            "DELETE", "/_search/point_in_time", body={"pit_id": [pit_id]}, **self._h()
        )

    def close(self) -> None:
        if self._owner:
            self.client.close()
            if self.reader is not self.client:
                self.reader.close()
