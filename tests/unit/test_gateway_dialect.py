"""ext.chunkrag decoding and the Elasticsearch-shaped responses, on literal values."""

import dataclasses

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_filter.pipeline import Decision, FilterOptions, FilterResult
from chunkrag_filter.processors.answer import Answer
from chunkrag_filter.processors.relevance import ScoringOptions
from chunkrag_filter.processors.rewrite import Rewrite
from chunkrag_filter.processors.thresholds import Threshold
from chunkrag_gateway.dialect import (
    OPTION_KEYS,
    SCORING_KEYS,
    ChunkragOptions,
    OptionError,
    ask_response,
    parse_ask,
    parse_options,
    parse_search,
    query_filters,
    query_text,
    search_response,
)
from chunkrag_gateway.models import AskResponse, OptionsModel, ScoringModel
from search_extension.ask import AskResult
from search_extension.post_search import PostSearchOptions
from search_extension.retriever import RetrievalResult
from search_extension.segments import SegmentSettings


def options(raw, max_candidates=50):
    return parse_options(raw, max_candidates=max_candidates)


# --- options ----------------------------------------------------------------


def test_empty_options_are_the_library_defaults():
    assert options({}) == ChunkragOptions()


def test_the_gate_is_the_cross_encoders_unless_post_search_reads_each_hit():
    # The default rule chose the cross-encoder gate for a pool of candidates;
    # each hit of a cluster's response is gated by the cheap retrieval gate
    # unless the caller names one.
    default = options({})
    assert default.filter.gate == "crossencoder" and default.post_search.gate == "retrieval"
    named = options({"gate": "crossencoder"})
    assert named.filter.gate == "crossencoder" and named.post_search.gate is None
    assert options({"gate": "off"}).post_search.gate is None


def test_asking_how_to_judge_turns_the_judge_on_with_its_shipped_calibration():
    from chunkrag_filter.processors.calibration import CONFIGURED

    assert options({}).filter.judge_top == 0 and options({}).filter.calibration is CONFIGURED
    asked = options({"scoring": {"method": "listwise"}}).filter
    assert asked.judge_top == 9 and asked.calibration is CONFIGURED
    assert options({"scoring": {"orders": 2}, "judge_top": 0}).filter.judge_top == 0
    assert options({"judge_top": 20, "calibrated": True}).filter.calibration is CONFIGURED
    assert options({"scoring": {}, "calibrated": False}).filter.calibration is None


def test_every_option_is_read_into_typed_values():
    raw = {
        "query": "q",
        "rewrite": True,
        "candidates": 12,
        "mode": "bm25",
        "stages": True,
        "redundancy_threshold": None,
        "scoring": {
            "method": "yes_no",
            "critic": "off",
            "reflect_band": [0.2, 0.8],
            "use_logprobs": False,
            "weights": [1, 0, 0],
            "listwise_batch": 4,
            "orders": 2,
            "passages": "quoted",
        },
        "threshold": "fixed",
        "fixed_threshold": 0.6,
        "fallback": "not_found",
        "fallback_k": 2,
        "min_score": 0.05,
        "prior_weight": 0.25,
        "rerank": "off",
        "relevance": "crossencoder",
        "gate": "crossencoder",
        "gate_cut": 0.2,
        "gate_top": 5,
        "lost_in_the_middle": False,
        "answer": False,
        "include_dropped": True,
        "budget_s": 7,
        "segments": {"max_total_chars": 1000},
        "judge_top": 9,
        "calibrated": False,
        "ensemble": [512, 128],
        "fields": ["body", "summary"],
        "title_field": "headline",
        "empty_hits": "drop",
        "max_passages": 5,
    }
    parsed = options(raw)
    assert parsed == ChunkragOptions(
        query="q",
        rewrite=True,
        candidates=12,
        mode="bm25",
        stages=True,
        include_dropped=True,
        budget_s=7.0,
        segments=SegmentSettings(max_total_chars=1000),
        ensemble=(128, 512),
        filter=FilterOptions(
            redundancy_threshold=None,
            scoring=ScoringOptions(
                method="yes_no",
                critic="off",
                reflect_band=(0.2, 0.8),
                use_logprobs=False,
                weights=(1.0, 0.0, 0.0),
                listwise_batch=4,
                orders=2,
                passages="quoted",
            ),
            threshold="fixed",
            fixed_threshold=0.6,
            fallback="not_found",
            fallback_k=2,
            min_score=0.05,
            prior_weight=0.25,
            rerank="off",
            relevance="crossencoder",
            gate="crossencoder",
            gate_cut=0.2,
            gate_top=5,
            lost_in_the_middle=False,
            answer=False,
            judge_top=9,
            calibration=None,
        ),
        # A retrieval mode searches a chunk index; the post-search options
        # given are kept (the gateway refuses them there, by name).
        target="chunks",
        post_search=PostSearchOptions(
            fields=("body", "summary"),
            title_field="headline",
            empty_hits="drop",
            max_passages=5,
            include_dropped=True,
            stages=True,
            gate=None,  # the gate named is every hit's too
        ),
        post_search_given=("fields", "title_field", "empty_hits", "max_passages"),
    )
    assert set(raw) == set(OPTION_KEYS) and set(raw["scoring"]) == set(SCORING_KEYS)


