"""Post-search's pure parts with literal values: which fields hold the text
(from literal field listings), reading a hit, scoring passages, and the
response built from a literal cluster response (highlight merge,
empty_hits, the per-hit cap). A test double stands in for the embedder."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.settings import PostSearchSettings, Settings
from chunkrag_filter.pipeline import FilterOptions
from chunkrag_gateway.dialect import OptionError, parse_post_search, search_options
from ingest_pipeline.source_fields import SourceField
from search_extension.post_search import (
    PostSearchOptions,
    VectorFieldError,
    bm25_scores,
    declared_vector_field,
    minmax,
    post_search,
)
from search_extension.post_search_response import merged_highlight, post_search_response
from search_extension.text_fields import (
    FieldCatalog,
    FieldError,
    TextFields,
    configured_fields,
    detect_fields,
    field_text,
    fields_for_index,
    is_chunk_index,
    parse_field_patterns,
)

# As `_field_caps` lists an index with a multi-field title, a nested and an
# object field.
LISTING = {
    "title": ("text",),
    "title.keyword": ("keyword",),
    "body": ("text",),
    "body.raw": ("match_only_text",),
    "summary": ("match_only_text",),
    "url": ("keyword",),
    "year": ("integer",),
    "comments": ("nested",),
    "comments.text": ("text",),
    "meta": ("object",),
    "meta.abstract": ("text",),
}


# --- fields ----------------------------------------------------------------------


def test_text_fields_are_read_from_the_listing_without_multi_fields_and_the_title_heads_them():
    found = detect_fields(LISTING)
    assert found.fields == ("body", "comments.text", "summary") and found.title == "title"
    # A "meta" object is metadata (Haystack's): named as left out, with why.
    assert found.chosen_by == "detected" and found.left_out == (("meta.abstract", "metadata"),)


def test_framework_metadata_ids_and_urls_are_left_out_and_a_named_one_is_read():
    llamaindex = {
        "content": ("text",),
        "embedding": ("dense_vector",),
        "metadata": ("object",),
        "metadata._node_content": ("text",),
        "metadata._node_type": ("text",),
        "metadata.doc_id": ("keyword",),
        "metadata.source": ("text",),
        "source_url": ("text",),
        "parent_id": ("text",),
        "_internal": ("text",),
    }
    found = detect_fields(llamaindex)
    assert found.fields == ("content",)
    assert dict(found.left_out) == {
        "_internal": "internal",
        "metadata._node_content": "metadata",
        "metadata._node_type": "metadata",
        "metadata.source": "metadata",
        "parent_id": "id",
        "source_url": "id",
    }
    assert found.describe() == {
        "read": ["content"],
        "title": "",
        "chosen_by": "detected",
        "left_out": dict(found.left_out),
    }
    named = fields_for_index(llamaindex, named=["metadata._node_content"])
    assert named.fields == ("metadata._node_content",) and named.chosen_by == "request"
    assert named.prose('{"id_": "x"}') is None  # a named field is read whatever it holds
    assert fields_for_index(llamaindex, configured=["metadata.source"]).chosen_by == "configured"


def test_a_detected_field_whose_value_is_not_prose_is_not_split_and_is_named_on_the_hit():
    response = {
        "hits": {
            "hits": [
                {
                    "_index": "kb",
                    "_id": "1",
                    "_source": {
                        "body": "To rotate an API key, open the console and press Rotate.",
                        "notes": '{"id_": "a08c83c0", "metadata": {"source": "kb/0.md"}}',
                        "label": "security",
                    },
                }
            ]
        }
    }
    chosen = TextFields(("body", "label", "notes"), "", "detected")
    result = post_search(
        response,
        query="rotate an API key",
        options=PostSearchOptions(),
        filter_options=FilterOptions(gate="off", answer=False),
        fields_of=lambda index: chosen,
        passage_source=SentencePassages(),
        embedder=OneHot(),
    )
    (hit,) = result.hits
    assert hit.fields == ("body",) and dict(hit.not_prose) == {"label": "short", "notes": "json"}
    assert result.fields == {"kb": chosen}
    shown = post_search_response(response, result, PostSearchOptions())
    assert shown["hits"]["hits"][0]["_chunkrag"]["not_prose"] == {"label": "short", "notes": "json"}
    assert shown["chunkrag"]["fields"] == {
        "kb": {"read": ["body", "label", "notes"], "title": "", "chosen_by": "detected", "left_out": {}}
    }


def test_a_title_like_field_is_found_by_name_in_order():
    assert detect_fields({"name": ("keyword",), "headline": ("text",), "body": ("text",)}).title == "name"
    assert detect_fields({"body": ("text",)}).title == ""


def test_named_fields_must_be_text_and_are_named_when_not():
    assert detect_fields(LISTING, named=["summary", "body"]).fields == ("summary", "body")
    with pytest.raises(FieldError, match=r"ext.chunkrag.fields: field \[missing\] does not exist"):
        detect_fields(LISTING, named=["missing"])
    with pytest.raises(FieldError, match=r"field \[url\] is a \[keyword\] field, not a match_only_text or text"):
        detect_fields(LISTING, named=["url"])
    with pytest.raises(FieldError, match=r"title_field: field \[year\] is a \[integer\] field"):
        detect_fields(LISTING, title="year")


def test_one_index_of_several_uses_the_named_fields_it_holds():
    other = {"content": ("text",), "name": ("keyword",)}
    assert fields_for_index(other, named=["body", "content"]) == TextFields(("content",), "name")
    assert fields_for_index(LISTING, configured=["summary"]) == TextFields(("summary",), "title", "configured")
    with pytest.raises(FieldError, match=r"CHUNKRAG_POST_SEARCH_FIELDS: field \[content\]"):
        fields_for_index(LISTING, configured=["content"])


def test_configured_fields_by_index_pattern():
    patterns = parse_field_patterns(" kb-*:body,summary ; docs:content ")
    assert patterns == (("kb-*", ("body", "summary")), ("docs", ("content",)))
    assert configured_fields(patterns, "kb-2024") == ("body", "summary")
    assert configured_fields(patterns, "other") == ()
    with pytest.raises(ValueError, match="index-pattern:field"):
        parse_field_patterns("kb-*")


def test_a_chunk_index_is_told_from_any_other():
    chunks = {"doc_id": ("keyword",), "position": ("integer",), "text": ("text",), "vector": ("dense_vector",)}
    assert is_chunk_index(chunks) and is_chunk_index({**chunks, "vector": ("knn_vector",)})
    assert not is_chunk_index(LISTING)
    # An expression over a chunk index and another: the chunk retrieval, as before.
    assert is_chunk_index({**chunks, "vector": ("dense_vector", "keyword")})
    assert not is_chunk_index({**chunks, "vector": ("keyword",)})


def test_field_listings_are_cached_per_index_and_caller_and_expire():
    now = [0.0]
    reads = []
    catalog = FieldCatalog(entries=2, ttl_s=10, clock=lambda: now[0])

    def read(index):
        reads.append(index)
        return {"body": ["text"]}

    catalog.types("a", "alice", read)
    catalog.types("a", "alice", read)
    catalog.types("a", "bob", read)
    assert reads == ["a", "a"]
    now[0] = 11
    catalog.types("a", "alice", read)
    assert reads == ["a", "a", "a"]


# --- reading a hit ----------------------------------------------------------------


def test_a_hits_text_is_read_from_its_source_as_returned_then_from_fields():
    hit = {
        "_source": {
            "body": "One. Two.",
            "comments": [{"text": "first"}, {"text": "second"}],
            "meta.abstract": "flat key",
            "blank": "  ",
        },
        "fields": {"summary": ["from fields"]},
    }
    assert field_text(hit, "body") == "One. Two."
    assert field_text(hit, "comments.text") == "first\n\nsecond"
    assert field_text(hit, "meta.abstract") == "flat key"
    assert field_text(hit, "summary") == "from fields"
    assert field_text(hit, "blank") is None
    assert field_text({"_id": "x"}, "body") is None  # _source filtered away or hidden


# --- scoring ------------------------------------------------------------------------


def test_bm25_and_minmax_with_literal_numbers():
    scores = bm25_scores("rotate key", ["rotate the key now", "lunch at noon", "key"])
    assert scores[1] == 0.0 and scores[0] > scores[2] > 0
    assert minmax([1.0, 3.0, 2.0]) == [0.0, 1.0, 0.5]
    assert minmax([2.0, 2.0]) == [0.5, 0.5]


class OneHot:
    """Embeds a text as the unit vector of the first keyword it holds."""

    WORDS = ("rotate", "lunch", "invoice", "revoke")

    def embed(self, texts):
        rows = []
        for text in texts:
            row = np.zeros(len(self.WORDS) + 1, dtype=np.float32)
            hit = next((i for i, w in enumerate(self.WORDS) if w in text.lower()), len(self.WORDS))
            row[hit] = 1.0
            rows.append(row)
        return np.stack(rows)


class SentencePassages:
    """A PassageSource double: one passage per sentence, with OneHot vectors."""

    def __init__(self):
        self.asked: list[SourceField] = []

    def passages(self, fields, *, query=""):
        self.asked.extend(fields)
        out = {}
        for field in fields:
            chunks, start = [], 0
            for position, sentence in enumerate(field.text.split(". ")):
                end = start + len(sentence)
                chunks.append(
                    Chunk(
                        doc_id=field.companion_id,
                        position=position,
                        text=field.text[start:end],
                        start=start,
                        end=end,
                        metadata={"source_field": field.field},
                        vector=OneHot().embed([sentence])[0],
                    )
                )
                start = end + 2
            out[field.companion_id] = chunks
        return out


CLUSTER = {
    "took": 3,
    "timed_out": False,
    "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
    "hits": {
        "total": {"value": 42, "relation": "eq"},
        "max_score": 2.0,
        "hits": [
            {
                "_index": "kb",
                "_id": "1",
                "_score": 2.0,
                "_source": {"title": "Keys", "body": "Press rotate to rotate a key. Lunch is at noon"},
                "sort": [2.0, "a"],
                "highlight": {"title": ["<em>Keys</em>"], "body": ["press <em>rotate</em>"]},
            },
            {"_index": "kb", "_id": "2", "_score": 1.5, "_source": {"title": "Food", "body": "Lunch is served daily"}},
            {"_index": "kb", "_id": "3", "_score": 1.0, "_source": {"title": "Only a title"}},
        ],
    },
    "aggregations": {"by_year": {"buckets": [{"key": 2024, "doc_count": 42}]}},
    "pit_id": "pit-123",
}
# The shipped calibration, cut at a probability of one half.
KEEP_ABOVE_HALF = FilterOptions(gate="off", threshold="fixed", fixed_threshold=0.5, fallback="not_found", answer=False)


def run(options: PostSearchOptions, source=None, filter_options=KEEP_ABOVE_HALF, response=CLUSTER, pooled=False):
    return post_search(
        response,
        query="rotate a key",
        options=options,
        filter_options=filter_options,
        fields_of=lambda index: TextFields(("body",), "title"),
        passage_source=source or SentencePassages(),
        embedder=OneHot(),
        pooled=pooled,
    )


def test_each_hits_passages_are_filtered_and_the_response_keeps_the_clusters_shape():
    source = SentencePassages()
    options = PostSearchOptions(include_dropped=True)
    result = run(options, source)
    assert [f.title for f in source.asked] == ["Keys", "Food"]  # the hit without text is never split
    shaped = post_search_response(CLUSTER, result, options)
    for key in ("took", "timed_out", "_shards", "aggregations", "pit_id"):
        assert shaped[key] == CLUSTER[key]
    assert shaped["hits"]["total"] == {"value": 42, "relation": "eq"} and shaped["hits"]["max_score"] == 2.0
    first, second, third = shaped["hits"]["hits"]
    assert [h["_id"] for h in (first, second, third)] == ["1", "2", "3"]
    assert first["sort"] == [2.0, "a"] and first["_source"] == CLUSTER["hits"]["hits"][0]["_source"]
    kept = first["_chunkrag"]["passages"]
    assert [p["text"] for p in kept] == ["Press rotate to rotate a key"]
    assert kept[0]["field"] == "body" and (kept[0]["start"], kept[0]["end"]) == (0, 28)
    assert [p["text"] for p in first["_chunkrag"]["dropped"]] == ["Lunch is at noon"]
    # Kept passages first under their field, then the cluster's own fragments.
    assert first["highlight"] == {
        "title": ["<em>Keys</em>"],
        "body": ["Press rotate to rotate a key", "press <em>rotate</em>"],
    }
    assert second["_chunkrag"]["kept"] is False and second["_chunkrag"]["reason"] == "no_kept_passage"
    assert "highlight" not in second
    assert third["_chunkrag"] == {
        "text": False,
        "fields": ["body"],
        "kept": False,
        "passages": [],
        "capped": 0,
        "reason": "no_text",
        "dropped": [],
    }
    section = shaped["chunkrag"]
    assert section["hits"] == {
        "returned": 3,
        "without_text": 1,
        "without_kept_passage": 1,
        "dropped": 0,
        "empty_hits": "keep",
    }
    assert section["passages"]["candidates"] == 3 and section["passages"]["kept"] == 1
    # The cluster's response itself is never changed.
    assert "_chunkrag" not in CLUSTER["hits"]["hits"][0]


def page(*ids: str) -> dict:
    """CLUSTER with only the hits ``ids``, in that order."""
    by_id = {hit["_id"]: hit for hit in CLUSTER["hits"]["hits"]}
    return {**CLUSTER, "hits": {**CLUSTER["hits"], "hits": [by_id[i] for i in ids]}}


def decided(hit) -> list[tuple[str, bool, str, dict]]:
    """A hit's passages: text, kept, reason and every score."""
    return sorted(
        [(c.text, True, "", dict(c.stage_scores)) for c in hit.kept]
        + [(c.text, False, reason, dict(c.stage_scores)) for c, reason in hit.dropped]
    )


