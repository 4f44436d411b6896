import pytest

from search_extension import queries
from search_extension.queries import QuerySpec

SPEC = QuerySpec(
    text="heart attack risk",
    vector=[0.5, 0.5],
    size=5,
    num_candidates=50,
    window=20,
    filters=({"term": {"doc_id": "d1"}},),
)
TEXT = {
    "multi_match": {
        "query": "heart attack risk",
        "fields": ["text^1", "title^0.5", "header^0.25"],
        "type": "most_fields",
    }
}
FILTERS = [{"term": {"doc_id": "d1"}}]


def test_native_sum_is_one_request_with_half_weights():
    body = queries.native_sum_body(SPEC, 0.5, 0.5)
    assert body == {
        "size": 5,
        "_source": {"excludes": ["vector"]},
        "query": {"bool": {"must": [TEXT], "filter": FILTERS, "boost": 0.5}},
        "knn": {
            "field": "vector",
            "query_vector": [0.5, 0.5],
            "k": 20,
            "num_candidates": 50,
            "filter": FILTERS,
            "boost": 0.5,
        },
    }


def test_bm25_and_knn_bodies():
    assert queries.bm25_body(SPEC)["query"] == {"bool": {"must": [TEXT], "filter": FILTERS}}
    knn = queries.knn_body(SPEC)
    assert "query" not in knn and knn["knn"]["k"] == 5 and knn["knn"]["num_candidates"] == 50


def test_num_candidates_is_at_least_twice_k():
    spec = QuerySpec(text="q", vector=[1.0], size=10, num_candidates=10)
    assert queries.knn_body(spec)["knn"]["num_candidates"] == 20


def test_msearch_pairs_headers_with_window_sized_bodies():
    searches = queries.msearch_bodies(SPEC, "chunks")
    assert searches[0] == {"index": "chunks"} and searches[2] == {"index": "chunks"}
    assert searches[1]["size"] == 20 and "query" in searches[1]
    assert searches[3]["knn"]["k"] == 20


def test_retriever_bodies():
    rrf = queries.rrf_retriever_body(SPEC, rank_constant=60)["retriever"]["rrf"]
    assert rrf["rank_window_size"] == 20 and rrf["rank_constant"] == 60
    assert rrf["retrievers"][0] == {"standard": {"query": {"bool": {"must": [TEXT], "filter": FILTERS}}}}
    linear = queries.linear_retriever_body(SPEC, 0.3, 0.7)["retriever"]["linear"]
    assert [(r["weight"], r["normalizer"]) for r in linear["retrievers"]] == [(0.3, "minmax"), (0.7, "minmax")]


def test_collapse_and_vectors_on_request():
    spec = QuerySpec(text="q", vector=[1.0], collapse_field="doc_id", include_vectors=True)
    body = queries.bm25_body(spec)
    assert body["collapse"] == {"field": "doc_id"}
    assert body["_source"] == {"excludes": [], "exclude_vectors": False}


def test_size_must_be_positive():
    with pytest.raises(ValueError):
        QuerySpec(text="q", vector=[1.0], size=0)


def test_a_lean_msearch_fuses_on_ids_and_the_fetch_names_each_chunk_by_index():
    lean = queries.msearch_bodies(SPEC, "chunks", sources=False)
    assert lean[1]["_source"] is False and lean[3]["_source"] is False
    assert queries.msearch_bodies(SPEC, "chunks")[1]["_source"] == {"excludes": ["vector"]}
    spec = QuerySpec(text="q", vector=[1.0], include_vectors=True)
    assert queries.fetch_body(spec, {"chunks-a": ["d1:0", "d2:3"], "chunks-b": ["d1:0"]}) == {
        "size": 3,
        "_source": {"excludes": [], "exclude_vectors": False},
        "query": {
            "bool": {
                "should": [
                    {"bool": {"filter": [{"term": {"_index": "chunks-a"}}, {"ids": {"values": ["d1:0", "d2:3"]}}]}},
                    {"bool": {"filter": [{"term": {"_index": "chunks-b"}}, {"ids": {"values": ["d1:0"]}}]}},
                ],
                "minimum_should_match": 1,
            }
        },
    }
