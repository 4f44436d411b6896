"""The percentile breakpoint and the minimum chunk size, on literal numbers."""

from __future__ import annotations

import numpy as np
import pytest

from chunkrag_core.settings import ChunkingSettings, SettingsError
from ingest_pipeline.chunker import chunk_documents
from ingest_pipeline.chunking import group_sentences, percentile_threshold
from ingest_pipeline.sources import plain_document


def test_percentile_threshold_is_the_matching_similarity_percentile():
    sims = [0.9, 0.1, 0.5, 0.7, 0.3]
    # distances above their 80th percentile <=> similarities below their 20th
    assert percentile_threshold(sims, 80) == pytest.approx(0.26)
    assert percentile_threshold(sims, 50) == pytest.approx(0.5)
    assert percentile_threshold(sims, 100) == pytest.approx(0.1)  # nothing is strictly below the minimum
    assert percentile_threshold([], 95) == float("-inf")
    with pytest.raises(ValueError):
        percentile_threshold(sims, 101)


def test_breaks_fall_at_the_lowest_similarities_whatever_their_range():
    spans = [(i * 10, i * 10 + 9) for i in range(6)]
    low_range = [0.21, 0.05, 0.22, 0.20, 0.23]  # a model whose similarities all sit low
    threshold = percentile_threshold(low_range, 80)
    assert [list(g) for g in group_sentences(spans, low_range, threshold, 500)] == [[0, 1], [2, 3, 4, 5]]


def test_a_short_chunk_is_not_closed_at_a_similarity_drop():
    spans = [(0, 5), (6, 40), (41, 60), (61, 100)]
    sims = [0.1, 0.1, 0.1]
    assert [list(g) for g in group_sentences(spans, sims, 0.5, 500)] == [[0], [1], [2], [3]]
    # at least 30 characters: 0..5 is too short, so it joins 6..40 (40 chars), 41..60 (19) joins 61..100
    assert [list(g) for g in group_sentences(spans, sims, 0.5, 500, min_chars=30)] == [[0, 1], [2, 3]]
    # the cap still wins: 41..100 would be 59 characters
    assert [list(g) for g in group_sentences(spans, sims, 0.5, 45, min_chars=30)] == [[0, 1], [2], [3]]
    assert [list(g) for g in group_sentences(spans, sims, 0.5, 39, min_chars=30)] == [[0], [1], [2], [3]]


def test_settings_check_the_new_knobs():
    for bad in ({"breakpoint": "gradient"}, {"breakpoint_percentile": 120}, {"min_chars": -1}):
        with pytest.raises(SettingsError):
            ChunkingSettings(**bad)
    # a minimum above the cap is no conflict: the cap alone closes chunks, so max_chars can be lowered alone
    assert ChunkingSettings(max_chars=150).min_chars == 200


def test_a_minimum_above_the_cap_leaves_only_the_cap_to_close_chunks():
    spans = [(0, 5), (6, 40), (41, 60), (61, 100)]
    sims = [0.1, 0.1, 0.1]
    # 0..40 fits in 45; 0..60 does not, so 41..60 starts a chunk and 61..100 would make it 59
    assert [list(g) for g in group_sentences(spans, sims, 0.5, 45, min_chars=1000)] == [[0, 1], [2], [3]]
    assert [list(g) for g in group_sentences(spans, sims, 0.5, 100, min_chars=1000)] == [[0, 1, 2, 3]]


def test_the_default_is_the_80th_percentile_with_a_200_character_minimum():
    # chosen by the rule in docs/ingest.md (bench/results/chunking_default.json)
    default = ChunkingSettings()
    assert (default.breakpoint, default.breakpoint_percentile, default.min_chars, default.max_chars) == (
        "percentile",
        80.0,
        200,
        500,
    )


class Embedder:
    """Sentence i gets a vector whose similarity to sentence i-1 is given."""

    def __init__(self, similarities):
        self.similarities = similarities

    def embed(self, texts):
        angles = np.concatenate([[0.0], np.cumsum(np.arccos(self.similarities))])[: len(texts)]
        if len(texts) != len(self.similarities) + 1:  # the chunk pass: any unit vectors
            angles = np.zeros(len(texts))
        return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def test_the_chunker_uses_each_documents_own_percentile():
    text = "One is here. Two is here. Three is here. Four is here. Five is here."
    embedder = Embedder([0.30, 0.29, 0.10, 0.31])
    settings = ChunkingSettings(breakpoint="percentile", breakpoint_percentile=75, headers="none", min_chars=0)
    (chunked,) = chunk_documents([plain_document("d", text, "test")], embedder, settings)
    # lowest quarter of the distances: only the 0.10 drop breaks
    assert [c.text for c in chunked.chunks] == [
        "One is here. Two is here. Three is here.",
        "Four is here. Five is here.",
    ]