@pytest.mark.parametrize(
    "filter_options",
    [
        KEEP_ABOVE_HALF,
        # Cuts computed from the scores, and the fallback when none passes: each hit's own.
        FilterOptions(gate="off", threshold="relative", fixed_threshold=0.5, answer=False),
        FilterOptions(gate="off", threshold="dynamic", calibration=None, answer=False),
        FilterOptions(gate="off", fixed_threshold=0.99, fallback="top_k", fallback_k=1, answer=False),
    ],
)
def test_a_hits_passages_and_their_decisions_do_not_depend_on_the_other_hits_of_its_page(filter_options):
    options = PostSearchOptions(include_dropped=True)
    together = run(options, filter_options=filter_options)
    for n, hit_id in enumerate(("1", "2")):
        (alone,) = run(options, filter_options=filter_options, response=page(hit_id)).hits
        assert decided(alone) == decided(together.hits[n]) and alone.threshold == together.hits[n].threshold
    swapped = run(options, filter_options=filter_options, response=page("3", "2", "1"))
    assert [decided(h) for h in swapped.hits] == [decided(h) for h in reversed(together.hits)]


def test_pooled_hits_are_scored_and_filtered_together_as_a_frameworks_candidates_are():
    relative = FilterOptions(gate="off", threshold="relative", fixed_threshold=0.5, fallback="not_found", answer=False)
    alone = run(PostSearchOptions(), filter_options=relative)
    pooled = run(PostSearchOptions(), filter_options=relative, pooled=True)
    # Within half of the best passage of its own hit, the lunch passage of hit 2 is kept; within half
    # of the best of the pool (hit 1's), it is not.
    assert [c.text for c in alone.hits[1].kept] == ["Lunch is served daily"]
    assert [c.text for c in pooled.hits[1].kept] == [] and [c.text for c in pooled.hits[0].kept] == [
        "Press rotate to rotate a key"
    ]
    assert pooled.hits[0].threshold == pooled.hits[1].threshold == pooled.filtered.threshold


