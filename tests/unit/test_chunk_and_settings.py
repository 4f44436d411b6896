import dataclasses

import numpy as np
import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import Settings, SettingsError, default_state_home, state_home


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
    settings = Settings.from_env(
        {
            "ES_URL": "http://u:secret@es:9200",
            "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD": "0.6",
            "CHUNKRAG_RETRIEVAL_SIZE": "20",
        }
    )
    assert settings.chunking.similarity_threshold == 0.6 and settings.chunking.max_chars == 500
    assert settings.retrieval.size == 20
    assert settings.es_url_for_display == "http://u:***@es:9200"
    with pytest.raises(SettingsError, match="CHUNKRAG_CHUNK_MAX_CHARS"):
        Settings.from_env({"CHUNKRAG_CHUNK_MAX_CHARS": "lots"})
    assert redact_url("http://es:9200") == "http://es:9200"


def test_the_engine_request_timeout_is_read_and_must_be_positive_seconds():
    assert Settings.from_env({}).es_request_timeout_s == 30.0
    assert Settings.from_env({"ES_REQUEST_TIMEOUT_S": "7.5"}).es_request_timeout_s == 7.5
    for bad in ("soon", "0", "-3", "nan", "inf"):
        with pytest.raises(SettingsError, match=rf"ES_REQUEST_TIMEOUT_S='{bad}' is not a number of seconds above 0"):
            Settings.from_env({"ES_REQUEST_TIMEOUT_S": bad})


def test_the_app_knows_services_by_url_only():
    # Defaults: the local services on their default ports. The ports
    # local_services starts them on are its own settings, not the app's.
    ports = {
        "CHUNKRAG_ES_PORT": "9210",
        "CHUNKRAG_REDIS_PORT": "6390",
        "CHUNKRAG_OPENSEARCH_PORT": "9555",
        "CHUNKRAG_LLM_PORT": "18088",
    }
    for env in ({}, ports):
        settings = Settings.from_env(env)
        assert (settings.es_url, settings.opensearch_url) == ("http://127.0.0.1:9200", "http://127.0.0.1:9201")
        assert settings.redis_url == "redis://127.0.0.1:6379/0"
        assert settings.chat.base_url == "http://127.0.0.1:8088/v1"
    urls = {"ES_URL": "http://es:9210", "REDIS_URL": "redis://r:6390/0", "CHUNKRAG_CHAT_BASE_URL": "https://x/v1"}
    settings = Settings.from_env(urls)
    assert (settings.es_url, settings.redis_url) == ("http://es:9210", "redis://r:6390/0")
    assert settings.chat.base_url == "https://x/v1"


def test_each_knob_has_one_name():
    assert Settings.from_env({"CHUNKRAG_SCALES": "128,2000"}).chunking.scales == (128, 2000)
    assert Settings.from_env({"CHUNKRAG_CHUNK_SCALES": "128,2000"}).chunking.scales == ()
    sigv4 = {"OPENSEARCH_AUTH": "sigv4", "OPENSEARCH_URL": "https://os.example"}
    assert Settings.from_env({**sigv4, "AWS_REGION": "eu-west-1"}).opensearch_aws_region == "eu-west-1"
    with pytest.raises(SettingsError, match="set AWS_REGION"):
        Settings.from_env({**sigv4, "AWS_DEFAULT_REGION": "eu-west-1"})
    # The former name still works for one release, with a warning.
    with pytest.warns(FutureWarning, match="OPENSEARCH_AWS_REGION is deprecated.*set AWS_REGION"):
        assert Settings.from_env({**sigv4, "OPENSEARCH_AWS_REGION": "us-east-2"}).opensearch_aws_region == "us-east-2"


def test_the_state_home_is_the_checkouts_unless_installed(tmp_path):
    """Without CHUNKRAG_HOME, a CLI run from a checkout must find the services
    `make` started in its .chunkrag; an installed package keeps its state
    under the user's cache."""
    checkout, user = tmp_path / "checkout", tmp_path / "user"
    (checkout / "local_services").mkdir(parents=True)
    site_packages = tmp_path / "site-packages"
    site_packages.mkdir()
    assert default_state_home(site_packages, user) == user / ".cache" / "chunkrag"
    (checkout / "pyproject.toml").write_text("[project]\n")
    assert default_state_home(checkout, user) == checkout / ".chunkrag"
    assert state_home({"CHUNKRAG_HOME": str(tmp_path / "mine")}) == tmp_path / "mine"


def test_the_gateway_settings_refuse_what_the_gateway_cannot_run_with():
    from chunkrag_core.settings import GatewaySettings

    for env, variable in (
        ({"CHUNKRAG_GATEWAY_AUTH": "servic"}, "CHUNKRAG_GATEWAY_AUTH"),
        ({"CHUNKRAG_GATEWAY_MAX_BODY_BYTES": "-1"}, "CHUNKRAG_GATEWAY_MAX_BODY_BYTES"),
        ({"CHUNKRAG_GATEWAY_MAX_BODY_BYTES": "0"}, "CHUNKRAG_GATEWAY_MAX_BODY_BYTES"),
        ({"CHUNKRAG_GATEWAY_BODY_TIMEOUT_S": "nan"}, "CHUNKRAG_GATEWAY_BODY_TIMEOUT_S"),
        ({"CHUNKRAG_GATEWAY_RATE_PER_S": "-0.5"}, "CHUNKRAG_GATEWAY_RATE_PER_S"),
        ({"CHUNKRAG_GATEWAY_PASSTHROUGH": "reads"}, "CHUNKRAG_GATEWAY_PASSTHROUGH"),
        ({"CHUNKRAG_GATEWAY_SHARED_STATE": "memcached"}, "CHUNKRAG_GATEWAY_SHARED_STATE"),
        ({"CHUNKRAG_GATEWAY_FILTER_NICE": "20"}, "CHUNKRAG_GATEWAY_FILTER_NICE"),
        ({"CHUNKRAG_GATEWAY_METRICS_PORT": "70000"}, "CHUNKRAG_GATEWAY_METRICS_PORT"),
    ):
        with pytest.raises(SettingsError, match=variable):
            Settings.from_env(env)
    # Zero where zero means "none": no rate limit, no per-address cap, no queue.
    assert GatewaySettings(rate_per_s=0, max_connections_per_address=0, max_queued=0).max_queued == 0


def test_redacted_urls_lose_passwords_and_secret_parameters():
    assert redact_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("redis://h:6379/0?password=pw&db=2") == "redis://h:6379/0?password=***&db=2"
    assert (
        redact_url("https://a/v1?api_key=k,https://b/v1?token=t") == "https://a/v1?api_key=***,https://b/v1?token=***"
    )
    assert redact_url("https://a/v1?size=3") == "https://a/v1?size=3"
