"""OpenSearch's dialect of the project's request bodies, as pure functions.

The project builds every index body and search body once, in Elasticsearch's
shape (`engines.schema.index_body`, `search_extension.queries`); the OpenSearch
backend sends them through these translations. Nothing here calls a cluster:
tests assert on the values.

- A `dense_vector` field becomes a `knn_vector` with a Lucene HNSW method.
  Only `"engine": "lucene"` is ever written: the k-NN plugin published on
  Maven Central has no native libraries, and indexing into a faiss or nmslib
  field crashes such a node, so :func:`require_lucene_vectors` refuses any
  other engine before an index is created.
- A top-level `knn` section (Elasticsearch) becomes a `knn` query clause
  (OpenSearch); beside a `query` the two become a `bool.should`, which adds
  their boosted scores like Elasticsearch's query + knn sum does.
- Both engines score a cosine kNN hit as (1 + cos) / 2 (Lucene's
  normalisation), so fused scores stay comparable across engines.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# Elasticsearch similarity -> OpenSearch space type (Lucene engine).
SPACE_TYPES = {
    "cosine": "cosinesimil",
    "dot_product": "innerproduct",
    "l2_norm": "l2",
    "max_inner_product": "innerproduct",
}
# The one engine this project writes; see the module docstring.
VECTOR_ENGINE = "lucene"
HYBRID_PIPELINE_PREFIX = "chunkrag-minmax"


class UnsupportedOnOpenSearch(ValueError):
    """A request that has no OpenSearch equivalent (the message says what to use)."""


# --- index bodies --------------------------------------------------------------------


def vector_mapping(es_field: Mapping[str, Any]) -> dict[str, Any]:
    """A `dense_vector` mapping as a Lucene HNSW `knn_vector`."""
    options = dict(es_field.get("index_options") or {})
    kind = options.get("type", "hnsw")
    if kind != "hnsw":
        raise UnsupportedOnOpenSearch(
            f"vector index type {kind!r} is Elasticsearch's; "
            "on OpenSearch use CHUNKRAG_VECTOR_TYPE=hnsw (Lucene HNSW with float vectors)"
        )
    similarity = es_field.get("similarity", "cosine")
    if similarity not in SPACE_TYPES:
        raise UnsupportedOnOpenSearch(f"vector similarity {similarity!r} has no OpenSearch Lucene space type")
    parameters = {name: options[name] for name in ("m", "ef_construction") if name in options}
    return {
        "type": "knn_vector",
        "dimension": es_field["dims"],
        "method": {
            "name": "hnsw",
            "engine": VECTOR_ENGINE,
            "space_type": SPACE_TYPES[similarity],
            "parameters": parameters,
        },
    }


def index_body(es_body: Mapping[str, Any]) -> dict[str, Any]:
    """An index body (settings + mappings) in OpenSearch's shape."""
    settings = dict(es_body.get("settings") or {})
    # k-NN search on an index needs this index setting.
    settings["index"] = {**dict(settings.get("index") or {}), "knn": True}
    mappings = dict(es_body.get("mappings") or {})
    mappings["properties"] = properties(mappings.get("properties") or {})
    body = {"settings": settings, "mappings": mappings}
    require_lucene_vectors(body)
    return body


def properties(es_properties: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: vector_mapping(spec) if spec.get("type") == "dense_vector" else dict(spec)
        for name, spec in es_properties.items()
    }


def require_lucene_vectors(body: Mapping[str, Any]) -> None:
    """Refuse an index body with a vector field on any engine but Lucene (or
    none named: the plugin's default engine is faiss)."""
    for name, spec in ((body.get("mappings") or {}).get("properties") or {}).items():
        if spec.get("type") != "knn_vector":
            continue
        engine = (spec.get("method") or {}).get("engine")
        if engine != VECTOR_ENGINE:
            raise UnsupportedOnOpenSearch(
                f"vector field {name!r} would use engine {engine!r}; this project only creates Lucene HNSW fields "
                "(a faiss or nmslib field crashes a node without the k-NN native libraries)"
            )


def vector_dims(field: Mapping[str, Any]) -> int | None:
    """Dimensions of a vector field in either engine's mapping."""
    return field.get("dims", field.get("dimension"))


# --- search bodies ---------------------------------------------------------------


