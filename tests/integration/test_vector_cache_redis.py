"""Query-time vectors kept in the real Redis: a document one gateway
instance embedded is not embedded again by another (a fresh process's
memory, the same Redis), the passages are the same, and a Redis that cannot
be reached costs nothing but the cache."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest
import redis

from chunkrag_core.settings import PostSearchSettings
from ingest_pipeline.source_fields import SourceField
from search_extension.passages import QueryTimePassages
from search_extension.vector_cache import REDIS_PREFIX, CachedEmbedder, MemoryVectors, RedisVectors, TieredVectors

pytestmark = pytest.mark.integration

BODY = (
    "The Normans gave their name to Normandy, a region in France. They descended from Norse raiders. "
    "Their identity emerged in the first half of the 10th century. The duchy was founded in 911.\n\n"
    "Rollo swore fealty to King Charles III. The Normans adopted the Romance language of the land. "
    "They were famed for their martial spirit and their piety. Norman architecture spread across Europe."
)


class Counted:
    def __init__(self, inner):
        self.inner, self.texts = inner, 0

    def embed(self, texts):
        self.texts += len(texts)
        return self.inner.embed(texts)


@pytest.fixture
def redis_settings(settings):
    return dataclasses.replace(settings, post_search=PostSearchSettings(vector_cache="redis", vector_cache_ttl_s=120))


@pytest.fixture
def client(settings):
    found = redis.Redis.from_url(settings.redis_url)
    yield found
    found.close()


def _field(text: str = BODY) -> SourceField:
    return SourceField("kb-vector-cache", f"doc-{uuid.uuid4().hex[:8]}", "body", text, title="Normans")


def test_a_second_instance_takes_the_vectors_from_redis(redis_settings, embedder, client):
    # Sentences of their own, so no earlier run's vectors are in Redis.
    text = BODY.replace(". ", f" (copy {uuid.uuid4().hex[:8]}). ")
    field = _field(text)
    first, second = Counted(embedder), Counted(embedder)
    one = QueryTimePassages(first, redis_settings).passages([field])
    two = QueryTimePassages(second, redis_settings).passages([field])  # empty memory, the same Redis
    assert first.texts >= 6 and second.texts == 0
    ones, twos = one[field.companion_id], two[field.companion_id]
    assert [(c.start, c.end, c.text) for c in ones] == [(c.start, c.end, c.text) for c in twos]
    for a, b in zip(ones, twos):
        np.testing.assert_array_equal(a.vector, b.vector)
    # Each vector is stored with its expiry.
    keys = list(client.scan_iter(match=REDIS_PREFIX + "*", count=1000))
    assert keys and 0 < client.ttl(keys[0]) <= 86_400


def test_vectors_round_trip_as_float32_and_expire(settings, client):
    store = RedisVectors(url=settings.redis_url, ttl_s=30, dims=4)
    key = f"test:{uuid.uuid4().hex}"
    vector = np.array([0.1, -0.2, 0.3, 1e-7], dtype=np.float32)
    store.put_many({key: vector})
    try:
        np.testing.assert_array_equal(store.get_many([key, key + "-absent"])[key], vector)
        assert 0 < client.ttl(REDIS_PREFIX + key) <= 30
        assert RedisVectors(url=settings.redis_url, dims=5).get_many([key]) == {}  # another size: a miss
    finally:
        client.delete(REDIS_PREFIX + key)


def test_a_redis_that_cannot_be_reached_is_only_a_miss(settings, embedder):
    gone = RedisVectors(url="redis://127.0.0.1:1/0", dims=384)
    counted = Counted(embedder)
    cached = CachedEmbedder(counted, TieredVectors(MemoryVectors(100), gone), "test-model")
    vectors = cached.embed(["Rollo swore fealty.", "The duchy was founded in 911."])
    np.testing.assert_allclose(vectors, embedder.embed(["Rollo swore fealty.", "The duchy was founded in 911."]))
    assert counted.texts == 2
    cached.embed(["Rollo swore fealty."])
    assert counted.texts == 2  # this process's memory still serves


def test_two_gateways_sharing_redis_embed_a_document_once(settings, embedder, engine):
    """Post-search through two gateway instances with the shared state in
    Redis: the second finds the first one's vectors and embeds only the query."""
    import contextlib

    import httpx

    from chunkrag_gateway import create_app
    from chunkrag_gateway.server import serve_in_thread as serving
    from tests.support.plain_index import plain_index

    tag = uuid.uuid4().hex[:8]
    body = BODY.replace(". ", f" (copy {tag}). ")  # every sentence new to Redis
    mapping = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}
    configured = dataclasses.replace(
        settings,
        search_backend=engine.engine,
        gateway=dataclasses.replace(settings.gateway, shared_state="redis"),
    )
    first, second = Counted(embedder), Counted(embedder)
    search = {"query": {"match": {"body": "when was the duchy founded"}}, "ext": {"chunkrag": {"answer": False}}}
    with plain_index(engine, "test-vector-cache", mapping, {"normans": {"title": "Normans", "body": body}}) as index:
        with contextlib.ExitStack() as stack:
            urls = [stack.enter_context(serving(create_app(configured, embedder=e))) for e in (first, second)]
            answers = [httpx.post(f"{url}/{index}/_search", json=search, timeout=120) for url in urls]
    assert [a.status_code for a in answers] == [200, 200], [a.text[:300] for a in answers]
    kept = [[(p["start"], p["end"]) for p in a.json()["hits"]["hits"][0]["_chunkrag"]["passages"]] for a in answers]
    assert kept[0] and kept[0] == kept[1]
    assert first.texts > 4 and second.texts == 1, (first.texts, second.texts)  # the second: the query alone
