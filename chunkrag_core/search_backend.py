"""The one seam between the project and a search engine.

Everything the project asks of Elasticsearch or OpenSearch goes through a
:class:`SearchBackend`: create a chunk index, bulk write, search and msearch,
fetch by id, delete by id, pause and restore refreshes, probe capabilities,
health. Request bodies are built once, in Elasticsearch's shape
(`es_schema`, `search_extension.queries`); the OpenSearch backend translates
them (`chunkrag_core.opensearch_dialect`) and talks through `opensearch-py`,
because the `elasticsearch` client refuses OpenSearch servers.

Chosen by `SEARCH_BACKEND` (`elasticsearch` | `opensearch`; with only
`OPENSEARCH_URL` set, OpenSearch) in :func:`make_backend`. Creating a
backend opens no connection; capabilities are probed once, on first use.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from chunkrag_core import opensearch_dialect as osd
from chunkrag_core.es_client import ClusterCapabilities, ClusterUnavailable, check_health, make_client, probe_capabilities
from chunkrag_core.settings import Settings, redact_url

ENGINES = ("elasticsearch", "opensearch")

BulkItem = tuple[bool, dict[str, Any]]


@runtime_checkable
class SearchBackend(Protocol):
    """What the project asks of a search engine. Bodies are Elasticsearch-shaped."""

    engine: str
    display_url: str

    def with_headers(self, headers: Mapping[str, str]) -> SearchBackend: ...
    def health(self) -> str: ...
    def capabilities(self) -> ClusterCapabilities: ...
    def index_exists(self, index: str) -> bool: ...
    def mapping_properties(self, index: str) -> dict[str, Any]: ...
    def create_index(self, index: str, body: Mapping[str, Any]) -> None: ...
    def add_mapping_properties(self, index: str, properties: Mapping[str, Any]) -> None: ...
    def delete_index(self, index: str) -> None: ...
    def refresh(self, index: str) -> None: ...
    def refresh_interval(self, index: str) -> str | None: ...
    def set_refresh_interval(self, index: str, value: str | None) -> None: ...
    def bulk(self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float) -> Iterator[BulkItem]: ...
    def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def msearch(self, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]: ...
    def hybrid_search(self, index: str, body: Mapping[str, Any], weights: Sequence[float]) -> dict[str, Any]: ...
    def fetch(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]: ...
    def delete_ids(self, index: str, ids: Sequence[str]) -> int: ...
    def count(self, index: str) -> int: ...
    def close(self) -> None: ...


def _refresh_interval_of(response: Mapping[str, Any], index: str) -> str | None:
    return response.get(index, {}).get("settings", {}).get("index", {}).get("refresh_interval")


def _streaming_bulk(helpers, client, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float, **request: Any) -> Iterator[BulkItem]:
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


def _delete_ids(backend: SearchBackend, index: str, ids: Sequence[str]) -> int:
    """Delete by id through the backend's bulk; the count deleted."""
    actions = ({"_op_type": "delete", "_index": index, "_id": chunk_id} for chunk_id in ids)
    return sum(ok for ok, _ in backend.bulk(actions, chunk_size=500, max_retries=0, initial_backoff=1))


class _Probed:
    """Capabilities probed once per backend (and shared by its header views)."""

    def __init__(self) -> None:
        self.value: ClusterCapabilities | None = None
        self.lock = threading.Lock()


# --- Elasticsearch -------------------------------------------------------------------