def test_unknown_option_is_named_with_the_allowed_ones():
    with pytest.raises(OptionError) as refused:
        options({"candidate": 3})
    assert str(refused.value) == "unknown option [candidate] in ext.chunkrag; allowed: " + ", ".join(OPTION_KEYS)
    with pytest.raises(
        OptionError, match=r"unknown option \[temperature\] in ext.chunkrag.scoring; allowed: method, critic"
    ):
        options({"scoring": {"temperature": 0}})


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {"candidates": 51},
            "ext.chunkrag.candidates must be an integer from 1 to 50 (the gateway's max_candidates), got 51",
        ),
        ({"candidates": True}, "ext.chunkrag.candidates must be an integer"),
        ({"candidates": 2.5}, "ext.chunkrag.candidates must be an integer"),
        ({"rewrite": "yes"}, "ext.chunkrag.rewrite must be true or false, got 'yes'"),
        (
            {"mode": "hybrid"},
            "ext.chunkrag.mode must be one of [auto, chunks, post_search, native_sum, minmax, rrf, linear, bm25, knn], "
            "got 'hybrid'",
        ),
        ({"threshold": "median"}, "ext.chunkrag: unknown threshold 'median'; choose one of dynamic, llm, fixed"),
        ({"fixed_threshold": 1.5}, "ext.chunkrag.fixed_threshold must be a number from 0 to 1, got 1.5"),
        ({"redundancy_threshold": "0.9"}, "ext.chunkrag.redundancy_threshold must be a number from -1 to 1"),
        ({"fallback_k": 0}, "ext.chunkrag.fallback_k must be an integer of at least 1, got 0"),
        ({"budget_s": 0}, "ext.chunkrag.budget_s must be above 0"),
        ({"scoring": {"method": "vibes"}}, "ext.chunkrag.scoring: unknown scoring method 'vibes'"),
        ({"scoring": {"reflect_band": [0.8, 0.2]}}, "reflect_band must be [low, high] with low <= high"),
        ({"scoring": {"reflect_band": [0.2]}}, "reflect_band must be a list of 2 numbers from 0 to 1"),
        ({"scoring": {"weights": [0, 0, 0]}}, "weights must not all be 0"),
        ({"scoring": "fast"}, "ext.chunkrag.scoring must be an object, got a string"),
        (
            {"scoring": {"listwise_batch": 10}},
            "ext.chunkrag.scoring.listwise_batch must be an integer from 1 to 9, got 10",
        ),
        ({"prior_weight": -0.1}, "ext.chunkrag.prior_weight must be a number from 0 to 1"),
    ],
)
def test_invalid_values_are_refused_with_the_reason(raw, message):
    with pytest.raises(OptionError) as refused:
        options(raw)
    assert message in str(refused.value)