def test_the_cut_is_the_responses_when_every_hit_has_the_same_else_each_hits_own():
    options = PostSearchOptions()
    fixed = post_search_response(CLUSTER, run(options), options)
    assert fixed["chunkrag"]["threshold"]["value"] == 0.5 and fixed["chunkrag"]["threshold"]["method"] == "fixed"
    assert [h["_chunkrag"].get("threshold") for h in fixed["hits"]["hits"]] == [0.5, 0.5, None]
    relative = FilterOptions(gate="off", threshold="relative", fixed_threshold=0.5, answer=False)
    shaped = post_search_response(CLUSTER, run(options, filter_options=relative), options)
    assert shaped["chunkrag"]["threshold"]["value"] is None and shaped["chunkrag"]["threshold"]["method"] == "relative"
    first, second, _ = shaped["hits"]["hits"]
    assert first["_chunkrag"]["threshold"] != second["_chunkrag"]["threshold"]


def test_empty_hits_drop_leaves_total_as_the_clusters_and_keeps_hits_without_text():
    options = PostSearchOptions(empty_hits="drop")
    shaped = post_search_response(CLUSTER, run(options), options)
    assert [h["_id"] for h in shaped["hits"]["hits"]] == ["1", "3"]
    assert shaped["hits"]["total"]["value"] == 42 and shaped["chunkrag"]["hits"]["dropped"] == 1


