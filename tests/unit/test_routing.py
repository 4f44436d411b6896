"""Which way a ``_search`` with ``ext.chunkrag`` goes, as a pure function of
the concrete indices the cluster resolved the path to and of the request;
the cluster's ``_field_caps`` answer read into those indices; and the
point-in-time APIs of both engines as the gateway classifies them."""

from __future__ import annotations

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.engines.base import concrete_indices_of
from chunkrag_core.engines.profile import ELASTICSEARCH, OPENSEARCH
from chunkrag_gateway import errors
from chunkrag_gateway.context_ids import opened_id, presented_ids
from chunkrag_gateway.dialect import check_pit_search, refuse_pit_with_index, search_options
from chunkrag_gateway.lane import check_request, is_filtered_search
from chunkrag_gateway.policy import classify, refuse_chunkrag_outside_index_search
from search_extension.options import OptionError
from search_extension.routing import (
    CHUNKS,
    POST_SEARCH,
    IndexKind,
    Route,
    decide,
    excluding,
    kinds_of,
    left_out_companions,
)

CHUNK_FIELDS = {
    "doc_id": ("keyword",),
    "position": ("integer",),
    "text": ("text",),
    "vector": ("dense_vector",),
}
COMPANION_FIELDS = {
    **CHUNK_FIELDS,
    "metadata.source_index": ("keyword",),
    "metadata.source_id": ("keyword",),
    "metadata.source_field": ("keyword",),
}

PLAIN = IndexKind("kb-existing", chunks=False, companion=False)
COMPANION = IndexKind("kb-existing-chunkrag", chunks=True, companion=True)
CHUNK_INDEX = IndexKind("kb-chunks", chunks=True, companion=False)
OTHER_CHUNKS = IndexKind("kb-chunks-2", chunks=True, companion=False)


# --- what the cluster answered ----------------------------------------------------


def test_the_field_caps_answer_gives_each_concrete_index_its_types():
    answer = {
        "indices": ["a", "b", "c"],
        "fields": {
            "doc_id": {
                "keyword": {"type": "keyword", "indices": ["b"]},
                "text": {"type": "text", "indices": ["c"]},
                "unmapped": {"type": "unmapped", "indices": ["a"]},
            },
            # Mapped alike in every index: the type lists no indices.
            "text": {"text": {"type": "text"}},
        },
    }
    assert concrete_indices_of(answer) == {
        "a": {"text": ("text",)},
        "b": {"doc_id": ("keyword",), "text": ("text",)},
        "c": {"doc_id": ("text",), "text": ("text",)},
    }
    assert concrete_indices_of({"indices": [], "fields": {}}) == {}


def test_a_chunk_index_and_a_companion_are_told_apart_by_their_fields():
    kinds = kinds_of(
        {
            "plain": {"text": ("text",)},
            "chunks": CHUNK_FIELDS,
            "companion": COMPANION_FIELDS,
            "vectorless": {**CHUNK_FIELDS, "vector": ("keyword",)},
        }
    )
    assert kinds == (
        IndexKind("chunks", True, False),
        IndexKind("companion", True, True),
        IndexKind("plain", False, False),
        IndexKind("vectorless", False, False),
    )
    assert kinds_of({"os": {**CHUNK_FIELDS, "vector": ("knn_vector",)}})[0].ingested


# --- the companion beside its source -------------------------------------------------


def test_a_wildcard_never_lets_a_companion_answer_for_its_source():
    route = decide("kb-exist*", [PLAIN, COMPANION])
    assert route.way == POST_SEARCH
    assert route.target == "kb-exist*,-kb-existing-chunkrag"
    assert route.indices == ("kb-existing",) and route.left_out == ("kb-existing-chunkrag",)
    # Aggregations change nothing: still post-search, not a refusal.
    assert decide("kb-exist*", [PLAIN, COMPANION], body_keys=("query", "aggs", "ext")).way == POST_SEARCH


def test_the_companion_named_in_the_path_is_searched_as_the_index_it_is():
    route = decide("kb-existing,kb-existing-chunkrag", [PLAIN, COMPANION])
    assert (route.way, route.target, route.left_out) == (POST_SEARCH, "kb-existing,kb-existing-chunkrag", ())
    # Alone and named, it is post-searched too: it is not an index `chunkrag ingest` made.
    assert decide("kb-existing-chunkrag", [COMPANION]).way == POST_SEARCH
    # Named beside a wildcard that also reaches it: named wins.
    assert decide("kb-*,kb-existing-chunkrag", [PLAIN, COMPANION]).left_out == ()
    # A chunk retrieval mode may read it, named.
    assert decide("kb-existing-chunkrag", [COMPANION], target=CHUNKS, mode="minmax").way == CHUNKS


