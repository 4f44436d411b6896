"""The query-time vector cache (search_extension.vector_cache), with a
counting embedder and a Redis stand-in; the real Redis is in
tests/integration/test_vector_cache_redis.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chunkrag_core.settings import GatewaySettings, PostSearchSettings, Settings, SettingsError, WorkerSettings
from search_extension.vector_cache import (
    CachedEmbedder,
    MemoryVectors,
    RedisVectors,
    TieredVectors,
    uses_redis,
    vector_store_for,
)


class Counting:
    """A text's vector from its characters; counts the texts embedded."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        rows = [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), 3)


def test_each_distinct_text_is_embedded_once_in_one_call():
    inner = Counting()
    embedder = CachedEmbedder(inner, MemoryVectors(100), "model-a")
    first = embedder.embed(["a", "bb", "a", "ccc"])
    assert inner.calls == [["a", "bb", "ccc"]]
    second = embedder.embed(["ccc", "dddd", "a"])
    assert inner.calls[1] == ["dddd"]  # the rest were held
    np.testing.assert_array_equal(second[0], first[3])
    np.testing.assert_array_equal(second[2], first[0])
    assert embedder.embedded == 4
    assert embedder.embed([]).shape == (0, 3)


def test_a_vector_is_kept_per_model():
    store, inner = MemoryVectors(100), Counting()
    CachedEmbedder(inner, store, "model-a").embed(["same text"])
    CachedEmbedder(inner, store, "model-b").embed(["same text"])
    assert len(inner.calls) == 2  # another model's vector is never taken
    CachedEmbedder(inner, store, "model-a").embed(["same text"])
    assert len(inner.calls) == 2


def test_memory_keeps_the_last_used():
    store = MemoryVectors(2)
    store.put_many({"a": np.ones(3), "b": np.ones(3)})
    assert set(store.get_many(["a"])) == {"a"}  # a is now the last used
    store.put_many({"c": np.ones(3)})
    assert set(store.get_many(["a", "b", "c"])) == {"a", "c"}
    assert len(store) == 2


class FakeRedis:
    """MGET and a pipeline of SETs over a dict; ``broken`` raises like a gone Redis."""

    def __init__(self):
        self.data, self.expiries, self.broken, self.calls = {}, {}, False, 0

    def mget(self, keys):
        self.calls += 1
        if self.broken:
            raise ConnectionError("Connection refused")
        return [self.data.get(k) for k in keys]

    def pipeline(self, transaction=False):
        owner = self

        class Pipe:
            def __init__(self):
                self.writes = []

            def set(self, key, value, ex=None):
                self.writes.append((key, value, ex))

            def execute(self):
                owner.calls += 1
                if owner.broken:
                    raise ConnectionError("Connection refused")
                for key, value, ex in self.writes:
                    owner.data[key], owner.expiries[key] = value, ex

        return Pipe()


def test_redis_holds_float32_bytes_with_an_expiry_and_refuses_another_size():
    client = FakeRedis()
    far = RedisVectors(client=client, ttl_s=60, dims=3)
    vector = np.array([0.25, -1.5, 3.0], dtype=np.float32)
    far.put_many({"m:1": vector})
    (key,) = client.data
    assert key == "chunkrag:vector:m:1" and client.expiries[key] == 60 and len(client.data[key]) == 12
    np.testing.assert_array_equal(far.get_many(["m:1", "m:2"])["m:1"], vector)
    client.data[key] = np.ones(4, dtype="<f4").tobytes()  # not a vector of this model's size
    assert far.get_many(["m:1"]) == {}


def test_a_failing_redis_is_a_miss_and_then_left_alone(caplog):
    client = FakeRedis()
    client.broken = True
    inner = Counting()
    embedder = CachedEmbedder(inner, TieredVectors(MemoryVectors(10), RedisVectors(client=client, dims=3)), "m")
    out = embedder.embed(["one", "two"])
    assert out.shape == (2, 3) and inner.calls == [["one", "two"]]
    assert "embedding without Redis" in caplog.text
    calls = client.calls
    embedder.embed(["three"])
    assert client.calls == calls  # held off: no wait on a Redis that is gone
    assert embedder.embed(["one"]).shape == (1, 3) and len(inner.calls) == 2  # memory still serves


def test_tiered_copies_what_redis_held_into_memory():
    client = FakeRedis()
    far = RedisVectors(client=client, dims=3)
    far.put_many({"k": np.ones(3, dtype=np.float32)})
    near = MemoryVectors(10)
    tiered = TieredVectors(near, far)
    assert set(tiered.get_many(["k", "x"])) == {"k"}
    assert set(near.get_many(["k"])) == {"k"}


def test_redis_where_the_gateway_uses_it():
    base = Settings()
    assert not uses_redis(base)
    assert isinstance(vector_store_for(base), MemoryVectors)
    shared = dataclasses.replace(base, gateway=GatewaySettings(shared_state="redis"))
    celery = dataclasses.replace(base, workers=WorkerSettings(judge="celery"))
    assert uses_redis(shared) and uses_redis(celery)
    assert isinstance(vector_store_for(shared), TieredVectors)
    memory = dataclasses.replace(shared, post_search=PostSearchSettings(vector_cache="memory"))
    assert not uses_redis(memory)
    assert uses_redis(dataclasses.replace(base, post_search=PostSearchSettings(vector_cache="redis")))


def test_bad_cache_settings_are_refused_by_name():
    with pytest.raises(SettingsError, match="CHUNKRAG_POST_SEARCH_VECTOR_CACHE must be one of"):
        Settings.from_env({"CHUNKRAG_POST_SEARCH_VECTOR_CACHE": "disk"})
    with pytest.raises(SettingsError, match="CHUNKRAG_POST_SEARCH_VECTOR_CACHE_TTL_S"):
        Settings.from_env({"CHUNKRAG_POST_SEARCH_VECTOR_CACHE_TTL_S": "0"})
