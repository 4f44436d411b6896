"""Creating an Elasticsearch client from settings, and learning what the
cluster offers, so callers choose the best feature it has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chunkrag_core.settings import Settings


class ClusterUnavailable(RuntimeError):
    """Elasticsearch could not be reached or is not healthy."""


def make_client(settings: Settings):
    """An ``Elasticsearch`` client for ``settings.es_url`` (credentials in the
    URL or ``ES_API_KEY``). Creating it opens no connection."""
    from elasticsearch import Elasticsearch

    options: dict[str, Any] = {"request_timeout": settings.es_request_timeout_s}
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
    return Elasticsearch(settings.es_url, **options)


def check_health(client, display_url: str) -> str:
    """The cluster's status; raises :class:`ClusterUnavailable` with the cause.

    ``_cluster/health`` rather than ``GET /``: the test distribution has no
    root endpoint."""
    try:
        status = client.cluster.health(timeout="5s")["status"]
    except Exception as exc:
        raise ClusterUnavailable(
            f"Elasticsearch at {display_url} is not reachable ({type(exc).__name__}: {exc}); "
            "start it with `chunkrag services up` or point ES_URL at a cluster"
        ) from exc
    if status == "red":
        raise ClusterUnavailable(f"Elasticsearch at {display_url} is red")
    return status


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


def probe_capabilities(client) -> ClusterCapabilities:
    """Ask the cluster, rather than guess from its version or licence, which
    optional features work: a feature absent from the distribution and one
    refused by the licence both answer with an error here."""
    from elasticsearch import ApiError

    version = client.cluster.stats(filter_path="nodes.versions")["nodes"]["versions"][0]

    def works(call) -> bool:
        try:
            call()
            return True
        except ApiError:
            return False

    empty = {"standard": {"query": {"match_none": {}}}}
    rrf = {"rrf": {"retrievers": [empty, empty]}}
    linear = {"linear": {"retrievers": [{"retriever": empty, "weight": 0.5, "normalizer": "minmax"}] * 2}}
    return ClusterCapabilities(
        version=version,
        has_english_analyzer=works(lambda: client.indices.analyze(analyzer="english", text="probe")),
        has_rrf_retriever=works(lambda: client.search(index="*", size=0, retriever=rrf, allow_no_indices=True)),
        has_linear_retriever=works(lambda: client.search(index="*", size=0, retriever=linear, allow_no_indices=True)),
    )