def test_options_must_be_an_object():
    with pytest.raises(OptionError, match="ext.chunkrag must be an object, got a list"):
        options([])


def test_the_ask_request_model_declares_the_same_keys():
    assert set(OptionsModel.model_fields) == set(OPTION_KEYS)
    assert set(ScoringModel.model_fields) == set(SCORING_KEYS)


def test_every_library_option_is_reachable_except_the_internal_ones():
    """Fails when the filter gains an option the dialect does not offer:
    expose it, or name it here as internal."""
    # `calibration` (a fitted model, not JSON) is reached as the boolean `calibrated`.
    internal_filter, internal_scoring = {"variance_epsilon", "calibration"}, {"likert_threshold", "max_chunk_chars"}
    assert {f.name for f in dataclasses.fields(FilterOptions)} - internal_filter <= set(OPTION_KEYS)
    assert {f.name for f in dataclasses.fields(ScoringOptions)} - internal_scoring == set(SCORING_KEYS)


# --- search bodies ----------------------------------------------------------


@pytest.mark.parametrize(
    "query, text",
    [
        ({"match": {"text": "capital of Japan"}}, "capital of Japan"),
        ({"match": {"title": {"query": "capital", "operator": "and"}}}, "capital"),
        ({"match_phrase": {"text": "capital city"}}, "capital city"),
        ({"multi_match": {"query": "tokyo", "fields": ["text", "title"]}}, "tokyo"),
        ({"query_string": {"query": "tokyo AND japan"}}, "tokyo AND japan"),
        ({"simple_query_string": {"query": "tokyo"}}, "tokyo"),
        ({"bool": {"must": [{"term": {"doc_id": "a"}}, {"match": {"text": "tokyo"}}]}}, "tokyo"),
        ({"bool": {"should": {"match": {"text": "kyoto"}}}}, "kyoto"),
        ({"term": {"doc_id": "a"}}, None),
        ({"match": {"text": 42}}, None),
        ({"match": {"a": "x", "b": "y"}}, None),
        (None, None),
    ],
)
def test_query_text_from_any_full_text_query(query, text):
    assert query_text(query) == text


def test_filters_come_from_bool_filter_must_not_and_non_text_must():
    query = {
        "bool": {
            "must": [{"match": {"text": "tokyo"}}, {"range": {"position": {"lt": 3}}}],
            "filter": {"term": {"doc_id": "a"}},
            "must_not": {"term": {"section": "x"}},
        }
    }
    assert query_filters(query) == (
        {"term": {"doc_id": "a"}},
        {"range": {"position": {"lt": 3}}},
        {"bool": {"must_not": [{"term": {"section": "x"}}]}},
    )
    assert query_filters({"match": {"text": "tokyo"}}) == ()


def test_a_chunkrag_block_is_one_when_ext_holds_it_whatever_its_value():
    from chunkrag_gateway.policy import has_chunkrag_ext

    assert has_chunkrag_ext({"ext": {"chunkrag": {}}})
    assert has_chunkrag_ext({"ext": {"chunkrag": None}})  # refused by name, not passed through
    assert not has_chunkrag_ext({"ext": {"other": {}}})
    assert not has_chunkrag_ext({"query": {"match": {"text": "chunkrag"}}})
    assert not has_chunkrag_ext([1])


def test_parse_search_reads_text_filters_size_and_candidates():
    body = {
        "query": {"bool": {"must": {"match": {"text": "tokyo"}}, "filter": [{"term": {"doc_id": "a"}}]}},
        "size": 3,
        "ext": {"chunkrag": {}},
    }
    parsed = parse_search(body, max_candidates=50)
    assert (parsed.text, parsed.filters, parsed.size, parsed.candidates) == (
        "tokyo",
        ({"term": {"doc_id": "a"}},),
        3,
        8,
    )
    # ext.chunkrag.query wins over the body's query; retrieval-only takes `size` candidates
    parsed = parse_search(
        {"query": {"match": {"text": "tokyo"}}, "ext": {"chunkrag": {"query": "kyoto", "stages": False}}},
        max_candidates=50,
    )
    assert (parsed.text, parsed.size, parsed.candidates, parsed.options.stages) == ("kyoto", 10, 10, False)
    assert parse_search({"ext": {"chunkrag": {"query": "x"}}}, max_candidates=4).candidates == 4


