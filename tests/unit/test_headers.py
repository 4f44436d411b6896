"""Contextual chunk headers: the pure header, and what the chunker embeds."""

from __future__ import annotations

import numpy as np
import pytest

from chunkrag_core.settings import ChunkingSettings, SettingsError
from ingest_pipeline.chunker import chunk_documents, document_fingerprint
from ingest_pipeline.headers import chunk_header, embedded_text
from ingest_pipeline.sources import markdown_document, plain_document


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
        [markdown_document("bees.md", TEXT, "test", fallback_title="bees")], embedder, ChunkingSettings()
    )
    assert [c.header for c in chunked.chunks] == ["Bees", "Bees > Winter", "Bees > Winter"]
    for chunk in chunked.chunks:
        assert TEXT[chunk.start : chunk.end] == chunk.text
        assert embedded_text(chunk.header, chunk.text) in embedder.texts
    assert "Bees > Winter\n\nThey shiver to keep warm." in embedder.texts


def test_without_headers_single_sentences_reuse_their_sentence_vector():
    embedder = RecordingEmbedder()
    (chunked,) = chunk_documents(
        [plain_document("d", "Bees make honey. Wasps do not.", "test")], embedder, ChunkingSettings(headers="none")
    )
    # two sentences embedded once each; alternating vectors make two chunks, no second pass
    assert embedder.texts == ["Bees make honey.", "Wasps do not."]
    assert [c.header for c in chunked.chunks] == ["", ""]
