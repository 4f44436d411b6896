"""The cluster's ``GET /`` answer (name, cluster, version), rebuilt from APIs
that every distribution serves, for a node that does not answer ``GET /``
itself (Elasticsearch's integration-test distribution: 405). Clients call it
first: LangChain's and LlamaIndex's ``ElasticsearchStore(es_url=...)`` and
Haystack's ``ElasticsearchDocumentStore`` check their connection with it.

Also the gateway's own ``GET /`` in service mode (``gateway_root_document``),
where callers the cluster does not know are told the engine's version and
tagline and nothing else of the cluster.

Pure: the answers in, the root document out. What differs between the
engines (the tagline, OpenSearch's ``distribution``, Elasticsearch's product
header) comes from the profile's name here and nowhere else.
"""

from __future__ import annotations

from typing import Any, Mapping

# What the root document is rebuilt from, asked with the caller's own
# credentials (the same cluster privilege, monitor, as GET / itself).
NODE_PATH = (
    "/_nodes/_local?filter_path=cluster_name,nodes.*.name,nodes.*.version,"
    "nodes.*.build_flavor,nodes.*.build_type,nodes.*.build_hash"
)
UUID_PATH = "/_cluster/state/metadata?filter_path=metadata.cluster_uuid"

# The one version key the gateway's own root document shows (service mode).
VERSION_PATH = "/_nodes/_local?filter_path=nodes.*.version"
# What the gateway calls itself where a cluster would give its node's and cluster's names.
GATEWAY_NAME = "chunkrag-gateway"

_TAGLINES = {
    "elasticsearch": "You Know, for Search",
    "opensearch": "The OpenSearch Project: https://opensearch.org/",
}
# The version keys a node reports under _nodes that GET / also shows.
_BUILD_KEYS = ("build_flavor", "build_type", "build_hash")


def root_document(engine: str, nodes: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, Any] | None:
    """``GET /``'s document from ``_nodes/_local`` (``nodes``) and the
    cluster state's uuid (``state``, may be empty); None when ``nodes``
    names no node. Fields the two answers do not hold are left out rather
    than made up."""
    found = nodes.get("nodes")
    node = next(iter(found.values()), None) if isinstance(found, Mapping) and found else None
    if not isinstance(node, Mapping) or "version" not in node:
        return None
    version: dict[str, Any] = {"number": node["version"]}
    if engine == "opensearch":
        version["distribution"] = "opensearch"
    version.update({key: node[key] for key in _BUILD_KEYS if key in node})
    document: dict[str, Any] = {"name": node.get("name"), "cluster_name": nodes.get("cluster_name")}
    uuid = (state.get("metadata") or {}).get("cluster_uuid") if isinstance(state, Mapping) else None
    if uuid:
        document["cluster_uuid"] = uuid
    document["version"] = version
    document["tagline"] = _TAGLINES.get(engine, _TAGLINES["elasticsearch"])
    return document


def node_version(nodes: Mapping[str, Any]) -> str | None:
    """The version ``_nodes/_local`` (``VERSION_PATH``) reports, or None."""
    found = nodes.get("nodes") if isinstance(nodes, Mapping) else None
    node = next(iter(found.values()), None) if isinstance(found, Mapping) and found else None
    version = node.get("version") if isinstance(node, Mapping) else None
    return version if isinstance(version, str) else None


def gateway_root_document(engine: str, version: str) -> dict[str, Any]:
    """The gateway's own ``GET /`` (service mode): the engine's version and
    tagline, the gateway's name where a cluster names its node and itself;
    no uuid, no build, nothing else of the cluster."""
    numbered: dict[str, Any] = {"number": version}
    if engine == "opensearch":
        numbered["distribution"] = "opensearch"
    return {
        "name": GATEWAY_NAME,
        "cluster_name": GATEWAY_NAME,
        "version": numbered,
        "tagline": _TAGLINES.get(engine, _TAGLINES["elasticsearch"]),
    }


def root_headers(engine: str) -> list[tuple[bytes, bytes]]:
    """The headers of a root document the gateway writes itself: JSON, and
    Elasticsearch's product header, which its official clients require on
    every 2xx answer before they take the server for Elasticsearch."""
    headers = [(b"content-type", b"application/json")]
    if engine == "elasticsearch":
        headers.append((b"x-elastic-product", b"Elasticsearch"))
    return headers