class ElasticsearchBackend:
    engine = "elasticsearch"

    def __init__(self, client, display_url: str = "Elasticsearch", *, _probed: _Probed | None = None, _owner: bool = True):
        self.client = client
        self.display_url = display_url
        self._probed = _probed or _Probed()
        self._owner = _owner

    def with_headers(self, headers: Mapping[str, str]) -> ElasticsearchBackend:
        """A view that sends ``headers`` (e.g. the caller's Authorization) on every request."""
        return ElasticsearchBackend(self.client.options(headers=dict(headers)), self.display_url, _probed=self._probed, _owner=False)

    def health(self) -> str:
        return check_health(self.client, self.display_url)

    def capabilities(self) -> ClusterCapabilities:
        with self._probed.lock:
            if self._probed.value is None:
                self._probed.value = probe_capabilities(self.client)
            return self._probed.value

    def index_exists(self, index: str) -> bool:
        return bool(self.client.indices.exists(index=index))

    def mapping_properties(self, index: str) -> dict[str, Any]:
        mapping = self.client.indices.get_mapping(index=index)
        return dict(next(iter(mapping.values()))["mappings"].get("properties", {}))

    def create_index(self, index: str, body: Mapping[str, Any]) -> None:
        self.client.indices.create(index=index, settings=body["settings"], mappings=body["mappings"])

    def add_mapping_properties(self, index: str, properties: Mapping[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, properties=dict(properties))

    def delete_index(self, index: str) -> None:
        self.client.indices.delete(index=index, ignore_unavailable=True)

    def refresh(self, index: str) -> None:
        self.client.indices.refresh(index=index)

    def refresh_interval(self, index: str) -> str | None:
        return _refresh_interval_of(self.client.indices.get_settings(index=index, name="index.refresh_interval"), index)

    def set_refresh_interval(self, index: str, value: str | None) -> None:
        self.client.indices.put_settings(index=index, settings={"index": {"refresh_interval": value}})

    def bulk(self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float) -> Iterator[BulkItem]:
        from elasticsearch import helpers

        return _streaming_bulk(helpers, self.client, actions, chunk_size=chunk_size, max_retries=max_retries, initial_backoff=initial_backoff)

    def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.client.search(index=index, body=dict(body))

    def msearch(self, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.client.msearch(searches=list(searches))

    def hybrid_search(self, index: str, body: Mapping[str, Any], weights: Sequence[float]) -> dict[str, Any]:
        raise NotImplementedError("Elasticsearch has no neural-search `hybrid` query; fuse client-side (mode `minmax`)")

    def fetch(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        docs = self.client.mget(index=index, ids=list(ids))["docs"]
        return [doc for doc in docs if doc.get("found")]

    def delete_ids(self, index: str, ids: Sequence[str]) -> int:
        return _delete_ids(self, index, ids)

    def count(self, index: str) -> int:
        return int(self.client.count(index=index)["count"])

    def close(self) -> None:
        if self._owner:
            self.client.close()


# --- OpenSearch ----------------------------------------------------------------------


def make_opensearch_client(url: str, *, request_timeout_s: float = 30.0, ca_certs: str | None = None, sigv4: tuple[str, str] | None = None):
    """An `opensearch-py` client for ``url`` (credentials in the URL: basic
    auth; ``sigv4`` = (region, service): every request signed with AWS
    credentials instead; https: TLS, verified against ``ca_certs`` when
    given). Opens no connection."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    from opensearchpy import OpenSearch

    parts = urlsplit(url)
    options: dict[str, Any] = {"timeout": request_timeout_s}
    if sigv4 is not None:
        from chunkrag_core import aws_signing

        options["http_auth"] = aws_signing.client_auth(*sigv4)
    elif parts.username is not None:
        options["http_auth"] = (unquote(parts.username), unquote(parts.password or ""))
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        url = urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))
    if parts.scheme == "https":
        options.update(use_ssl=True, verify_certs=True)
        if ca_certs:
            options["ca_certs"] = ca_certs
    return OpenSearch([url], **options)


class OpenSearchBackend:
    engine = "opensearch"

    def __init__(self, client, display_url: str = "OpenSearch", *, headers: Mapping[str, str] | None = None, _probed: _Probed | None = None, _owner: bool = True):
        self.client = client
        self.display_url = display_url
        self._headers = dict(headers or {})
        self._probed = _probed or _Probed()
        self._pipelines: set[str] = set()
        self._owner = _owner

    def _h(self) -> dict[str, Any]:
        # opensearch-py takes per-request headers on every API call.
        return {"headers": dict(self._headers)} if self._headers else {}

    def with_headers(self, headers: Mapping[str, str]) -> OpenSearchBackend:
        """A view that sends ``headers`` (e.g. the caller's Authorization) on every request."""
        return OpenSearchBackend(self.client, self.display_url, headers={**self._headers, **headers}, _probed=self._probed, _owner=False)

    def health(self) -> str:
        try:
            status = self.client.cluster.health(**self._h())["status"]
        except Exception as exc:
            raise ClusterUnavailable(
                f"OpenSearch at {self.display_url} is not reachable ({type(exc).__name__}: {exc}); "
                "start it with `chunkrag services up --only opensearch` or point OPENSEARCH_URL at a cluster"
            ) from exc
        if status == "red":
            raise ClusterUnavailable(f"OpenSearch at {self.display_url} is red")
        return status

    def capabilities(self) -> ClusterCapabilities:
        with self._probed.lock:
            if self._probed.value is None:
                self._probed.value = self._probe()
            return self._probed.value

    def _probe(self) -> ClusterCapabilities:
        """Asked of the cluster, like Elasticsearch's probe: a query type the
        cluster lacks fails to parse even when no index exists."""
        from opensearchpy import TransportError

        def works(call) -> bool:
            try:
                call()
                return True
            except TransportError:
                return False

        version = self.client.cluster.stats(filter_path="nodes.versions", **self._h())["nodes"]["versions"][0]
        hybrid = {"size": 0, "query": {"hybrid": {"queries": [{"match_none": {}}]}}}
        return ClusterCapabilities(
            version=version,
            has_english_analyzer=works(lambda: self.client.indices.analyze(body={"analyzer": "english", "text": "probe"}, **self._h())),
            has_rrf_retriever=False,
            has_linear_retriever=False,
            engine=self.engine,
            has_hybrid_query=works(lambda: self.client.search(index="*", body=hybrid, allow_no_indices=True, **self._h())),
        )

    def index_exists(self, index: str) -> bool:
        return bool(self.client.indices.exists(index=index, **self._h()))

    def mapping_properties(self, index: str) -> dict[str, Any]:
        mapping = self.client.indices.get_mapping(index=index, **self._h())
        return dict(next(iter(mapping.values()))["mappings"].get("properties", {}))

    def create_index(self, index: str, body: Mapping[str, Any]) -> None:
        self.client.indices.create(index=index, body=osd.index_body(body), **self._h())

    def add_mapping_properties(self, index: str, properties: Mapping[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, body={"properties": osd.properties(properties)}, **self._h())

    def delete_index(self, index: str) -> None:
        self.client.indices.delete(index=index, ignore_unavailable=True, **self._h())

    def refresh(self, index: str) -> None:
        self.client.indices.refresh(index=index, **self._h())

    def refresh_interval(self, index: str) -> str | None:
        return _refresh_interval_of(self.client.indices.get_settings(index=index, name="index.refresh_interval", **self._h()), index)

    def set_refresh_interval(self, index: str, value: str | None) -> None:
        self.client.indices.put_settings(index=index, body={"index": {"refresh_interval": value}}, **self._h())

    def bulk(self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_retries: int, initial_backoff: float) -> Iterator[BulkItem]:
        from opensearchpy import helpers

        return _streaming_bulk(helpers, self.client, actions, chunk_size=chunk_size, max_retries=max_retries, initial_backoff=initial_backoff, **self._h())

    def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.client.search(index=index, body=osd.search_body(body), **self._h())

    def msearch(self, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.client.msearch(body=osd.msearch_body(searches), **self._h())

    def hybrid_search(self, index: str, body: Mapping[str, Any], weights: Sequence[float]) -> dict[str, Any]:
        """`query` + `knn` fused by the cluster (neural-search's `hybrid`
        query and a min-max normalisation pipeline, made on first use)."""
        name = osd.hybrid_pipeline_name(weights)
        if name not in self._pipelines:
            self.client.transport.perform_request("PUT", f"/_search/pipeline/{name}", body=osd.hybrid_pipeline(weights), **self._h())
            self._pipelines.add(name)
        return self.client.search(index=index, body=osd.hybrid_body(body), params={"search_pipeline": name}, **self._h())

    def fetch(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        docs = self.client.mget(index=index, body={"ids": list(ids)}, **self._h())["docs"]
        return [doc for doc in docs if doc.get("found")]

    def delete_ids(self, index: str, ids: Sequence[str]) -> int:
        return _delete_ids(self, index, ids)

    def count(self, index: str) -> int:
        return int(self.client.count(index=index, **self._h())["count"])

    def close(self) -> None:
        if self._owner:
            self.client.close()


# --- choosing one ----------------------------------------------------------------------


def make_backend(settings: Settings) -> SearchBackend:
    """The backend ``settings.search_backend`` names, for its URL."""
    if settings.search_backend == "opensearch":
        client = make_opensearch_client(settings.opensearch_url, request_timeout_s=settings.es_request_timeout_s, ca_certs=settings.opensearch_ca_certs, sigv4=opensearch_sigv4(settings))
        return OpenSearchBackend(client, redact_url(settings.opensearch_url))
    return ElasticsearchBackend(make_client(settings), settings.es_url_for_display)


def opensearch_sigv4(settings: Settings) -> tuple[str, str] | None:
    """(region, service) when OpenSearch requests are to be SigV4-signed."""
    if settings.opensearch_auth != "sigv4":
        return None
    return settings.opensearch_aws_region, settings.opensearch_aws_service


def as_backend(client_or_backend) -> SearchBackend:
    """A backend for a raw `elasticsearch` or `opensearch-py` client (callers
    and tests that hold one keep working); a backend is returned as it is."""
    if isinstance(client_or_backend, (ElasticsearchBackend, OpenSearchBackend)):
        return client_or_backend
    module = type(client_or_backend).__module__ or ""
    if module.startswith("opensearchpy"):
        return OpenSearchBackend(client_or_backend, _owner=False)
    if module.startswith("elasticsearch"):
        return ElasticsearchBackend(client_or_backend, _owner=False)
    # Anything else is taken to speak the seam itself (a test double that
    # implements the calls its test makes).
    return client_or_backend
