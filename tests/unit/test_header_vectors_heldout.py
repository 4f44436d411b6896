"""The held-out header-vector bench: its pooling, data sets and rule, on literal numbers."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from bench.header_vectors_heldout import (
    COMMITTED_MIX_HALF,
    Variant,
    WordCountingCache,
    choose,
    floors_from,
    holds,
    length_weighted_vector,
    nq_set,
    pooling,
    selection_score,
    squad_set,
)
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.chunker import chunk_documents
from ingest_pipeline.sources import plain_document


def test_length_weighted_vector_weights_sentences_by_words_then_adds_the_header():
    rows = np.array([[1.0, 0.0], [0.0, 1.0]])
    # 3 words against 1: mean (0.75, 0.25), unit (0.9487, 0.3162)
    np.testing.assert_allclose(length_weighted_vector(rows, None, 0.5, [3, 1]), [0.9486833, 0.31622777], atol=1e-6)
    # equal words: the plain mean, as mixed_vector
    np.testing.assert_allclose(length_weighted_vector(rows, None, 0.5, [2, 2]), [0.70710678, 0.70710678], atol=1e-6)
    # + 1.0 x header (0, 1): (0.9487, 1.3162) made unit
    np.testing.assert_allclose(
        length_weighted_vector(rows, np.array([0.0, 2.0]), 1.0, [3, 1]), [0.58471, 0.81124], atol=1e-5
    )
    with pytest.raises(ValueError, match="one word count per sentence"):
        length_weighted_vector(rows, None, 0.5, [1])


class TableEmbedder:
    def __init__(self, table):
        self.table = table

    def embed(self, texts):
        return np.array([self.table[t] for t in texts], dtype=np.float32).reshape(len(texts), 2)


def test_length_pooling_reaches_the_chunker_and_is_undone_after():
    table = {"Bees make honey.": [1.0, 0.0], "Bees make a lot of wax.": [0.8, 0.6], "Hive": [0.0, 1.0]}
    embedder = WordCountingCache(TableEmbedder(table), 2)
    doc = plain_document("d", "Bees make honey. Bees make a lot of wax.", "test", title="Hive")
    settings = ChunkingSettings(headers="title", vectors="mix", header_weight=0.5)
    with pooling("length", embedder):
        (chunked,) = chunk_documents([doc], embedder, settings)
    (chunk,) = chunked.chunks  # cosine 0.8 = θ: one chunk of two sentences (3 and 6 words)
    expected = length_weighted_vector(np.array([[1.0, 0.0], [0.8, 0.6]]), np.array([0.0, 1.0]), 0.5, [3, 6])
    np.testing.assert_allclose(chunk.vector, expected, atol=1e-6)
    with pooling("mean", embedder):
        (plain,) = chunk_documents([doc], embedder, settings)
    (after,) = chunk_documents([doc], embedder, settings)
    np.testing.assert_allclose(plain.chunks[0].vector, [0.75804293, 0.6522047], atol=1e-6)
    np.testing.assert_allclose(after.chunks[0].vector, plain.chunks[0].vector)
    assert not np.allclose(chunk.vector, plain.chunks[0].vector)


def test_words_of_refuses_a_vector_it_did_not_embed():
    embedder = WordCountingCache(TableEmbedder({"a b": [1.0, 0.0]}), 2)
    embedder.embed(["a b"])
    assert embedder.words_of(np.array([1.0, 0.0], dtype=np.float32)) == 2
    with pytest.raises(KeyError):
        embedder.words_of(np.array([0.0, 1.0], dtype=np.float32))


def test_nq_set_keeps_identical_passages_once_and_stops_at_the_limit(tmp_path):
    path = tmp_path / "nq.jsonl.gz"
    gold = {"title": "Nobel", "text": "The first prize went to Röntgen.", "isgold": True}
    records = [
        {"question": "first nobel physics", "ctxs": [gold]},
        {"question": "who won in 1901", "ctxs": [gold]},
        {"question": "capital of peru", "ctxs": [{"title": "Lima", "text": "Lima is the capital.", "isgold": True}]},
    ]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(r) for r in records))
    documents, queries, qrels = nq_set(2, path)
    assert [(d.doc_id, d.title) for d in documents] == [("nq-0", "Nobel")]
    assert queries == {"0": "first nobel physics", "1": "who won in 1901"}
    assert qrels == {"0": {"nq-0"}, "1": {"nq-0"}}
    assert len(nq_set(3, path)[0]) == 2


def test_squad_set_titles_paragraphs_and_takes_answerable_questions(tmp_path):
    def qa(qid, answers):
        return {"id": qid, "question": f"q {qid}?", "answers": [{"text": a} for a in answers]}

    data = {
        "data": [
            {
                "title": "Steam_engine",
                "paragraphs": [
                    {"context": "Steam moves pistons.", "qas": [qa("a", []), qa("b", ["pistons"]), qa("c", ["x"])]},
                    {"context": "Watt improved it.", "qas": [qa("d", ["Watt"]), qa("e", ["it"]), qa("f", ["W"])]},
                ],
            },
            {"title": "Force", "paragraphs": [{"context": "F = ma.", "qas": [qa("g", ["ma"])]}]},
        ]
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    documents, queries, qrels = squad_set(1, 2, path)
    assert [(d.doc_id, d.title) for d in documents] == [("squad-0-0", "Steam engine"), ("squad-0-1", "Steam engine")]
    assert list(queries) == ["b", "c", "d", "e"]
    assert qrels["c"] == {"squad-0-0"} and qrels["e"] == {"squad-0-1"}


def rows(minmax, knn):
    return {"minmax": {"ndcg_at_10": minmax}, "knn": {"ndcg_at_10": knn}}


def test_selection_score_and_ties_to_mean_then_the_smaller_weight():
    assert selection_score({"nq": rows(0.8, 0.7), "squad": rows(0.9, 0.6)}) == 0.75
    mean_half, mean_one = Variant("mix", "mean", 0.5), Variant("mix", "mean", 1.0)
    length_quarter = Variant("mix", "length", 0.25)
    assert choose({mean_one: 0.75, length_quarter: 0.75, mean_half: 0.7499}) == mean_one
    assert choose({mean_one: 0.75, mean_half: 0.75, length_quarter: 0.75}) == mean_half
    assert choose({mean_one: 0.7, mean_half: 0.7, length_quarter: 0.7001}) == length_quarter
    assert [Variant("mix", "mean", 0.5).name, length_quarter.name, Variant("reembed").name] == [
        "mix_w0.5",
        "mix_len_w0.25",
        "reembed",
    ]


def test_floors_come_from_the_committed_row_only_when_mix_half_reproduces():
    floors, source = floors_from(dict(COMMITTED_MIX_HALF), None)
    assert floors == {"minmax": 0.8453, "knn": 0.8316} and "committed" in source
    assert floors_from({"minmax": 0.8449, "knn": 0.8338}, None) == ({}, "reembed needed")
    floors, source = floors_from({"minmax": 0.8449, "knn": 0.8338}, {"minmax": 0.85, "knn": 0.84})
    assert floors == {"minmax": 0.845, "knn": 0.835} and "this run" in source
    assert holds({"minmax": 0.8453, "knn": 0.8316}, {"minmax": 0.8453, "knn": 0.8316})
    assert not holds({"minmax": 0.8452, "knn": 0.84}, {"minmax": 0.8453, "knn": 0.8316})
