"""Chinese and Japanese text is chunked within a quarter of the length caps
(ingest_pipeline.sentences.length_caps): the default embedder cannot tell
their topics apart, so the caps are what groups their sentences. English
(and every other language) keeps its chunks and its fingerprints."""

from __future__ import annotations

import dataclasses

from chunkrag_core.settings import ChunkingSettings, Settings
from ingest_pipeline.chunker import chunk_documents, document_fingerprint
from ingest_pipeline.context_cache import cache_key
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.sentences import dense_script_rule, length_caps, splitter_language
from ingest_pipeline.sources import plain_document
from tests.support.languages import ENGLISH, SEVEN_TOPICS


def test_the_caps_of_a_dense_script_are_a_quarter_of_the_settings():
    assert length_caps("chinese", 500, 200) == (125, 50)
    assert length_caps("japanese", 500, 200) == (125, 50)
    assert length_caps("chinese", 40, 0) == (20, 0)  # never below the least cap the settings allow
    for language in ("english", "german", "french", "spanish"):
        assert length_caps(language, 500, 200) == (500, 200)


def test_a_chinese_text_on_seven_topics_is_not_one_passage(embedder):
    chunks = chunk_documents([plain_document("zh", SEVEN_TOPICS, "zh")], embedder, ChunkingSettings())[0].chunks
    assert len(SEVEN_TOPICS) < 500  # one chunk under the settings' own caps
    # The model's cosines of consecutive sentences on one topic and across two are alike
    # (0.61 and 0.62 here), so the caps decide: 191 characters in two chunks or more, none over 125.
    assert len(chunks) >= 2
    assert all(len(c.text) <= 125 for c in chunks)
    assert "".join(c.text for c in chunks) == SEVEN_TOPICS  # every sentence in one chunk, in order


def test_english_chunks_and_fingerprints_are_as_before(embedder):
    settings = Settings()
    document = plain_document("en", ENGLISH, "en")
    shaping = shaping_of(settings)
    sections = [(s.path, s.start, s.end) for s in document.sections]
    # The fingerprint is the one every earlier version made of it.
    assert document_fingerprint(document, shaping) == cache_key("", ENGLISH, sections, {}, shaping)[:32]
    capped = chunk_documents([document], embedder, settings.chunking)[0].chunks
    same = chunk_documents([document], embedder, dataclasses.replace(settings.chunking, language="english"))[0].chunks
    assert [(c.start, c.end) for c in capped] == [(c.start, c.end) for c in same]
    assert any(len(c.text) > 125 for c in capped)


def test_only_a_dense_script_documents_fingerprint_changes():
    auto, english = (
        shaping_of(Settings()),
        shaping_of(dataclasses.replace(Settings(), chunking=ChunkingSettings(language="english"))),
    )
    assert splitter_language(auto) == "auto" and splitter_language(english) == "english"
    assert dense_script_rule(SEVEN_TOPICS, auto) and not dense_script_rule(ENGLISH, auto)
    assert not dense_script_rule(SEVEN_TOPICS, english)  # split by English Punkt: as before
    chinese = plain_document("zh", SEVEN_TOPICS, "zh")
    sections = [(s.path, s.start, s.end) for s in chinese.sections]
    assert document_fingerprint(chinese, auto) != cache_key("", SEVEN_TOPICS, sections, {}, auto)[:32]
