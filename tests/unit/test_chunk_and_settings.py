import dataclasses

import numpy as np
import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.settings import Settings, SettingsError, redact_url


def test_chunk_is_frozen_and_ids_are_deterministic():
    chunk = Chunk(doc_id="doc-1", position=3, text="Hello.", start=10, end=16, vector=[0.1, 0.2])
    assert chunk.chunk_id == "doc-1:3"
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "changed"
    with pytest.raises(ValueError):
        chunk.vector[0] = 1.0  # the vector is read-only too
    assert chunk.vector.dtype == np.float32


def test_with_score_returns_a_new_chunk():
    chunk = Chunk(doc_id="d", position=0, text="t", start=0, end=1)
    scored = chunk.with_score(0.7, relevance=0.9)
    assert chunk.score is None and dict(chunk.stage_scores) == {}
    assert scored.score == 0.7 and dict(scored.stage_scores) == {"relevance": 0.9}


def test_bad_chunks_are_rejected():
    with pytest.raises(ValueError):
        Chunk(doc_id="", position=0, text="", start=0, end=0)
    with pytest.raises(ValueError):
        Chunk(doc_id="d", position=0, text="", start=5, end=2)


def test_settings_from_env_overrides_and_validates():
    settings = Settings.from_env({"ES_URL": "http://u:secret@es:9200", "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD": "0.6", "CHUNKRAG_RETRIEVAL_SIZE": "20"})
    assert settings.chunking.similarity_threshold == 0.6 and settings.chunking.max_chars == 500
    assert settings.retrieval.size == 20
    assert settings.es_url_for_display == "http://u:***@es:9200"
    with pytest.raises(SettingsError, match="CHUNKRAG_CHUNK_MAX_CHARS"):
        Settings.from_env({"CHUNKRAG_CHUNK_MAX_CHARS": "lots"})
    assert redact_url("http://es:9200") == "http://es:9200"


def test_local_service_ports_shape_the_default_urls():
    settings = Settings.from_env({"CHUNKRAG_ES_PORT": "9210", "CHUNKRAG_REDIS_PORT": "6390"})
    assert settings.es_url == "http://127.0.0.1:9210" and settings.redis_url == "redis://127.0.0.1:6390/0"
    assert Settings.from_env({}).es_url == "http://127.0.0.1:9200"


def test_the_chat_model_follows_the_local_model_port_unless_a_url_is_given():
    from chunkrag_core.settings import Settings

    assert Settings.from_env({}).chat.base_url == "http://127.0.0.1:8088/v1"
    assert Settings.from_env({"CHUNKRAG_LLM_PORT": "18088"}).chat.base_url == "http://127.0.0.1:18088/v1"
    assert Settings.from_env({"CHUNKRAG_LLM_PORT": "18088", "CHUNKRAG_CHAT_BASE_URL": "https://x/v1"}).chat.base_url == "https://x/v1"
