"""ext.chunkrag.segments: decoding, and segments as hits, on literal values."""

from __future__ import annotations

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_gateway.dialect import OptionError, ask_response, parse_options, search_response
from chunkrag_gateway.models import AskResponse
from search_extension.ask import AskResult
from search_extension.retriever import RetrievalResult
from search_extension.segments import Segment, SegmentSettings


def test_segments_true_false_or_budgets():
    assert parse_options({}, max_candidates=50).segments is None
    assert parse_options({"segments": False}, max_candidates=50).segments is None
    assert parse_options({"segments": True}, max_candidates=50).segments == SegmentSettings()
    parsed = parse_options(
        {"segments": {"max_total_chars": 1000, "irrelevant_chunk_penalty": 0.3, "max_segment_chunks": 4}},
        max_candidates=50,
    )
    assert parsed.segments == SegmentSettings(max_total_chars=1000, irrelevant_chunk_penalty=0.3, max_segment_chunks=4)


@pytest.mark.parametrize(
    "raw, message",
    [
        ("yes", r"ext.chunkrag.segments must be true, false or an object, got a string"),
        ({"max_chars": 10}, r"unknown option \[max_chars\] in ext.chunkrag.segments; allowed: max_segment_chunks"),
        ({"max_total_chars": 0}, r"ext.chunkrag.segments.max_total_chars must be an integer of at least 1"),
        ({"decay_rate": 0}, r"ext.chunkrag.segments: decay_rate must be positive"),
    ],
)
def test_bad_segment_options_are_named(raw, message):
    with pytest.raises(OptionError, match=message):
        parse_options({"segments": raw}, max_candidates=50)


def make_result():
    chunks = (
        Chunk(
            doc_id="bees",
            position=4,
            text="Bees make honey.",
            start=100,
            end=116,
            title="Bees",
            header="Bees",
            score=2.0,
        ),
        Chunk(doc_id="bees", position=5, text="From nectar.", start=117, end=129, title="Bees", header="Bees"),
    )
    segment = Segment("bees", 4, 6, 0.9, 100, 129, "Bees make honey. From nectar.", chunks)
    return AskResult("how?", RetrievalResult(chunks[:1], "minmax", "client", 1.0, 1.0), None, segments=(segment,))


def test_segments_come_back_as_hits_with_chunk_ids_and_span():
    response = search_response(make_result(), index="docs", size=10, include_dropped=False, took_ms=5)
    assert response["hits"]["total"] == {"value": 1, "relation": "eq"}
    (hit,) = response["hits"]["hits"]
    assert hit == {
        "_index": "docs",
        "_id": "bees:4-5",
        "_score": 0.9,
        "_source": {
            "doc_id": "bees",
            "scale": 0,
            "first_position": 4,
            "last_position": 5,
            "start": 100,
            "end": 129,
            "title": "Bees",
            "header": "Bees",
            "section": [],
            "text": "Bees make honey. From nectar.",
        },
        "_chunkrag": {
            "segment": True,
            "chunk_ids": ["bees:4", "bees:5"],
            "span": {"start": 100, "end": 129},
            "value": 0.9,
        },
    }
    assert search_response(make_result(), index="docs", size=0, include_dropped=False, took_ms=5)["hits"]["hits"] == []


def test_v1_ask_lists_the_segments():
    payload = ask_response(make_result(), index="docs")
    assert payload["segments"][0]["id"] == "bees:4-5" and payload["segments"][0]["chunk_ids"] == ["bees:4", "bees:5"]
    assert AskResponse.model_validate(payload).segments[0].text == "Bees make honey. From nectar."
