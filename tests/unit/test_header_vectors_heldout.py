"""The held-out header-vector bench: its pooling, data sets and rule, on literal numbers."""

from __future__ import annotations

import gzip
import json

import numpy as np

from bench.header_vectors_heldout import (
    COMMITTED_MIX_HALF,
    Variant,
    choose,
    chunking_for,
    floors_from,
    holds,
    nq_set,
    selection_score,
    squad_set,
)
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.chunker import chunk_documents
from ingest_pipeline.headers import mixed_vector
from ingest_pipeline.sources import plain_document


def test_each_variant_sets_its_vectors_weight_and_pooling():
    base = ChunkingSettings()
    length = chunking_for(Variant("mix", "length", 0.25), base)
    mean = chunking_for(Variant("mix", "mean", 0.75), base)
    assert (length.vectors, length.header_weight, length.mix_pooling) == ("mix", 0.25, "length")
    assert (mean.vectors, mean.header_weight, mean.mix_pooling) == ("mix", 0.75, "mean")
    assert chunking_for(Variant("reembed"), base).vectors == "reembed"


def test_length_pooling_is_the_word_weighted_mean_the_run_swapped_in():
    # the run's own swap: the mean weighted by words, made unit, then mixed_vector's header step
    table = {"Bees make honey.": [1.0, 0.0], "Bees make a lot of wax.": [0.8, 0.6], "Hive": [0.0, 1.0]}
    doc = plain_document("d", "Bees make honey. Bees make a lot of wax.", "test", title="Hive")
    variant = chunking_for(Variant("mix", "length", 0.5), ChunkingSettings(headers="title"))
    (chunked,) = chunk_documents([doc], TableEmbedder(table), variant)
    weighted = (3 * np.array([1.0, 0.0]) + 6 * np.array([0.8, 0.6])) / 9
    expected = mixed_vector(weighted[None, :], np.array([0.0, 1.0]), 0.5)
    np.testing.assert_allclose(chunked.chunks[0].vector, expected, atol=1e-6)


class TableEmbedder:
    def __init__(self, table):
        self.table = table

    def embed(self, texts):
        return np.array([self.table[t] for t in texts], dtype=np.float32).reshape(len(texts), 2)


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
