"""The backend seam and OpenSearch's dialect of the project's bodies, as values."""

import base64

import numpy as np
import pytest

from chunkrag_core.engines import SearchBackend, make_backend, schema
from chunkrag_core.engines import opensearch as os_engine
from chunkrag_core.engines import opensearch_dialect as osd
from chunkrag_core.engines.elasticsearch import ElasticsearchBackend
from chunkrag_core.engines.errors import EngineNotFound, EngineTimeout, EngineUnavailable
from chunkrag_core.engines.opensearch import OpenSearchBackend
from chunkrag_core.settings import Settings, SettingsError, VectorIndexSettings
from search_extension import queries
from search_extension.queries import QuerySpec

VECTOR = [0.1, 0.2, 0.3]
TEXT = {
    "bool": {
        "must": [
            {
                "multi_match": {
                    "query": "capital of japan",
                    "fields": ["text^1", "title^0.5", "header^0.25"],
                    "type": "most_fields",
                }
            }
        ]
    }
}
SOURCE = {"excludes": ["vector"]}


def spec(**options):
    return QuerySpec(text="capital of japan", vector=VECTOR, size=3, num_candidates=100, window=20, **options)


# --- index bodies ------------------------------------------------------------------------


def test_the_chunk_index_becomes_a_lucene_hnsw_knn_vector_index():
    es_body = schema.index_body(dims=384, has_english=True, vectors=VectorIndexSettings())
    body = osd.index_body(es_body)
    assert body["settings"]["index"] == {"knn": True}
    assert body["settings"]["number_of_shards"] == 1 and body["settings"]["analysis"] == es_body["settings"]["analysis"]
    assert body["mappings"]["properties"][schema.VECTOR] == {
        "type": "knn_vector",
        "dimension": 384,
        "method": {
            "name": "hnsw",
            "engine": "lucene",
            "space_type": "cosinesimil",
            "parameters": {"m": 16, "ef_construction": 100},
        },
    }
    # Everything but the vector is the same mapping on both engines.
    others = {k: v for k, v in body["mappings"]["properties"].items() if k != schema.VECTOR}
    assert others == {k: v for k, v in es_body["mappings"]["properties"].items() if k != schema.VECTOR}
    assert body["mappings"]["dynamic"] == "strict"


def test_a_hidden_chunk_index_says_so_in_its_settings_on_both_engines():
    from chunkrag_core.engines.base import hidden_of

    es_body = schema.index_body(dims=8, has_english=True, vectors=VectorIndexSettings(), hidden=True)
    assert es_body["settings"]["index"] == {"hidden": True}
    assert osd.index_body(es_body)["settings"]["index"] == {"hidden": True, "knn": True}
    assert "index" not in schema.index_body(dims=8, has_english=True, vectors=VectorIndexSettings())["settings"]
    # Both engines answer `_settings/index.hidden` with a string, and nothing for an index that is not hidden.
    assert hidden_of({"kb-chunkrag": {"settings": {"index": {"hidden": "true"}}}}, "kb-chunkrag")
    assert not hidden_of({"kb-chunkrag": {"settings": {}}}, "kb-chunkrag")


def test_elasticsearch_only_vector_types_are_refused_clearly():
    es_body = schema.index_body(dims=8, has_english=False, vectors=VectorIndexSettings(type="int8_hnsw"))
    with pytest.raises(osd.UnsupportedOnOpenSearch, match="CHUNKRAG_VECTOR_TYPE=hnsw"):
        osd.index_body(es_body)


@pytest.mark.parametrize(
    "method", [{"name": "hnsw", "engine": "faiss", "space_type": "l2"}, {"name": "hnsw", "engine": "nmslib"}, None]
)
def test_no_faiss_nmslib_or_default_engine_index_is_ever_created(method):
    field = {"type": "knn_vector", "dimension": 3, **({"method": method} if method else {})}
    with pytest.raises(osd.UnsupportedOnOpenSearch, match="only creates Lucene HNSW"):
        osd.require_lucene_vectors({"mappings": {"properties": {"vector": field}}})