def test_a_companion_still_there_after_its_exclusion_came_through_a_named_alias_and_stays():
    # The first decision excluded it; the cluster still covers it (an alias
    # the path names holds it): the second decision keeps it.
    first = decide("kb-*,kb-alias", [PLAIN, COMPANION])
    assert first.target == "kb-*,kb-alias,-kb-existing-chunkrag"
    second = decide(first.target, [PLAIN, COMPANION])
    assert second.target == first.target and second.indices == ("kb-existing", "kb-existing-chunkrag")
    # Without a wildcard only an alias can reach an unnamed companion: kept, nothing added.
    assert left_out_companions("kb-alias", [PLAIN, COMPANION]) == ()


def test_exclusions_go_after_the_expression_and_all_is_written_as_a_wildcard():
    assert excluding("a*,b", ["a-chunkrag"]) == "a*,b,-a-chunkrag"
    assert excluding("_all", ["x", "y"]) == "*,-x,-y"
    assert excluding("a*", []) == "a*"
    assert decide("_all", [PLAIN, COMPANION]).target == "*,-kb-existing-chunkrag"


def test_an_expression_covering_only_companions_is_refused_naming_what_works():
    with pytest.raises(OptionError) as refused:
        decide("*-chunkrag", [COMPANION])
    said = str(refused.value)
    assert "only companion indices" in said and "name the companion itself in the path" in said


# --- chunk retrieval or post-search --------------------------------------------------


def test_chunk_retrieval_only_when_every_concrete_index_is_an_ingested_chunk_index():
    assert decide("kb-chunks", [CHUNK_INDEX]).way == CHUNKS
    both = decide("kb-chunks*", [CHUNK_INDEX, OTHER_CHUNKS])
    assert both.way == CHUNKS and both.indices == ("kb-chunks", "kb-chunks-2")
    # One plain index beside a chunk index: post-search across both.
    mixed = decide("kb-existing,kb-chunks", [PLAIN, CHUNK_INDEX])
    assert (mixed.way, mixed.target, mixed.indices) == (
        POST_SEARCH,
        "kb-existing,kb-chunks",
        ("kb-existing", "kb-chunks"),
    )
    # A wildcard over chunk indices and a companion: the companion is left out, the rest retrieved.
    route = decide("kb-*", [CHUNK_INDEX, COMPANION])
    assert (route.way, route.target) == (CHUNKS, "kb-*,-kb-existing-chunkrag")


def test_a_body_chunk_retrieval_cannot_serve_is_post_searched():
    for keys in (("query", "aggs", "ext"), ("query", "sort", "ext"), ("pit", "query", "ext")):
        assert decide("kb-chunks", [CHUNK_INDEX], body_keys=keys).way == POST_SEARCH
    assert decide("kb-chunks", [CHUNK_INDEX], post_search_given=("max_passages",)).way == POST_SEARCH
    assert decide("kb-chunks", [CHUNK_INDEX], target=POST_SEARCH).way == POST_SEARCH


def test_nothing_matched_or_a_missing_index_is_left_to_the_search():
    # A wildcard matching nothing: post-search, the cluster answers no hits.
    assert decide("nothing-*", []) == Route(POST_SEARCH, "nothing-*")
    # A missing index (None): the search answers the cluster's 404, either way.
    assert decide("missing", None).way == POST_SEARCH
    assert decide("missing", None, target=CHUNKS).way == CHUNKS


def test_a_chunk_retrieval_mode_refuses_what_it_cannot_serve_and_names_mode_post_search():
    with pytest.raises(OptionError) as refused:
        decide("kb-existing,kb-chunks", [PLAIN, CHUNK_INDEX], target=CHUNKS, mode="minmax")
    said = str(refused.value)
    assert "[kb-existing] is not one" in said and '"mode": "post_search"' in said and '"mode": "minmax"' in said
    with pytest.raises(OptionError) as refused:
        decide("kb-chunks", [CHUNK_INDEX], target=CHUNKS, body_keys=("query", "aggs", "ext"))
    said = str(refused.value)
    assert "may hold only [query, size, ext], got [aggs]" in said and '"mode": "post_search"' in said


