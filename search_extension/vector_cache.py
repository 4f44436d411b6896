"""Vectors of texts already embedded, kept by the text's sha256 and the
model that made them, so a document read once is not embedded again.

A text's vector depends on the text and the model alone (the shipped
embedder multiplies in float: ``chunkrag_core.providers.local_minilm``), so
a sentence embedded for one search serves every later one. Post-search
keeps them in this process (:class:`MemoryVectors`, the least recently used
going first) and, where the gateway uses Redis anyway
(``CHUNKRAG_GATEWAY_SHARED_STATE=redis`` or ``CHUNKRAG_WORKER_JUDGE=celery``,
or ``CHUNKRAG_POST_SEARCH_VECTOR_CACHE=redis``), in Redis too
(:class:`RedisVectors`): every gateway instance, and the next start of this
one, finds what any of them embedded.

Redis is an optimisation, never a dependency: a failed read is a miss and a
failed write is skipped (logged, then Redis is left alone for a while).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Mapping, Protocol, Sequence

import numpy as np
from cachetools import LRUCache

from chunkrag_core.providers import Embedder
from chunkrag_core.providers.embedding import embedder_identity
from chunkrag_core.settings import Settings, redact_url

log = logging.getLogger(__name__)

# Texts (sentences, headers) whose vectors one process keeps: ~1.6 kB each
# at 384 dimensions, ~50 MB when full.
MEMORY_ENTRIES = 32768
REDIS_PREFIX = "chunkrag:vector:"
# One Redis call waits at most this; after a failure Redis is not asked
# for this long (a Redis that is gone would cost the wait on every search).
REDIS_TIMEOUT_S = 0.5
REDIS_HOLD_S = 30.0


class VectorStore(Protocol):
    """Vectors by key; a key not held is simply absent from the answer."""

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]: ...

    def put_many(self, vectors: Mapping[str, np.ndarray]) -> None: ...


class MemoryVectors:
    """The last ``entries`` vectors used, in this process (thread-safe)."""

    def __init__(self, entries: int = MEMORY_ENTRIES):
        self._vectors: LRUCache[str, np.ndarray] = LRUCache(maxsize=max(1, entries))
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            # LRUCache.get marks an entry as used, as a lookup should.
            found = {key: self._vectors.get(key) for key in keys}
        return {key: vector for key, vector in found.items() if vector is not None}

    def put_many(self, vectors: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            for key, vector in vectors.items():
                self._vectors[key] = vector

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)


class RedisVectors:
    """Vectors in Redis as raw little-endian float32, ``ttl_s`` after they
    were stored; one MGET per lookup and one pipelined write per store.
    ``client`` (a redis-py client) is made from ``url`` on first use."""

    def __init__(
        self,
        *,
        url: str | None = None,
        client=None,
        ttl_s: int = 86_400,
        dims: int | None = None,
        prefix: str = REDIS_PREFIX,
    ):
        if client is None and url is None:
            raise ValueError("RedisVectors needs a redis client or a url")
        self._url, self._client, self.ttl_s, self._dims = url, client, int(ttl_s), dims
        self.prefix = prefix
        self._lock = threading.Lock()
        self._skip_until = 0.0

    @property
    def client(self):
        with self._lock:
            if self._client is None:
                import redis

                self._client = redis.Redis.from_url(
                    self._url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
                )
            return self._client

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        if not keys or time.monotonic() < self._skip_until:
            return {}
        try:
            raw = self.client.mget([self.prefix + key for key in keys])
        except Exception as exc:  # noqa: BLE001 - any cache failure is a miss, by design
            self._failed("read", exc)
            return {}
        found = {}
        for key, value in zip(keys, raw):
            if value is None:
                continue
            vector = np.frombuffer(value, dtype="<f4")
            # A value of another size is not a vector of this model: a miss.
            if vector.size and (self._dims is None or vector.size == self._dims):
                found[key] = vector.astype(np.float32)
        return found

    def put_many(self, vectors: Mapping[str, np.ndarray]) -> None:
        if not vectors or time.monotonic() < self._skip_until:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, vector in vectors.items():
                pipe.set(
                    self.prefix + key,
                    np.asarray(vector, dtype="<f4").tobytes(),
                    ex=self.ttl_s if self.ttl_s > 0 else None,
                )
            pipe.execute()
        except Exception as exc:  # noqa: BLE001
            self._failed("write", exc)

    def _failed(self, action: str, exc: Exception) -> None:
        self._skip_until = time.monotonic() + REDIS_HOLD_S
        log.warning(
            "vector cache %s at %s failed (%s: %s); embedding without Redis for %g s",
            action,
            redact_url(self._url) if self._url else "redis",
            type(exc).__name__,
            exc,
            REDIS_HOLD_S,
        )


class TieredVectors:
    """``near`` first (this process), then ``far`` (Redis); what ``far``
    held is copied to ``near``, what is stored goes to both."""

    def __init__(self, near: VectorStore, far: VectorStore):
        self.near, self.far = near, far

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found = self.near.get_many(keys)
        missing = [key for key in keys if key not in found]
        if missing:
            fetched = self.far.get_many(missing)
            self.near.put_many(fetched)
            found.update(fetched)
        return found

    def put_many(self, vectors: Mapping[str, np.ndarray]) -> None:
        self.near.put_many(vectors)
        self.far.put_many(vectors)


class CachedEmbedder:
    """``embedder`` behind ``store``: each distinct text not held is embedded
    once, all of them in one call (so the embedder length-sorts them into
    tight batches), and kept by ``model`` (the model's identity) and the
    text's sha256."""

    def __init__(self, embedder: Embedder, store: VectorStore, model: str):
        self._embedder, self._store = embedder, store
        self._model = hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
        self.embedded = 0  # texts sent to the embedder, for the benchmarks

    def key(self, text: str) -> str:
        return f"{self._model}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return self._embedder.embed([])
        key_of = {text: self.key(text) for text in dict.fromkeys(texts)}
        held = self._store.get_many(list(key_of.values()))
        new = [text for text, key in key_of.items() if key not in held]
        if new:
            fresh = np.asarray(self._embedder.embed(new), dtype=np.float32)
            self.embedded += len(new)
            made = {key_of[text]: vector for text, vector in zip(new, fresh)}
            self._store.put_many(made)
            held.update(made)
        return np.stack([held[key_of[text]] for text in texts])


def uses_redis(settings: Settings) -> bool:
    """Whether post-search keeps vectors in Redis: asked for, or (``auto``)
    where the gateway uses Redis anyway."""
    wanted = settings.post_search.vector_cache
    if wanted != "auto":
        return wanted == "redis"
    return settings.gateway.shared_state == "redis" or settings.workers.judge == "celery"


def vector_store_for(settings: Settings, *, entries: int = MEMORY_ENTRIES) -> VectorStore:
    """This process's vectors, with Redis behind them where ``uses_redis``."""
    memory = MemoryVectors(entries)
    if not uses_redis(settings):
        return memory
    far = RedisVectors(
        url=settings.redis_url, ttl_s=settings.post_search.vector_cache_ttl_s, dims=settings.embedder.dims
    )
    return TieredVectors(memory, far)


def cached_embedder(embedder: Embedder, settings: Settings, store: VectorStore | None = None) -> CachedEmbedder:
    """``embedder`` behind ``store`` (default: ``vector_store_for(settings)``),
    keyed by the configured model's identity."""
    return CachedEmbedder(
        embedder, store if store is not None else vector_store_for(settings), embedder_identity(settings.embedder)
    )
