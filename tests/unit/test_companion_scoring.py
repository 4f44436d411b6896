"""The engine-scored companion path's pure parts with literal values: the
request bodies it sends, reading the engine's answers, the completeness
check and the choice of candidates; and post-search taking the scored
candidates from a scoring passage source (a test double) instead of
scoring passages itself."""

from __future__ import annotations

import numpy as np
import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_filter.pipeline import FilterOptions
from search_extension.companion_scoring import (
    ChunkSignal,
    NotServed,
    candidates_body,
    choose_candidates,
    complete,
    signal_searches,
    signals_of,
)
from search_extension.passages import ScoredHits
from search_extension.post_search import PostSearchOptions, passage_scores, post_search
from search_extension.text_fields import TextFields

BASE_ONLY = {"bool": {"must_not": [{"range": {"scale": {"gt": 0}}}]}}


def test_the_signal_searches_are_an_exact_knn_and_a_bm25_match_over_the_hits_chunks_without_source():
    searches = signal_searches("kb-chunkrag", ["kb\x1f2\x1fbody", "kb\x1f1\x1fbody"], "rotate a key", [0.5, 0.25], 5000)
    filters = [{"terms": {"doc_id": ["kb\x1f1\x1fbody", "kb\x1f2\x1fbody"]}}, BASE_ONLY]
    assert searches == [
        {"index": "kb-chunkrag"},
        {
            "_source": False,
            "stored_fields": "_none_",
            "track_total_hits": False,
            "size": 5000,
            "knn": {
                "field": "vector",
                "query_vector": [0.5, 0.25],
                "k": 5000,
                "num_candidates": 5000,
                "filter": filters,
            },
            "docvalue_fields": ["doc_id", "position", "doc_fingerprint", "start", "end", "sentence_count"],
        },
        {"index": "kb-chunkrag"},
        {
            "_source": False,
            "stored_fields": "_none_",
            "track_total_hits": False,
            "size": 5000,
            "query": {"bool": {"filter": filters, "must": [{"match": {"text": "rotate a key"}}]}},
            "docvalue_fields": ["doc_id", "position"],
        },
    ]


def test_with_bm25_counted_here_the_knn_hits_bring_their_text_and_so_their_stored_fields():
    (header, knn) = signal_searches("kb-chunkrag", ["kb\x1f1\x1fbody"], "q", [0.5], 10, bm25="passages")
    assert header == {"index": "kb-chunkrag"}
    assert knn["_source"] == {"includes": ["text"]} and "stored_fields" not in knn


def test_the_candidates_are_read_by_id_with_their_vectors_only_when_asked_as_raw_doc_values():
    assert candidates_body(["a:0", "b:3"], with_vectors=False) == {
        "size": 2,
        "query": {"ids": {"values": ["a:0", "b:3"]}},
        "_source": {"excludes": ["vector"]},
        "track_total_hits": False,
    }
    with_vectors = candidates_body(["a:0"], with_vectors=True)
    assert with_vectors["_source"] == {"excludes": ["vector"]}
    assert with_vectors["docvalue_fields"] == [{"field": "vector", "format": "binary"}]


def _knn_hit(doc_id: str, position: int, score: float, fingerprint: str = "fp") -> dict:
    return {
        "_id": f"{doc_id}:{position}",
        "_score": score,
        "fields": {"doc_id": [doc_id], "position": [position], "doc_fingerprint": [fingerprint]},
    }


def _answer(hits: list[dict]) -> dict:
    return {"hits": {"hits": hits}, "status": 200}


def test_signals_join_the_knn_and_bm25_answers_by_chunk_id_and_order_chunks_by_position():
    knn = _answer([_knn_hit("a", 1, 0.9), _knn_hit("b", 0, 0.6), _knn_hit("a", 0, 0.75)])
    bm25 = _answer([{"_id": "a:1", "_score": 2.5}])
    found = signals_of([knn, bm25])
    assert found == {
        "a": [ChunkSignal("a:0", "a", 0, "fp", 0.75, 0.0), ChunkSignal("a:1", "a", 1, "fp", 0.9, 2.5)],
        "b": [ChunkSignal("b:0", "b", 0, "fp", 0.6, 0.0)],
    }
    assert found["a"][1].cosine == pytest.approx(0.8)


def test_without_their_id_the_chunks_are_named_by_their_doc_values():
    knn = _answer([{k: v for k, v in _knn_hit("a", p, 0.5).items() if k != "_id"} for p in (1, 0)])
    bm25 = _answer([{"_score": 1.5, "fields": {"doc_id": ["a"], "position": [1]}}])
    found = signals_of([knn, bm25])
    assert found == {"a": [ChunkSignal("a:0", "a", 0, "fp", 0.5, 0.0), ChunkSignal("a:1", "a", 1, "fp", 0.5, 1.5)]}


def test_a_failed_search_or_a_full_page_is_not_served():
    refused = {"error": {"type": "security_exception"}, "status": 403}
    with pytest.raises(NotServed, match="403: security_exception"):
        signals_of([refused, _answer([])])
    with pytest.raises(NotServed, match="2 chunks or more"):
        signals_of([_answer([_knn_hit("a", 0, 0.5), _knn_hit("a", 1, 0.5)]), _answer([])], max_chunks=2)


def test_a_field_is_complete_when_every_chunk_is_of_its_text_and_none_is_missing():
    rows = [ChunkSignal(f"a:{p}", "a", p, "fp", 0.5, 0.0) for p in range(3)]
    assert complete(rows, "fp")
    assert not complete(rows, "other")
    assert not complete([rows[0], rows[2]], "fp")
    assert not complete([], "fp")