@pytest.mark.parametrize(
    "body, message",
    [
        ({"ext": {"chunkrag": {}}, "aggs": {}}, "may hold only [query, size, ext], got [aggs]"),
        (
            {"ext": {"chunkrag": {}, "other": {}}, "query": {"match": {"text": "x"}}},
            "ext may hold only [chunkrag] when it is present, got [other]",
        ),
        ({"ext": {"chunkrag": {}}, "query": {"term": {"doc_id": "a"}}}, "no query text: set ext.chunkrag.query"),
        ({"ext": {"chunkrag": {"query": "  "}}}, "no query text"),
        (
            {"ext": {"chunkrag": {}}, "query": {"match": {"text": "x"}}, "size": -1},
            "[size] must be a non-negative integer, got -1",
        ),
    ],
)
def test_parse_search_refuses_what_it_cannot_honour(body, message):
    with pytest.raises(OptionError) as refused:
        parse_search(body, max_candidates=50)
    assert message in str(refused.value)


def test_parse_ask_names_the_options_object():
    assert parse_ask("what?", {"candidates": 3}, max_candidates=50).candidates == 3
    with pytest.raises(OptionError, match=r"unknown option \[x\] in options;"):
        parse_ask("what?", {"x": 1}, max_candidates=50)


# --- responses ----------------------------------------------------------------


def chunk(doc, position, score, **stages):
    return Chunk(
        doc_id=doc,
        position=position,
        text=f"{doc} text {position}",
        start=0,
        end=10,
        title=doc,
        score=score,
        stage_scores=stages,
    )


A0, A1, B0, C0 = chunk("a", 0, 0.9), chunk("a", 1, 0.8), chunk("b", 0, 0.7), chunk("c", 0, 0.6)
RETRIEVAL = RetrievalResult((A0, A1, B0, C0), "minmax", "client", 12.0, 3.0)
A0_SCORED, B0_SCORED = chunk("a", 0, 0.9, base=0.95, combined=0.9), chunk("b", 0, 0.7, base=0.8, combined=0.85)
C0_SCORED = chunk("c", 0, 0.6, base=0.1, combined=0.1)


def filtered_result(rewrite=None):
    filtered = FilterResult(
        kept=(A0_SCORED, B0_SCORED),
        decisions=(
            Decision(A1, False, "redundant"),
            Decision(A0_SCORED, True, "above_threshold"),
            Decision(B0_SCORED, True, "above_threshold"),
            Decision(C0_SCORED, False, "below_threshold"),
        ),
        threshold=Threshold(0.62, "dynamic", 0.62, 0.37, 0.14),
        nothing_relevant=False,
        model_calls=3,
        cached_calls=1,
        prompt_tokens=240,
        completion_tokens=3,
        timings_ms={"scoring": 100.0},
        judged_by="workers",
    )
    # The answer's call and tokens count once, in the usage.
    answer = Answer("A [1], B [2].", True, ("a:0", "b:0"), prompt_tokens=200, completion_tokens=9, calls=1)
    return AskResult(
        "q?",
        RETRIEVAL,
        filtered,
        rewrite,
        {"embed": 3.0, "retrieval": 12.0, "scoring": 100.0, "total": 130.0},
        answer=answer,
    )


