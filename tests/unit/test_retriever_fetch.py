"""Client-side fusion fuses ids and scores, then fetches only the chunks it
kept: on a double of the search backend that answers literal hits."""

import numpy as np
import pytest

from chunkrag_core.settings import RetrievalSettings
from search_extension.retriever import HybridRetriever


def hit(index, doc, position, score=None):
    return {"_index": index, "_id": f"{doc}:{position}", "_score": score}


def chunk_hit(index, doc, position):
    source = {"doc_id": doc, "position": position, "text": f"{doc} {position}", "start": 0, "end": 3}
    return {**hit(index, doc, position, 1.0), "_source": source}


class TwoSidedBackend:
    """BM25 finds a:0, b:0, d:0; kNN finds b:0 then c:0 (in another index).
    ``missing``: chunks deleted between the search and the fetch."""

    def __init__(self, missing=()):
        self.missing, self.msearches, self.searches = set(missing), [], []

    def offers_hybrid_query(self):
        return False

    def msearch(self, searches):
        self.msearches.append(searches)
        text = {"hits": {"hits": [hit("idx-1", "a", 0, 4.0), hit("idx-1", "b", 0, 2.0), hit("idx-1", "d", 0, 1.0)]}}
        knn = {"hits": {"hits": [hit("idx-1", "b", 0, 0.9), hit("idx-2", "c", 0, 0.7)]}}
        return {"responses": [text, knn]}

    def search(self, index, body):
        self.searches.append((index, body))
        hits = [
            chunk_hit(wanted["bool"]["filter"][0]["term"]["_index"], *chunk_id.split(":")[0:1], 0)
            for wanted in body["query"]["bool"]["should"]
            for chunk_id in wanted["bool"]["filter"][1]["ids"]["values"]
            if chunk_id not in self.missing
        ]
        return {"_shards": {"total": 2, "successful": 2, "skipped": 0, "failed": 0}, "hits": {"hits": hits}}


class Embedder:
    def embed(self, texts):
        return np.ones((len(texts), 2), dtype=np.float32)


def retriever(backend):
    return HybridRetriever(backend, Embedder(), "idx-*", RetrievalSettings(mode="minmax", size=3))


def test_sides_come_without_sources_and_only_the_kept_chunks_are_fetched():
    backend = TwoSidedBackend()
    result = retriever(backend).search("q", size=2)
    assert all(body["_source"] is False for body in backend.msearches[0][1::2])
    (index, fetch), *_ = backend.searches
    assert index == "idx-*" and fetch["size"] == 2
    # minmax, half and half: b (1/3 and 1) before a (1 and 0); c and d (0) left out.
    assert [c.chunk_id for c in result.chunks] == ["b:0", "a:0"]
    assert [c.score for c in result.chunks] == pytest.approx([2 / 3, 0.5])
    assert result.chunks[0].stage_scores["bm25"] == pytest.approx(1 / 3, abs=1e-6)
    assert result.chunks[0].stage_scores["knn"] == 1.0
    assert result.shards.total == 2 and result.shards.failed == 0


def test_a_chunk_gone_before_the_fetch_is_left_out_not_invented():
    result = retriever(TwoSidedBackend(missing={"a:0"})).search("q", size=3)
    assert [c.chunk_id for c in result.chunks] == ["b:0", "d:0"]
    assert all(c.text for c in result.chunks)
