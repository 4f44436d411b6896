"""Multi-scale ensembling at ingest: scale grouping, ids, fingerprints,
stale deletes per scale (no cluster)."""

import dataclasses

import numpy as np
import pytest

from chunkrag_core.chunk import Chunk, chunk_id_for
from chunkrag_core.engines import schema
from chunkrag_core.settings import ChunkingSettings, Settings, SettingsError, parse_scales
from ingest_pipeline.chunker import ChunkedDocument, chunk_documents
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.scales import group_to_size, target_chars
from ingest_pipeline.sources import plain_document
from ingest_pipeline.writer import StoredDocument, document_actions


class CountingEmbedder:
    """Each text a unit vector of its own (consecutive sentences never similar)."""

    dims = 4

    def __init__(self):
        self.texts = []

    def embed(self, texts):
        self.texts.extend(texts)
        return np.array([np.eye(4)[len(t) % 4] for t in texts], dtype=np.float32)


def test_group_to_size_cuts_where_the_next_sentence_would_pass_the_target():
    spans = [(0, 40), (41, 80), (81, 130), (131, 140)]
    # 0..80 is 80 characters: fits 100; adding 81..130 makes 130: new chunk.
    assert group_to_size(spans, 100) == [range(0, 2), range(2, 4)]
    assert group_to_size(spans, 140) == [range(0, 4)]
    # A sentence longer than the target is a chunk alone, never dropped.
    assert group_to_size(spans, 30) == [range(0, 1), range(1, 2), range(2, 3), range(3, 4)]
    assert group_to_size([], 100) == []


def test_a_token_is_four_characters():
    assert target_chars(128) == 512 and target_chars(2000) == 8000


def test_scales_parse_sorted_and_distinct_and_default_is_off():
    assert ChunkingSettings().scales == ()
    assert parse_scales("512, 128,512") == (128, 512)
    assert parse_scales("default") == (128, 512, 2000)
    assert parse_scales("off") == ()
    assert Settings.from_env({"CHUNKRAG_SCALES": "128,2000"}).chunking.scales == (128, 2000)
    with pytest.raises(SettingsError):
        parse_scales("big")
    with pytest.raises(SettingsError):
        parse_scales([0])


def test_scale_ids_are_unique_per_scale_and_base_ids_unchanged():
    assert chunk_id_for("a", 3) == "a:3"
    assert chunk_id_for("a", 3, 128) == "a:3@128"
    assert Chunk(doc_id="a", position=3, text="", start=0, end=0, scale=512).chunk_id == "a:3@512"


def test_scales_enter_the_fingerprint_only_when_set():
    base = Settings()
    scaled = dataclasses.replace(base, chunking=dataclasses.replace(base.chunking, scales=(128,)))
    assert "scales" not in shaping_of(base)
    assert "|scales=128" in shaping_of(scaled) and shaping_of(scaled).replace("|scales=128", "") == shaping_of(base)


def test_chunker_adds_each_scale_with_exact_text_offsets_and_leads():
    text = "One short sentence here. " * 12 + "\n\nA second paragraph follows now. " * 6
    document = plain_document("d", text.strip(), "test")
    settings = ChunkingSettings(headers="none", scales=(32, 128))
    (item,) = chunk_documents([document], CountingEmbedder(), settings)
    by_scale = {}
    for chunk in item.chunks:
        by_scale.setdefault(chunk.scale, []).append(chunk)
    assert sorted(by_scale) == [0, 32, 128]
    for scale, chunks in by_scale.items():
        assert [c.position for c in chunks] == list(range(len(chunks)))
        assert len({c.chunk_id for c in chunks}) == len(chunks)
        rebuilt = ""
        for chunk in chunks:
            assert document.text[chunk.start : chunk.end] == chunk.text
            rebuilt += chunk.lead + chunk.text
            if scale:
                assert len(chunk.text) <= target_chars(scale) or chunk.sentence_count == 1
        assert rebuilt == document.text  # every scale covers the document once
    # The text is 503 characters: one chunk at 128 tokens (512 characters);
    # at 32 tokens (128 characters) five 24-character sentences fit (124),
    # and a chunk runs across blank lines: two of them and two 33-character
    # paragraphs make 119.
    assert len(document.text) == 503 and len(by_scale[128]) == 1
    assert [c.sentence_count for c in by_scale[32]] == [5, 5, 4, 3, 1]


def chunked_at_scales(counts):
    document = plain_document("doc", "x" * 100, "test")
    chunks = tuple(
        Chunk(doc_id="doc", position=p, text="x", start=p, end=p + 1, vector=np.ones(2), scale=scale)
        for scale, n in counts.items()
        for p in range(n)
    )
    return ChunkedDocument(document, chunks, 3, "fp")


def ops(actions):
    return [(a["_op_type"], a["_id"]) for a in actions]


def test_stale_chunks_are_deleted_per_scale_and_dropped_scales_entirely():
    stored = StoredDocument(("old",), 2 + 3 + 1, 1, 6, {0: 1, 128: 2, 512: 0})
    actions = ops(document_actions("i", chunked_at_scales({0: 1, 128: 2}), stored))
    assert actions == [
        ("index", "doc:0"),
        ("index", "doc:0@128"),
        ("index", "doc:1@128"),
        ("delete", "doc:1"),
        ("delete", "doc:2@128"),
        ("delete", "doc:0@512"),
    ]


def test_every_chunk_declares_the_count_of_all_scales():
    sources = [a["_source"] for a in document_actions("i", chunked_at_scales({0: 2, 128: 1}), None)]
    assert [s[schema.DOC_CHUNK_COUNT] for s in sources] == [3, 3, 3]
    assert [s[schema.SCALE] for s in sources] == [0, 0, 128]


def test_completeness_counts_every_scale():
    assert StoredDocument(("a",), 5, 2, 5, {0: 2, 128: 1}).is_complete("a")
    assert not StoredDocument(("a",), 4, 2, 5, {0: 2, 128: 1}).is_complete("a")
    # Old stored state (no per-scale breakdown) means base chunks only.
    assert StoredDocument(("a",), 3, 2, 3).scale_max_positions == {0: 2}


def test_hits_without_a_scale_are_base_chunks():
    hit = {"_source": {"doc_id": "d", "position": 1, "text": "t", "start": 0, "end": 1}}
    assert schema.chunk_from_hit(hit).scale == 0
    assert schema.chunk_from_hit({"_source": {**hit["_source"], "scale": 512}}).scale == 512


def test_base_filter_excludes_only_larger_scales():
    assert schema.base_scale_filter() == {"bool": {"must_not": [{"range": {"scale": {"gt": 0}}}]}}
    assert schema.scale_filter(512) == {"term": {"scale": 512}}
    assert schema.scale_filter(0) == schema.base_scale_filter()