def _filters(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def knn_query(es_knn: Mapping[str, Any]) -> dict[str, Any]:
    """An Elasticsearch `knn` section as an OpenSearch `knn` query clause."""
    unknown = set(es_knn) - {"field", "query_vector", "k", "num_candidates", "filter", "boost", "similarity"}
    if unknown or "similarity" in es_knn:
        raise UnsupportedOnOpenSearch(
            f"knn options {sorted(unknown | ({'similarity'} & set(es_knn)))} have no OpenSearch equivalent"
        )
    clause: dict[str, Any] = {"vector": list(es_knn["query_vector"]), "k": es_knn["k"]}
    if "num_candidates" in es_knn:
        # Elasticsearch's candidates per shard are the HNSW search's ef.
        clause["method_parameters"] = {"ef_search": es_knn["num_candidates"]}
    filters = _filters(es_knn.get("filter"))
    if filters:
        # Lucene filters inside the graph search, so k hits still come back.
        clause["filter"] = {"bool": {"filter": filters}}
    if "boost" in es_knn:
        clause["boost"] = es_knn["boost"]
    return {"knn": {es_knn["field"]: clause}}


def search_body(es_body: Mapping[str, Any]) -> dict[str, Any]:
    """A search body in OpenSearch's shape (see the module docstring)."""
    if "retriever" in es_body:
        raise UnsupportedOnOpenSearch(
            "OpenSearch has no `retriever` search; use mode `minmax` (or `rrf`, fused client-side)"
        )
    body = {key: value for key, value in es_body.items() if key != "knn"}
    source = body.get("_source")
    if isinstance(source, Mapping) and "exclude_vectors" in source:
        # Elasticsearch 9 leaves vectors out of _source unless asked;
        # OpenSearch returns _source as stored and does not know the flag.
        body["_source"] = {key: value for key, value in source.items() if key != "exclude_vectors"}
    body = _vectors_from_source(body)
    knn = es_body.get("knn")
    if knn is None:
        return body
    clauses = [knn_query(item) for item in (knn if isinstance(knn, (list, tuple)) else [knn])]
    if "query" in body:
        clauses = [body["query"], *clauses]
    body["query"] = clauses[0] if len(clauses) == 1 else {"bool": {"should": clauses}}
    return body


def _vectors_from_source(body: dict[str, Any]) -> dict[str, Any]:
    """Vectors asked as doc values in raw bytes (`schema.VECTOR_DOCVALUE`)
    read from `_source` instead: a `knn_vector` has no such doc values."""
    wanted = body.get("docvalue_fields")
    if not wanted:
        return body
    binary = [f["field"] for f in wanted if isinstance(f, Mapping) and f.get("format") == "binary"]
    if not binary:
        return body
    rest = [f for f in wanted if not (isinstance(f, Mapping) and f.get("format") == "binary")]
    source = body.get("_source", True)
    if source is False:
        source = {"includes": binary}
    elif isinstance(source, Mapping):
        source = {
            **source,
            **({"includes": [*source["includes"], *binary]} if source.get("includes") else {}),
            **({"excludes": [f for f in source["excludes"] if f not in binary]} if "excludes" in source else {}),
        }
    out = {key: value for key, value in body.items() if key != "docvalue_fields"}
    return {**out, "_source": source, **({"docvalue_fields": rest} if rest else {})}


def msearch_body(searches: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """(header, body) pairs of an `_msearch`, each body translated."""
    return [dict(item) if position % 2 == 0 else search_body(item) for position, item in enumerate(searches)]


# --- the neural-search plugin's native hybrid query ----------------------------------


def hybrid_pipeline_name(weights: Sequence[float]) -> str:
    return f"{HYBRID_PIPELINE_PREFIX}-" + "-".join(f"{w:g}" for w in weights)


def hybrid_pipeline(weights: Sequence[float]) -> dict[str, Any]:
    """A search pipeline that min-max normalises each sub-query's scores and
    takes their weighted mean: the `minmax` mode, done by the cluster."""
    return {
        "description": "chunkrag minmax fusion: min-max normalised BM25 and kNN, weighted mean",
        "phase_results_processors": [
            {
                "normalization-processor": {
                    "normalization": {"technique": "min_max"},
                    "combination": {"technique": "arithmetic_mean", "parameters": {"weights": list(weights)}},
                }
            }
        ],
    }


def hybrid_body(es_body: Mapping[str, Any]) -> dict[str, Any]:
    """A body with `query` (BM25) and `knn` as one neural-search `hybrid`
    query, sub-queries in that order (the pipeline's weights follow it)."""
    if "query" not in es_body or "knn" not in es_body:
        raise ValueError("a hybrid body needs both `query` and `knn`")
    body = search_body({key: value for key, value in es_body.items() if key != "knn"})
    body["query"] = {"hybrid": {"queries": [es_body["query"], knn_query(es_body["knn"])]}}
    return body