def test_vector_dims_read_from_either_mapping():
    assert osd.vector_dims({"type": "dense_vector", "dims": 384}) == 384
    assert osd.vector_dims({"type": "knn_vector", "dimension": 384}) == 384
    assert osd.vector_dims({}) is None


# --- search bodies, per mode, in both dialects -------------------------------------------


def test_bm25_is_the_same_request_on_both_engines():
    body = queries.bm25_body(spec())
    assert body == {"size": 3, "_source": SOURCE, "query": TEXT}
    assert osd.search_body(body) == body


def test_knn_top_level_section_becomes_a_knn_query_clause():
    es_body = queries.knn_body(spec(filters=({"term": {"doc_id": "tokyo"}},)))
    assert es_body["knn"] == {
        "field": "vector",
        "query_vector": VECTOR,
        "k": 3,
        "num_candidates": 100,
        "filter": [{"term": {"doc_id": "tokyo"}}],
    }
    assert osd.search_body(es_body) == {
        "size": 3,
        "_source": SOURCE,
        "query": {
            "knn": {
                "vector": {
                    "vector": VECTOR,
                    "k": 3,
                    "method_parameters": {"ef_search": 100},
                    "filter": {"bool": {"filter": [{"term": {"doc_id": "tokyo"}}]}},
                }
            }
        },
    }


def test_native_sum_is_a_bool_should_of_the_boosted_match_and_knn():
    es_body = queries.native_sum_body(spec(), 0.5, 0.5)
    assert es_body["query"] == {"bool": {**TEXT["bool"], "boost": 0.5}}
    assert es_body["knn"]["boost"] == 0.5 and es_body["knn"]["k"] == 20
    assert osd.search_body(es_body) == {
        "size": 3,
        "_source": SOURCE,
        "query": {
            "bool": {
                "should": [
                    {"bool": {**TEXT["bool"], "boost": 0.5}},
                    {
                        "knn": {
                            "vector": {"vector": VECTOR, "k": 20, "method_parameters": {"ef_search": 100}, "boost": 0.5}
                        }
                    },
                ]
            }
        },
    }


def test_msearch_pairs_keep_headers_and_translate_bodies():
    pairs = queries.msearch_bodies(spec(), "chunks")
    translated = osd.msearch_body(pairs)
    assert translated[0] == {"index": "chunks"} and translated[2] == {"index": "chunks"}
    assert translated[1] == pairs[1]
    assert "knn" not in translated[3] and translated[3]["query"]["knn"]["vector"]["k"] == 20


def test_vectors_on_request_and_collapse():
    es_body = queries.knn_body(spec(include_vectors=True, collapse_field="doc_id"))
    assert es_body["_source"] == {"excludes": [], "exclude_vectors": False}
    body = osd.search_body(es_body)
    # OpenSearch returns _source as stored; it has no exclude_vectors flag.
    assert body["_source"] == {"excludes": []}
    assert body["collapse"] == {"field": "doc_id"} and body["query"]["knn"]["vector"]["k"] == 20


def test_vectors_asked_as_raw_doc_values_are_read_from_source_on_opensearch():
    es_body = {"query": {"ids": {"values": ["a:0"]}}, **schema.vector_read()}
    assert es_body["docvalue_fields"] == [{"field": "vector", "format": "binary"}]
    # A knn_vector has no doc values: the vector comes back in _source.
    assert osd.search_body(es_body) == {"query": {"ids": {"values": ["a:0"]}}, "_source": {"excludes": []}}
    kept = {"_source": False, "docvalue_fields": ["doc_id", {"field": "vector", "format": "binary"}]}
    assert osd.search_body(kept) == {"_source": {"includes": ["vector"]}, "docvalue_fields": ["doc_id"]}
    only = {"_source": {"includes": ["text"]}, "docvalue_fields": [{"field": "vector", "format": "binary"}]}
    assert osd.search_body(only) == {"_source": {"includes": ["text", "vector"]}}


