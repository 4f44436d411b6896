"""Contextual chunk headers: the pure header, and what the chunker embeds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chunkrag_core.settings import ChunkingSettings, Settings, SettingsError
from ingest_pipeline.chunker import chunk_documents, document_fingerprint
from ingest_pipeline.headers import chunk_header, embedded_text, mixed_vector, word_count
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.sources import markdown_document, plain_document

# The tests below break chunks at θ (an alternating embedder makes every
# sentence its own chunk), not at the default's percentile and minimum size.
THETA = {"breakpoint": "threshold", "min_chars": 0}


def test_header_is_title_then_section_path_without_repeating_the_title():
    assert chunk_header("Guide", ("Guide", "Vectors", "Quantisation")) == "Guide > Vectors > Quantisation"
    assert chunk_header("Nike 10-K", ("Risk  factors",)) == "Nike 10-K > Risk factors"
    assert chunk_header("Nike 10-K", ("Risk factors",), "title") == "Nike 10-K"
    assert chunk_header("Nike 10-K", ("Risk factors",), "section") == "Risk factors"
    assert chunk_header("Nike 10-K", ("Risk factors",), "none") == ""
    # No title and no sections (an evaluation pool): no header at all.
    assert chunk_header("", ()) == ""
    with pytest.raises(ValueError, match="unknown header mode"):
        chunk_header("t", (), "summary")


def test_embedded_text_puts_the_header_first():
    assert embedded_text("Bees > Winter", "They shiver.") == "Bees > Winter\n\nThey shiver."
    assert embedded_text("", "They shiver.") == "They shiver."


def test_header_mode_is_validated_and_part_of_the_fingerprint():
    with pytest.raises(SettingsError):
        ChunkingSettings(headers="llm")
    doc = plain_document("d", "One. Two.", "test", title="T")
    assert document_fingerprint(doc, str(ChunkingSettings())) != document_fingerprint(
        doc, str(ChunkingSettings(headers="none"))
    )


class RecordingEmbedder:
    """Unit vectors by text length; remembers every text it embedded."""

    def __init__(self):
        self.texts = []

    def embed(self, texts):
        self.texts.extend(texts)
        return np.array(
            [[1.0, 0.0] if i % 2 == 0 else [0.0, 1.0] for i, _ in enumerate(texts)], dtype=np.float32
        ).reshape(len(texts), 2)


TEXT = "# Bees\n\nBees make honey.\n\n## Winter\n\nThey shiver to keep warm. The queen stays inside.\n"


def test_chunks_carry_their_header_and_are_embedded_with_it_while_text_stays_exact():
    embedder = RecordingEmbedder()
    (chunked,) = chunk_documents(
        [markdown_document("bees.md", TEXT, "test", fallback_title="bees")],
        embedder,
        ChunkingSettings(vectors="reembed", **THETA),
    )
    assert [c.header for c in chunked.chunks] == ["Bees", "Bees > Winter", "Bees > Winter"]
    for chunk in chunked.chunks:
        assert TEXT[chunk.start : chunk.end] == chunk.text
        assert embedded_text(chunk.header, chunk.text) in embedder.texts
    assert "Bees > Winter\n\nThey shiver to keep warm." in embedder.texts


def test_without_headers_single_sentences_reuse_their_sentence_vector():
    embedder = RecordingEmbedder()
    (chunked,) = chunk_documents(
        [plain_document("d", "Bees make honey. Wasps do not.", "test")],
        embedder,
        ChunkingSettings(headers="none", **THETA),
    )
    # two sentences embedded once each; alternating vectors make two chunks, no second pass
    assert embedder.texts == ["Bees make honey.", "Wasps do not."]
    assert [c.header for c in chunked.chunks] == ["", ""]


def test_mixed_vector_is_the_normalised_sentence_mean_plus_the_weighted_header():
    two = np.array([[1.0, 0.0], [0.0, 1.0]])
    # no header: the mean [0.5, 0.5] made unit length
    np.testing.assert_allclose(mixed_vector(two, None, 0.5), [0.70710678, 0.70710678], atol=1e-6)
    # one sentence and a header at weight 0.5: [1, 0.5] / sqrt(1.25)
    np.testing.assert_allclose(
        mixed_vector(np.array([[1.0, 0.0]]), np.array([0.0, 1.0]), 0.5), [0.89442719, 0.4472136], atol=1e-6
    )
    # the header is made unit length first: [0.7071 + 1, 0.7071] / 1.847759
    np.testing.assert_allclose(mixed_vector(two, np.array([2.0, 0.0]), 1.0), [0.92387953, 0.38268343], atol=1e-6)
    # mean [0.9, 0.3] -> [0.948683, 0.316228]; + [0, 0.5] -> [0.948683, 0.816228] / 1.251490
    np.testing.assert_allclose(
        mixed_vector(np.array([[1.0, 0.0], [0.8, 0.6]]), np.array([0.0, 1.0]), 0.5), [0.75804293, 0.6522047], atol=1e-6
    )
    # weight 0 leaves the header out
    np.testing.assert_allclose(mixed_vector(two, np.array([1.0, 0.0]), 0.0), [0.70710678, 0.70710678], atol=1e-6)


def test_mixed_vector_of_sentences_that_cancel_out_is_not_divided_by_zero():
    opposite = np.array([[1.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_array_equal(mixed_vector(opposite, None, 0.5), [0.0, 0.0])
    np.testing.assert_allclose(mixed_vector(opposite, np.array([0.0, 3.0]), 0.5), [0.0, 1.0], atol=1e-6)
    with pytest.raises(ValueError, match="non-empty"):
        mixed_vector(np.zeros((0, 2)), None, 0.5)


def test_mix_embeds_each_sentence_and_each_distinct_header_once_and_no_chunk_again():
    embedder = RecordingEmbedder()
    (chunked,) = chunk_documents(
        [markdown_document("bees.md", TEXT, "test", fallback_title="bees")],
        embedder,
        ChunkingSettings(vectors="mix", header_weight=0.5, **THETA),
    )
    # sentences first, then the two distinct headers, in one call; alternating
    # vectors: sentences [1,0] [0,1] [1,0], headers "Bees" [0,1], "Bees > Winter" [1,0]
    assert embedder.texts == [
        "Bees make honey.",
        "They shiver to keep warm.",
        "The queen stays inside.",
        "Bees",
        "Bees > Winter",
    ]
    assert [c.header for c in chunked.chunks] == ["Bees", "Bees > Winter", "Bees > Winter"]
    np.testing.assert_allclose(
        [c.vector for c in chunked.chunks],
        [[0.89442719, 0.4472136], [0.4472136, 0.89442719], [1.0, 0.0]],
        atol=1e-6,
    )


class TableEmbedder:
    """Vectors looked up by text."""

    def __init__(self, table):
        self.table, self.texts = table, []

    def embed(self, texts):
        self.texts.extend(texts)
        return np.array([self.table[t] for t in texts], dtype=np.float32).reshape(len(texts), 2)


def test_mix_averages_the_sentences_of_a_longer_chunk():
    embedder = TableEmbedder({"Bees make honey.": [1.0, 0.0], "Bees make wax.": [0.8, 0.6], "Hive": [0.0, 1.0]})
    doc = plain_document("d", "Bees make honey. Bees make wax.", "test", title="Hive")
    mean_half = ChunkingSettings(headers="title", vectors="mix", header_weight=0.5, mix_pooling="mean")
    (chunked,) = chunk_documents([doc], embedder, mean_half)
    # cosine 0.8 = θ keeps the two sentences together in one chunk
    (chunk,) = chunked.chunks
    assert chunk.sentence_count == 2 and chunk.header == "Hive"
    np.testing.assert_allclose(chunk.vector, [0.75804293, 0.6522047], atol=1e-6)
    assert embedder.texts == ["Bees make honey.", "Bees make wax.", "Hive"]
    # weight 0: the header is stored but not embedded at all
    embedder = TableEmbedder(embedder.table)
    (chunked,) = chunk_documents([doc], embedder, dataclasses.replace(mean_half, header_weight=0))
    np.testing.assert_allclose(chunked.chunks[0].vector, [0.9486833, 0.31622777], atol=1e-6)
    assert embedder.texts == ["Bees make honey.", "Bees make wax."] and chunked.chunks[0].header == "Hive"


def test_mix_by_default_weights_sentences_by_their_words_and_the_header_by_a_quarter():
    embedder = TableEmbedder(
        {"Bees make honey.": [1.0, 0.0], "Bees make a lot of wax.": [0.8, 0.6], "Hive": [0.0, 1.0]}
    )
    doc = plain_document("d", "Bees make honey. Bees make a lot of wax.", "test", title="Hive")
    (chunked,) = chunk_documents([doc], embedder, ChunkingSettings(headers="title"))
    # 3 and 6 words: (3 [1, 0] + 6 [0.8, 0.6]) / 9 = [0.8667, 0.4] -> [0.907959, 0.419058];
    # + 0.25 [0, 1] -> [0.907959, 0.669058] / 1.127843
    (chunk,) = chunked.chunks
    np.testing.assert_allclose(chunk.vector, [0.80504, 0.59322], atol=1e-5)
    assert embedder.texts == ["Bees make honey.", "Bees make a lot of wax.", "Hive"]


def test_mixed_vector_weights_the_mean_by_word_counts():
    two = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(mixed_vector(two, None, 0.5, [3, 1]), [0.9486833, 0.31622777], atol=1e-6)
    np.testing.assert_allclose(mixed_vector(two, None, 0.5, [2, 2]), mixed_vector(two, None, 0.5), atol=1e-6)
    np.testing.assert_allclose(mixed_vector(two, np.array([0.0, 2.0]), 1.0, [3, 1]), [0.58471, 0.81124], atol=1e-5)
    with pytest.raises(ValueError, match="one positive word count per sentence"):
        mixed_vector(two, None, 0.5, [1])
    with pytest.raises(ValueError, match="one positive word count per sentence"):
        mixed_vector(two, None, 0.5, [1, 0])
    assert (word_count("Bees  make\nhoney."), word_count(" ")) == (3, 1)


def test_reembed_embeds_the_header_and_the_chunk_again():
    table = {"Bees make honey.": [1.0, 0.0], "Bees make wax.": [0.8, 0.6]}
    embedder = TableEmbedder({**table, "Hive\n\nBees make honey. Bees make wax.": [0.0, 1.0]})
    doc = plain_document("d", "Bees make honey. Bees make wax.", "test", title="Hive")
    (chunked,) = chunk_documents([doc], embedder, ChunkingSettings(headers="title", vectors="reembed"))
    np.testing.assert_allclose(chunked.chunks[0].vector, [0.0, 1.0])
    assert embedder.texts[-1] == "Hive\n\nBees make honey. Bees make wax."


def test_vector_settings_are_validated_read_from_the_environment_and_fingerprinted():
    with pytest.raises(SettingsError, match="vectors must be one of"):
        ChunkingSettings(vectors="average")
    with pytest.raises(SettingsError, match="header_weight"):
        ChunkingSettings(header_weight=-0.1)
    chunking = Settings.from_env({"CHUNKRAG_CHUNK_VECTORS": "reembed", "CHUNKRAG_CHUNK_HEADER_WEIGHT": "0.75"}).chunking
    assert (chunking.vectors, chunking.header_weight) == ("reembed", 0.75)
    with pytest.raises(SettingsError, match="CHUNKRAG_CHUNK_HEADER_WEIGHT"):
        Settings.from_env({"CHUNKRAG_CHUNK_HEADER_WEIGHT": "heavy"})
    with pytest.raises(SettingsError, match="mix_pooling must be one of"):
        ChunkingSettings(mix_pooling="max")
    assert Settings.from_env({"CHUNKRAG_CHUNK_MIX_POOLING": "mean"}).chunking.mix_pooling == "mean"
    default = Settings().chunking
    assert (default.vectors, default.header_weight, default.mix_pooling) == ("mix", 0.25, "length")
    doc = plain_document("d", "One. Two.", "test", title="T")

    def shaping(vectors, weight, pooling="mean"):
        chunking = ChunkingSettings(vectors=vectors, header_weight=weight, mix_pooling=pooling)
        return shaping_of(Settings(chunking=chunking))

    variants = (("mix", 0.5, "mean"), ("mix", 0.25, "mean"), ("mix", 0.25, "length"), ("reembed", 0.5, "mean"))
    assert len({document_fingerprint(doc, shaping(*v)) for v in variants}) == 4
    # reembed leaves fingerprints made before the setting existed as they were, and so
    # does mean pooling those made before pooling was a setting
    assert "vectors" not in shaping("reembed", 0.75) and shaping("reembed", 0.75) == shaping("reembed", 0.5, "length")
    assert shaping("mix", 0.25).endswith("|vectors=mix:0.25")
    assert shaping_of(Settings()).endswith("|vectors=mix:0.25:length")