def test_a_chunk_carries_the_index_it_was_read_from_into_the_hit():
    from chunkrag_core.engines.schema import chunk_from_hit
    from chunkrag_gateway.dialect import _hit

    chunk = chunk_from_hit(
        {"_index": "kb-chunks", "_id": "d:0", "_score": 1.0, "_source": {"doc_id": "d", "position": 0, "text": "t"}}
    )
    assert chunk.index == "kb-chunks" and chunk.with_score(0.5).index == "kb-chunks"
    hit = _hit(chunk, "kb-*", {}, kept=True, reason="kept", stages=False)
    assert (hit["_index"], hit["_id"]) == ("kb-chunks", "d:0")
    assert _hit(Chunk("d", 0, "t", 0, 1), "kb-chunks", {}, kept=True, reason="", stages=False)["_index"] == "kb-chunks"


# --- paging through a point in time ----------------------------------------------------


def test_a_search_without_an_index_takes_ext_chunkrag_only_through_a_point_in_time():
    pit = {"pit": {"id": "p"}, "query": {"match": {"body": "x"}}, "ext": {"chunkrag": {}}}
    check_pit_search(pit, search_options(pit, max_candidates=50))
    with pytest.raises(OptionError, match="needs a point in time"):
        bare = {"query": {"match": {"body": "x"}}, "ext": {"chunkrag": {}}}
        check_pit_search(bare, search_options(bare, max_candidates=50))
    chunks = {**pit, "ext": {"chunkrag": {"mode": "rrf"}}}
    with pytest.raises(OptionError, match='"mode": "post_search"'):
        check_pit_search(chunks, search_options(chunks, max_candidates=50))
    with pytest.raises(OptionError, match="send it as POST /_search"):
        refuse_pit_with_index(pit)
    refuse_pit_with_index({"query": {"match_all": {}}})
    search = classify("POST", "/_search")
    refuse_chunkrag_outside_index_search(search, b'{"pit":{"id":"p"},"ext":{"chunkrag":{}}}')
    with pytest.raises(errors.GatewayError, match="or a point in time"):
        refuse_chunkrag_outside_index_search(search, b'{"ext":{"chunkrag":{}}}')
    assert is_filtered_search("POST", "/_search") and is_filtered_search("GET", "/docs/_search")
    assert not is_filtered_search("POST", "/_search/scroll") and not is_filtered_search("DELETE", "/_search")


@pytest.mark.parametrize(
    "engine, method, path, kind, indices, no_data",
    [
        (ELASTICSEARCH, "POST", "/docs/_pit", "read", ("docs",), False),
        (ELASTICSEARCH, "DELETE", "/_pit", "read", None, True),
        (OPENSEARCH, "POST", "/docs/_search/point_in_time", "read", ("docs",), False),
        (OPENSEARCH, "DELETE", "/_search/point_in_time", "read", None, True),
        # Every point in time there is: not a read API (and refused, below).
        (OPENSEARCH, "DELETE", "/_search/point_in_time/_all", "cluster", None, False),
        # Each engine's own paths only.
        (OPENSEARCH, "POST", "/docs/_pit", "write", ("docs",), False),
        (ELASTICSEARCH, "POST", "/docs/_search/point_in_time", "write", ("docs",), False),
    ],
)
def test_each_engines_point_in_time_open_and_close_are_read_apis(engine, method, path, kind, indices, no_data):
    endpoint = classify(method, path, engine.point_in_time)
    assert (endpoint.kind, endpoint.indices, endpoint.no_data, endpoint.search) == (kind, indices, no_data, False)


def test_the_ids_an_opensearch_point_in_time_close_presents_are_checked():
    pit = OPENSEARCH.point_in_time
    close = ("_search", "point_in_time")
    assert presented_ids("DELETE", close, "", b'{"pit_id":["a","b"]}', pit) == ["a", "b"]
    assert presented_ids("DELETE", close, "", b'{"pit_id":"a"}', pit) == ["a"]
    assert presented_ids("DELETE", ("_pit",), "", b'{"id":"a"}', pit) == []
    assert presented_ids("POST", ("_search",), "", b'{"pit":{"id":"p"}}', pit) == ["p"]
    # OpenSearch's open answers the id first, as Elasticsearch's search does.
    assert opened_id(b'{"pit_id":"os-id","_shards":{"total":1},"creation_time":1}') == "os-id"


def test_closing_every_point_in_time_is_refused_naming_the_close_by_id():
    scope = {"method": "DELETE", "path": "/_search/point_in_time/_all", "raw_path": b"/_search/point_in_time/_all"}
    endpoint = classify("DELETE", "/_search/point_in_time/_all", OPENSEARCH.point_in_time)
    from chunkrag_gateway.identity import Caller

    with pytest.raises(errors.GatewayError) as refused:
        check_request(endpoint, Caller(), scope, b"", OPENSEARCH.point_in_time)
    assert refused.value.status == 403 and "DELETE /_search/point_in_time with [pit_id]" in refused.value.reason