def test_a_hit_vector_is_read_from_raw_doc_values_floats_or_source():
    vector = np.array([0.5, -0.25, 9.824004e-4], dtype=np.float32)
    raw = base64.b64encode(vector.astype(">f4").tobytes()).decode()
    assert schema.hit_vector({"fields": {"vector": [raw]}}).tolist() == vector.tolist()
    assert schema.hit_vector({"fields": {"vector": [[0.5, -0.25]]}}) == [0.5, -0.25]
    assert schema.hit_vector({"_source": {"vector": [0.5]}}) == [0.5]
    assert schema.hit_vector({"_source": {}}) is None
    source = {"doc_id": "a", "position": 0, "text": "t"}
    assert schema.chunk_from_hit({"_source": source, "fields": {"vector": [raw]}}).vector.tolist() == vector.tolist()


def test_retriever_bodies_have_no_opensearch_equivalent():
    with pytest.raises(osd.UnsupportedOnOpenSearch, match="minmax"):
        osd.search_body(queries.rrf_retriever_body(spec()))


def test_native_hybrid_query_and_its_normalisation_pipeline():
    es_body = queries.native_sum_body(spec(), None, None)
    assert osd.hybrid_body(es_body) == {
        "size": 3,
        "_source": SOURCE,
        "query": {
            "hybrid": {
                "queries": [
                    TEXT,
                    {"knn": {"vector": {"vector": VECTOR, "k": 20, "method_parameters": {"ef_search": 100}}}},
                ]
            }
        },
    }
    assert osd.hybrid_pipeline_name([0.5, 0.5]) == "chunkrag-minmax-0.5-0.5"
    assert osd.hybrid_pipeline([0.7, 0.3])["phase_results_processors"] == [
        {
            "normalization-processor": {
                "normalization": {"technique": "min_max"},
                "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.7, 0.3]}},
            }
        }
    ]


# --- choosing a backend ----------------------------------------------------------------


def test_search_backend_setting():
    assert Settings.from_env({}).search_backend == "elasticsearch"
    assert Settings.from_env({"OPENSEARCH_URL": "https://os.example:443"}).search_backend == "opensearch"
    assert (
        Settings.from_env({"OPENSEARCH_URL": "http://a:9201", "ES_URL": "http://b:9200"}).search_backend
        == "elasticsearch"
    )
    urls = {"OPENSEARCH_URL": "http://127.0.0.1:9555", "ES_URL": "http://b:9200"}
    both = Settings.from_env({"SEARCH_BACKEND": "OpenSearch", **urls})
    assert (both.search_backend, both.search_url) == ("opensearch", "http://127.0.0.1:9555")
    with pytest.raises(SettingsError, match="SEARCH_BACKEND='solr'"):
        Settings.from_env({"SEARCH_BACKEND": "solr"})


def test_the_ca_bundle_follows_the_chosen_engine():
    bundles = {"ES_CA_CERTS": "/etc/es.pem", "OPENSEARCH_CA_CERTS": "/etc/os.pem"}
    assert Settings.from_env(bundles).search_ca_certs == "/etc/es.pem"
    assert Settings.from_env({"SEARCH_BACKEND": "opensearch", **bundles}).search_ca_certs == "/etc/os.pem"
    assert Settings.from_env({}).search_ca_certs is None


def test_make_backend_opens_no_connection_and_keeps_credentials_out_of_the_display_url():
    settings = Settings.from_env({"SEARCH_BACKEND": "opensearch", "OPENSEARCH_URL": "http://admin:s3cret@127.0.0.1:1"})
    backend = make_backend(settings)
    assert isinstance(backend, OpenSearchBackend) and backend.engine == "opensearch"
    assert "s3cret" not in backend.display_url
    assert isinstance(make_backend(Settings()), ElasticsearchBackend)


class RecordingClient:
    """Records the keyword arguments opensearch-py would get."""

    def __init__(self):
        self.calls = []

    def search(self, **kwargs):
        self.calls.append(kwargs)
        return {"hits": {"hits": []}}

    def count(self, **kwargs):
        self.calls.append(kwargs)
        return {"count": 7}