def test_search_response_has_elasticsearch_shape_with_kept_chunks_in_order():
    response = search_response(filtered_result(), index="idx", size=10, include_dropped=False, took_ms=130.4)
    assert response["took"] == 130 and response["timed_out"] is False and response["_shards"]["failed"] == 0
    assert response["hits"]["total"] == {"value": 2, "relation": "eq"} and response["hits"]["max_score"] == 0.9
    first = response["hits"]["hits"][0]
    assert first == {
        "_index": "idx",
        "_id": "a:0",
        "_score": 0.9,
        "_source": {
            "doc_id": "a",
            "position": 0,
            "scale": 0,
            "start": 0,
            "end": 10,
            "title": "a",
            "section": [],
            "sentence_count": 1,
            "text": "a text 0",
            "metadata": {},
        },
        "_chunkrag": {
            "retrieval_rank": 1,
            "retrieval_score": 0.9,
            "scores": {"base": 0.95, "combined": 0.9},
            "kept": True,
            "reason": "above_threshold",
        },
    }
    assert [h["_id"] for h in response["hits"]["hits"]] == ["a:0", "b:0"]
    assert response["chunkrag"] == {
        "query": {"original": "q?", "rewritten": None},
        "retrieval": {"mode": "minmax", "fusion": "client", "candidates": 4},
        "stages": True,
        "threshold": {"value": 0.62, "method": "dynamic", "mean": 0.62, "std": 0.37},
        "nothing_relevant": False,
        "judged_by": "workers",
        "judged_by_reason": None,
        "answer": {"text": "A [1], B [2].", "found": True, "citations": ["a:0", "b:0"]},
        "timings_ms": {"embed": 3.0, "retrieval": 12.0, "scoring": 100.0, "total": 130.0},
        "usage": {"model_calls": 4, "cached_calls": 1, "prompt_tokens": 440, "completion_tokens": 12},
    }


def test_size_caps_the_hits_and_dropped_chunks_come_with_reasons():
    response = search_response(filtered_result(), index="idx", size=1, include_dropped=True, took_ms=1)
    assert [h["_id"] for h in response["hits"]["hits"]] == ["a:0"] and response["hits"]["total"]["value"] == 2
    dropped = {
        d["_id"]: (d["_score"], d["_chunkrag"]["reason"], d["_chunkrag"]["kept"])
        for d in response["chunkrag"]["dropped"]
    }
    assert dropped == {"a:1": (None, "redundant", False), "c:0": (0.1, "below_threshold", False)}


def test_rewrite_shows_and_counts_in_usage():
    result = filtered_result(Rewrite("capital of japan", "q?", True, prompt_tokens=30))
    section = search_response(result, index="idx", size=10, include_dropped=False, took_ms=1)["chunkrag"]
    assert section["query"] == {"original": "q?", "rewritten": "capital of japan"}
    assert section["usage"] == {"model_calls": 5, "cached_calls": 1, "prompt_tokens": 470, "completion_tokens": 12}


def test_retrieval_only_response_scores_hits_by_retrieval():
    result = AskResult("q?", RETRIEVAL, None, None, {"total": 15.0})
    response = search_response(result, index="idx", size=2, include_dropped=True, took_ms=15)
    assert [(h["_id"], h["_score"], h["_chunkrag"]["reason"]) for h in response["hits"]["hits"]] == [
        ("a:0", 0.9, "retrieved"),
        ("a:1", 0.8, "retrieved"),
    ]
    assert response["hits"]["total"]["value"] == 4
    section = response["chunkrag"]
    assert (
        section["stages"] is False
        and section["threshold"] is None
        and section["answer"] is None
        and section["dropped"] == []
    )
    assert section["judged_by"] is None
    assert section["usage"] == {"model_calls": 0, "cached_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}


def test_ask_response_lists_kept_then_dropped_and_fits_its_model():
    body = ask_response(filtered_result(), index="idx")
    assert [(c["id"], c["kept"], c["reason"]) for c in body["chunks"]] == [
        ("a:0", True, "above_threshold"),
        ("b:0", True, "above_threshold"),
        ("a:1", False, "redundant"),
        ("c:0", False, "below_threshold"),
    ]
    assert (body["answer"], body["found"], body["citations"]) == ("A [1], B [2].", True, ["a:0", "b:0"])
    assert (body["judged_by"], body["judged_by_reason"]) == ("workers", None)
    AskResponse.model_validate(body)
    AskResponse.model_validate(ask_response(AskResult("q?", RETRIEVAL, None), index="idx"))