def test_the_per_hit_cap_keeps_the_best_passages_and_reports_the_rest():
    options = PostSearchOptions(max_passages=1, stages=False)
    result = run(options)
    assert [len(h.kept) for h in result.hits] == [1, 1, 0]
    assert result.hits[0].kept[0].text == "Press rotate to rotate a key"
    assert [h.capped for h in result.hits] == [1, 0, 0] and result.capped == 1
    shaped = post_search_response(CLUSTER, result, options)
    assert shaped["chunkrag"]["passages"]["capped"] == 1 and shaped["hits"]["hits"][0]["_chunkrag"]["capped"] == 1


def test_highlight_merge():
    assert merged_highlight(None, {"body": ["a"]}) == {"body": ["a"]}
    assert merged_highlight({"title": ["<em>t</em>"]}, {}) == {"title": ["<em>t</em>"]}
    assert merged_highlight({"body": ["x", "a"]}, {"body": ["a", "b"]}) == {"body": ["a", "b", "x"]}


# --- the body and the options --------------------------------------------------------


def test_the_body_goes_to_the_cluster_without_ext_and_the_query_text_is_found():
    body = {
        "query": {"bool": {"must": {"match": {"body": "rotate keys"}}, "filter": {"term": {"year": 2024}}}},
        "aggs": {"a": {"terms": {"field": "year"}}},
        "sort": ["_score"],
        "from": 10,
        "_source": ["title"],
        "ext": {"chunkrag": {"mode": "post_search", "fields": ["body"]}},
    }
    options = search_options(body, max_candidates=64)
    parsed = parse_post_search(body, options)
    assert parsed.text == "rotate keys" and "ext" not in parsed.body
    assert {k: v for k, v in body.items() if k != "ext"} == parsed.body
    assert options.target == "post_search" and options.post_search.fields == ("body",)