def test_header_views_send_the_callers_headers_and_leave_the_base_alone():
    client = RecordingClient()
    base = OpenSearchBackend(client)
    view = base.with_headers({"Authorization": "Basic dTpw"})
    view.search("chunks", queries.knn_body(spec()))
    base.count("chunks")
    assert client.calls[0]["headers"] == {"Authorization": "Basic dTpw"} and "knn" in client.calls[0]["body"]["query"]
    assert client.calls[1] == {"index": "chunks"}
    assert view.engine == "opensearch" and view._probed is base._probed  # one capability probe for all views


def test_only_backends_cross_the_seam():
    from elasticsearch import Elasticsearch
    from opensearchpy import OpenSearch

    assert isinstance(ElasticsearchBackend(Elasticsearch("http://127.0.0.1:1")), SearchBackend)
    assert isinstance(OpenSearchBackend(OpenSearch(["http://127.0.0.1:1"])), SearchBackend)
    assert not isinstance(Elasticsearch("http://127.0.0.1:1"), SearchBackend)
    assert not isinstance(OpenSearch(["http://127.0.0.1:1"]), SearchBackend)


def test_what_each_backend_offers_is_asked_of_the_backend():
    # Elasticsearch has no `hybrid` query: answered without a probe (no client call).
    assert ElasticsearchBackend(RecordingClient()).offers_hybrid_query() is False


def from_opensearch(exc):
    """As the OpenSearch backend raises it."""
    return os_engine.engine_error(exc, "http://os:9201")


def test_opensearch_client_errors_map_to_the_gateways_statuses():
    import opensearchpy

    from chunkrag_gateway import errors

    body = {"error": {"type": "index_not_found_exception", "reason": "no such index [x]"}, "status": 404}
    missing = errors.from_exception(from_opensearch(opensearchpy.NotFoundError(404, "index_not_found_exception", body)))
    assert (missing.status, missing.body) == (404, body)
    down = errors.from_exception(from_opensearch(opensearchpy.ConnectionError("N/A", "refused", OSError("refused"))))
    # The caller is told which dependency failed, not where it lives.
    assert down.status == 503 and down.reason == "OpenSearch is not reachable" and "os:9201" not in down.reason
    slow_client = opensearchpy.ConnectionTimeout("TIMEOUT", "timed out", TimeoutError())
    slow = errors.from_exception(from_opensearch(slow_client))
    assert slow.status == 504


class FailingClient:
    """An opensearch-py client whose cluster went away."""

    def search(self, **kwargs):
        import opensearchpy

        raise opensearchpy.ConnectionError("N/A", "refused", OSError("refused"))

    def count(self, **kwargs):
        import opensearchpy

        body = {"error": {"type": "index_not_found_exception"}, "status": 404}
        raise opensearchpy.NotFoundError(404, "index_not_found_exception", body)


def test_a_backend_raises_project_errors_never_its_clients():
    backend = OpenSearchBackend(FailingClient(), "http://os:9201")
    with pytest.raises(EngineUnavailable, match="OpenSearch at http://os:9201 is not reachable") as down:
        backend.search("chunks", queries.bm25_body(spec()))
    assert down.value.engine == "OpenSearch"
    with pytest.raises(EngineNotFound) as missing:
        backend.with_headers({"Authorization": "Basic dTpw"}).count("chunks")
    assert missing.value.status == 404 and missing.value.body["error"]["type"] == "index_not_found_exception"


def test_a_bulk_failing_as_it_streams_raises_a_project_error():
    import opensearchpy

    def failing_items():
        yield True, {"index": {"_id": "a"}}
        raise opensearchpy.ConnectionTimeout("TIMEOUT", "timed out", TimeoutError())

    items = os_engine.base.translated_items(failing_items(), os_engine.engine_error, "http://os:9201")
    assert next(items) == (True, {"index": {"_id": "a"}})
    with pytest.raises(EngineTimeout):
        next(items)