def test_candidates_are_each_hits_best_by_the_same_passage_score_as_query_time_passages():
    per_hit = [
        [ChunkSignal("a:0", "a", 0, "fp", 0.9, 0.0), ChunkSignal("a:1", "a", 1, "fp", 0.6, 4.0)],
        [ChunkSignal("b:0", "b", 0, "fp", 0.5, 2.0), ChunkSignal("b:1", "b", 1, "fp", 0.7, 1.0)],
    ]
    best, capped = choose_candidates(per_hit, (0.5, 0.5), max_passages=1)
    assert capped == [1, 1]
    # Min-max over each hit's own chunks: a's bm25 0, 1 and knn 1, 0 tie at
    # 0.5 (the hit's order first); b's bm25 1, 0 and knn 0, 1 tie too.
    assert [[(row.chunk_id, score.score) for row, score in hit] for hit in best] == [[("a:0", 0.5)], [("b:0", 0.5)]]
    assert best[0][0][1].signals() == {"bm25": 0.0, "knn": 1.0, "cosine": 0.8}
    # A hit's candidates and scores are the same whatever hit shares its response.
    alone, _ = choose_candidates(per_hit[1:], (0.5, 0.5), max_passages=1)
    assert alone[0] == best[1]


def test_the_passage_score_weighs_both_signals_over_one_hits_passages():
    scores = passage_scores([1.0, 3.0, 2.0], [0.5, 1.0, 0.5], [0.0, 1.0, 0.0], (1.0, 3.0))
    # bm25 0, 1, 0.5; knn 0, 1, 0: (1 * 0 + 3 * 0) / 4, (1 + 3) / 4, (0.5 + 0) / 4.
    assert [s.score for s in scores] == [0.0, 1.0, 0.125]
    assert [s.cosine for s in scores] == [0.0, 1.0, 0.0]


class _Scoring:
    """A scoring passage source double: the candidates it was told to give."""

    def __init__(self, scored: ScoredHits | None):
        self._scored, self.asked, self.passages_asked = scored, [], 0

    def scored(self, fields_by_hit, **kwargs):
        self.asked.append(([[f.doc_id for f in fields] for fields in fields_by_hit], kwargs))
        return self._scored

    def passages(self, fields, *, query=""):
        self.passages_asked += 1
        return {}


class _Embedder:
    def embed(self, texts):
        return [np.array([1.0, 0.0], dtype=np.float32) for _ in texts]


def _chunk(doc_id: str, position: int, score: float) -> Chunk:
    signals = {"bm25": score, "knn": score, "cosine": score}
    return Chunk(doc_id, position, f"text {position}", 0, 6, score=score, stage_scores=signals)


RESPONSE = {"hits": {"hits": [{"_index": "kb", "_id": "1", "_source": {"body": "one"}}]}}


def _post_search(source, filter_options=FilterOptions(answer=False)):
    return post_search(
        RESPONSE,
        query="q",
        options=PostSearchOptions(max_passages=7),
        filter_options=filter_options,
        fields_of=lambda index: TextFields(("body",), None),
        passage_source=source,
        embedder=_Embedder(),
    )


def test_post_search_takes_the_engine_scored_candidates_and_asks_vectors_only_for_redundancy():
    doc = "kb\x1f1\x1fbody"
    source = _Scoring(ScoredHits(best=((_chunk(doc, 1, 0.9), _chunk(doc, 0, 0.2)),), capped=(5,)))
    result = _post_search(source, FilterOptions(answer=False, redundancy_threshold=0.9))
    assert result.scored_by == "engine" and source.passages_asked == 0
    assert result.candidates == 2 and result.hits[0].capped == 5
    (fields, asked) = source.asked[0]
    assert fields == [["1"]]
    assert (asked["max_passages"], asked["with_vectors"], asked["query"]) == (7, True, "q")
    _post_search(source, FilterOptions(answer=False))  # the default: no redundancy stage, no vectors
    assert source.asked[1][1]["with_vectors"] is False


def test_post_search_reads_and_scores_the_passages_itself_when_the_engine_cannot():
    source = _Scoring(None)
    result = _post_search(source)
    assert result.scored_by == "here" and source.passages_asked == 1


def test_a_hit_the_engine_did_not_serve_has_its_own_passages_read_and_scored_here():
    class Asked(_Scoring):
        def passages(self, fields, *, query=""):
            self.passages_asked += 1
            self.fields = [f.doc_id for f in fields]
            return {f.companion_id: [_chunk(f.companion_id, 0, 0.0)] for f in fields}

    two = {"hits": {"hits": [*RESPONSE["hits"]["hits"], {"_index": "kb", "_id": "2", "_source": {"body": "two"}}]}}
    served = (_chunk("kb\x1f1\x1fbody", 0, 0.9),)
    source = Asked(ScoredHits(best=(served, None), capped=(3, 0)))
    result = post_search(
        two,
        query="q",
        options=PostSearchOptions(),
        filter_options=FilterOptions(answer=False),
        fields_of=lambda index: TextFields(("body",), None),
        passage_source=source,
        embedder=_Embedder(),
    )
    assert result.scored_by == "both" and source.fields == ["2"]  # only the hit not served is read
    assert [h.capped for h in result.hits] == [3, 0] and result.candidates == 2
    first, second = (h.kept + tuple(c for c, _ in h.dropped) for h in result.hits)
    assert [c.doc_id for c in first] == ["kb\x1f1\x1fbody"] and [c.doc_id for c in second] == ["kb\x1f2\x1fbody"]
    # Scored here, over its own passages: a lone passage's signals are the middle of their range.
    assert second[0].stage_scores["bm25"] == second[0].stage_scores["knn"] == 0.5