def test_the_query_text_is_found_inside_relevance_wrappers():
    from chunkrag_gateway.dialect import query_text

    match = {"match": {"body": "rotate keys"}}
    assert query_text({"function_score": {"query": match, "functions": [{"weight": 2}]}}) == "rotate keys"
    assert query_text({"boosting": {"positive": match, "negative": {"term": {"x": 1}}, "negative_boost": 0.5}}) == (
        "rotate keys"
    )
    assert query_text({"dis_max": {"queries": [{"term": {"x": 1}}, match]}}) == "rotate keys"
    assert query_text({"function_score": {"functions": []}}) is None


def test_a_body_without_text_needs_ext_query_and_too_many_hits_are_refused():
    body = {"query": {"term": {"year": 2024}}, "ext": {"chunkrag": {}}}
    with pytest.raises(OptionError, match="set ext.chunkrag.query"):
        parse_post_search(body, search_options(body, max_candidates=64))
    with pytest.raises(OptionError, match="at most 100 hits"):
        big = {"query": {"match": {"body": "x"}}, "size": 500, "ext": {"chunkrag": {}}}
        parse_post_search(big, search_options(big, max_candidates=64))
    with pytest.raises(OptionError, match="ext may hold only"):
        other = {"query": {"match": {"body": "x"}}, "ext": {"chunkrag": {}, "other": {}}}
        parse_post_search(other, search_options(other, max_candidates=64))


def test_a_retrieval_mode_means_chunks_and_no_mode_means_auto():
    assert search_options({"ext": {"chunkrag": {"mode": "bm25"}}}, max_candidates=8).target == "chunks"
    assert search_options({"ext": {"chunkrag": {}}}, max_candidates=8).target == "auto"


def test_a_declared_document_vector_must_come_from_the_configured_model():
    settings = Settings()
    assert declared_vector_field(settings) is None
    same = Settings(post_search=PostSearchSettings(vector_field="doc_vec", vector_model=settings.embedder.model))
    assert declared_vector_field(same) == "doc_vec"
    with pytest.raises(VectorFieldError, match="not comparable"):
        declared_vector_field(Settings(post_search=PostSearchSettings(vector_field="v", vector_model="e5-large")))
    with pytest.raises(VectorFieldError, match="without CHUNKRAG_POST_SEARCH_VECTOR_MODEL"):
        declared_vector_field(Settings(post_search=PostSearchSettings(vector_field="v")))


