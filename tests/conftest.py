"""Fixtures for tests that need the real services the test command starts.

Nothing here mocks Elasticsearch: if it is not reachable the integration
tests fail with the reason, they are not skipped.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from chunkrag_core.engines import ENGINES
from chunkrag_core.settings import Settings

SHARED = Path(os.environ.get("CHUNKRAG_SHARED", Path(__file__).resolve().parents[2] / "shared"))


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def es(settings):
    """The Elasticsearch backend (its raw client, where a test needs one, is ``es.client``)."""
    from chunkrag_core.engines.elasticsearch import ElasticsearchBackend
    from chunkrag_core.engines.errors import EngineUnavailable

    backend = ElasticsearchBackend.from_settings(settings)
    try:
        backend.health()
    except EngineUnavailable as exc:
        pytest.fail(f"{exc}. Run the tests with `make test`, which starts it.", pytrace=False)
    yield backend
    backend.close()


@pytest.fixture(scope="session", params=ENGINES)
def engine(request, settings):
    """Each search engine in turn, behind the project's backend seam: tests
    using it run once on Elasticsearch and once on OpenSearch (both real
    nodes, started by `make test`)."""
    import dataclasses

    from chunkrag_core.engines import make_backend
    from chunkrag_core.engines.errors import EngineUnavailable

    backend = make_backend(dataclasses.replace(settings, search_backend=request.param))
    try:
        backend.health()
    except EngineUnavailable as exc:
        pytest.fail(f"{exc}. Run the tests with `make test`, which starts it.", pytrace=False)
    yield backend
    backend.close()


@pytest.fixture
def engine_index(engine):
    """A new index name per test on ``engine``; deleted after."""
    name = f"test-chunkrag-{uuid.uuid4().hex[:12]}"
    yield name
    engine.delete_index(name)


@pytest.fixture(scope="session")
def embedder(settings):
    from chunkrag_core.providers import make_embedder

    return make_embedder(settings.embedder)


@pytest.fixture
def fresh_index(es):
    """A new index name per test; whatever the test created is deleted after."""
    name = f"test-chunkrag-{uuid.uuid4().hex[:12]}"
    yield name
    es.delete_index(name)


@pytest.fixture(scope="session")
def shared_eval() -> Path:
    path = SHARED / "eval"
    if not path.is_dir():
        pytest.fail(f"evaluation data not found at {path}; set CHUNKRAG_SHARED to the shared/ folder", pytrace=False)
    return path


@pytest.fixture(scope="session")
def local_model(settings):
    """The chat settings of the local model server, once it answers; the
    tests that need it fail (not skip) when it does not."""
    import httpx

    url = settings.chat.base_url.rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(
            f"the local model server is not answering at {url} ({exc}); `make test` starts it with `make llm-setup`",
            pytrace=False,
        )
    return settings.chat
