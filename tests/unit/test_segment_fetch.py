"""The neighbour request as a value, and segment extraction with an
injected fetch (one call, only the missing positions)."""

from __future__ import annotations

import numpy as np
import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.engines import schema
from chunkrag_core.settings import VectorIndexSettings
from search_extension.queries import position_runs, positions_body
from search_extension.segments import SegmentError, SegmentSettings, extract_segments


def test_position_runs_compress_consecutive_positions():
    assert position_runs([7, 1, 3, 2, 3]) == [(1, 3), (7, 7)]
    assert position_runs([]) == []


def test_positions_body_is_one_filter_per_document_run():
    body = positions_body({"b": [4], "a": [1, 2, 5]})
    assert body == {
        "size": 4,
        "query": {
            "bool": {
                "filter": [
                    {
                        "bool": {
                            "should": [
                                {
                                    "bool": {
                                        "filter": [
                                            {"term": {"doc_id": "a"}},
                                            {"range": {"position": {"gte": 1, "lte": 2}}},
                                        ]
                                    }
                                },
                                {
                                    "bool": {
                                        "filter": [
                                            {"term": {"doc_id": "a"}},
                                            {"range": {"position": {"gte": 5, "lte": 5}}},
                                        ]
                                    }
                                },
                                {
                                    "bool": {
                                        "filter": [
                                            {"term": {"doc_id": "b"}},
                                            {"range": {"position": {"gte": 4, "lte": 4}}},
                                        ]
                                    }
                                },
                            ],
                            "minimum_should_match": 1,
                        }
                    },
                    # Base chunks only: none of a larger ensembling scale.
                    {"bool": {"must_not": [{"range": {"scale": {"gt": 0}}}]}},
                ]
            }
        },
        "sort": [{"doc_id": "asc"}, {"position": "asc"}],
        "_source": {"excludes": ["vector"]},
        "track_total_hits": False,
    }
    with pytest.raises(ValueError):
        positions_body({})


TEXT = "Alpha one. Beta two. Gamma three. Delta four."
SPANS = [(0, 10), (11, 20), (21, 33), (34, 45)]


def doc_chunk(position: int, score: float | None = None) -> Chunk:
    start, end = SPANS[position]
    previous = SPANS[position - 1][1] if position else 0
    return Chunk(
        doc_id="d",
        position=position,
        text=TEXT[start:end],
        start=start,
        end=end,
        score=score,
        lead=TEXT[previous:start],
    )


def test_extract_segments_fetches_only_the_missing_neighbours_once():
    calls = []

    def fetch(wanted):
        calls.append({k: tuple(v) for k, v in wanted.items()})
        return [doc_chunk(p) for p in wanted["d"]]

    candidates = [doc_chunk(0, score=3.0), doc_chunk(2, score=2.9), doc_chunk(3, score=0.0)]
    # values: 0.82, -0.18 (unretrieved), ~0.78, ~-0.18 -> one segment 0..2
    (segment,) = extract_segments(candidates, fetch, SegmentSettings())
    assert calls == [{"d": (1,)}]
    assert (segment.first, segment.stop) == (0, 3)
    assert segment.text == TEXT[0:33]
    assert segment.chunk_ids == ("d:0", "d:1", "d:2")
    # candidates keep their retrieval scores; the fetched neighbour has none
    assert [c.score for c in segment.chunks] == [3.0, None, 2.9]


def test_no_fetch_when_the_candidates_hold_every_position():
    def fetch(wanted):
        raise AssertionError("no fetch expected")

    (segment,) = extract_segments([doc_chunk(1, score=1.0), doc_chunk(0, score=1.0)], fetch)
    assert segment.text == TEXT[0:20]


def test_a_neighbour_the_engine_no_longer_has_is_an_error_not_a_hole():
    with pytest.raises(SegmentError, match="lacks chunk positions"):
        extract_segments([doc_chunk(0, score=3.0), doc_chunk(2, score=2.9), doc_chunk(3, score=0.0)], lambda wanted: [])


def test_header_and_lead_round_trip_through_the_index_source():
    chunk = Chunk(
        doc_id="d", position=1, text="Beta two.", start=11, end=20, header="Greek letters", lead=" ", vector=np.zeros(3)
    )
    source = schema.chunk_to_source(chunk, fingerprint="f", doc_chunk_count=2)
    assert source["header"] == "Greek letters" and source["lead"] == " "
    back = schema.chunk_from_hit({"_source": source})
    assert (back.header, back.lead) == ("Greek letters", " ")
    # An index written before these fields existed: no header, lead unknown.
    old = {k: v for k, v in source.items() if k not in ("header", "lead")}
    assert (schema.chunk_from_hit({"_source": old}).header, schema.chunk_from_hit({"_source": old}).lead) == ("", None)
    mapping = schema.index_body(dims=3, has_english=True, vectors=VectorIndexSettings())
    assert mapping["mappings"]["properties"]["lead"] == {"type": "text", "index": False}