# --- the query-time passage source ------------------------------------------------------


class CountingEmbedder:
    """Unit vectors from a text's hash; counts the texts it is asked for."""

    def __init__(self):
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        if not texts:
            return np.zeros((0, 8), dtype=np.float32)
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts]
        return np.stack([r / np.linalg.norm(r) for r in rows]).astype(np.float32)


def test_query_time_passages_are_the_ingest_chunks_cached_by_fingerprint_and_bounded():
    from search_extension.passages import QueryTimePassages, fingerprint_of

    embedder, settings = CountingEmbedder(), Settings()
    source = QueryTimePassages(embedder, settings, entries=1)
    one = SourceField("kb", "1", "body", "Keys rotate daily. Lunch is at noon. Invoices go out monthly.", "Keys")
    first = source.passages([one])[one.companion_id]
    assert first and all(one.text[c.start : c.end] == c.text and c.vector is not None for c in first)
    assert all(c.doc_id == one.companion_id and c.metadata["source_field"] == "body" for c in first)
    asked = embedder.texts
    assert source.passages([one])[one.companion_id] == first and embedder.texts == asked  # from the cache
    changed = SourceField("kb", "1", "body", one.text + " A new sentence.", "Keys")
    assert fingerprint_of(changed, settings) != fingerprint_of(one, settings)
    source.passages([changed])  # a changed text is chunked again, and evicts the other (one entry)
    assert embedder.texts > asked
    asked, misses = embedder.texts, source.misses
    source.passages([one])  # chunked again (evicted), its sentences' vectors remembered
    assert source.misses == misses + 1 and embedder.texts == asked


def test_v1_ask_refuses_post_search_options_by_name():
    from chunkrag_gateway.dialect import parse_ask

    with pytest.raises(OptionError, match="options.mode post_search: /v1/ask searches a chunk index"):
        parse_ask("q", {"mode": "post_search"}, max_candidates=8)
    with pytest.raises(OptionError, match="options.fields"):
        parse_ask("q", {"fields": ["body"]}, max_candidates=8)
    assert parse_ask("q", {"mode": "auto"}, max_candidates=8).options.mode is None


def test_the_gate_reads_each_hit_and_the_response_shows_the_likeliest_hits_reading(tmp_path):
    from chunkrag_filter.processors.calibration import (
        Calibrated,
        Configured,
        LogisticModel,
        load_calibration,
        write_calibration,
    )

    retrieval = Calibrated(LogisticModel(("cosine",), (1.0,), 0.0), 0.0)
    gate = Calibrated(LogisticModel(("best_cosine",), (20.0,), -8.0), 0.5)  # passes above cosine 0.4
    path = write_calibration(tmp_path / "c.json", retrieval, None, {}, None, gate)
    try:
        gated = FilterOptions(gate="retrieval", calibration=Configured(str(path)), answer=False)
        options = PostSearchOptions(include_dropped=True)
        result = run(options, filter_options=gated)
        first, second, _ = result.hits
        # Hit 1 holds the rotate passage (cosine 1): its gate passes. Hit 2's only passage does not.
        assert [c.text for c in first.kept] == ["Press rotate to rotate a key", "Lunch is at noon"]
        assert second.kept == () and [why for _, why in second.dropped] == ["nothing_relevant"]
        section = post_search_response(CLUSTER, result, options)["chunkrag"]
        assert section["nothing_relevant"] is False and section["gate"]["passed"] is True
        # A page of hit 2 alone: nothing relevant, said with its own reading.
        alone = post_search_response(page("2"), run(options, filter_options=gated, response=page("2")), options)
        assert alone["chunkrag"]["nothing_relevant"] is True and alone["chunkrag"]["gate"]["passed"] is False
        assert alone["chunkrag"]["nothing_relevant_reason"].startswith("no candidate looks relevant")
        # The post-search options' gate is each hit's over the filter's; a pool keeps the filter's.
        assert run(PostSearchOptions(gate="off"), filter_options=gated).hits[1].kept != ()
        ungated = dataclasses.replace(gated, gate="off")
        assert run(PostSearchOptions(gate="retrieval"), filter_options=ungated).hits[1].kept == ()
        assert run(PostSearchOptions(gate="retrieval"), filter_options=ungated, pooled=True).filtered.gate is None
    finally:
        load_calibration.cache_clear()
