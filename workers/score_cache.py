"""A Redis-backed :class:`ScoreCache`: a score judged once for a (model,
method, query, chunk, stage) is not paid for again by any worker.

The cache is an optimisation, never a dependency: when Redis misbehaves a
lookup is a miss and a store is skipped, so judging carries on.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from chunkrag_core.redaction import redact_url

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "chunkrag:score:"
# After a failure the cache is skipped for this long: with Redis down, every
# lookup would otherwise wait out the connect timeout (a listwise batch makes
# nine lookups).
RETRY_AFTER_FAILURE_S = 30.0


def hashed_key(long_key: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Fixed-length Redis key for a cache key that holds a whole query and
    chunk text (hundreds of bytes; and it need not be readable in Redis)."""
    return prefix + hashlib.sha256(long_key.encode("utf-8")).hexdigest()


class RedisScoreCache:
    """``client`` is a redis-py client; :meth:`from_url` defers creating one
    until the first lookup, so building the cache opens no connection."""

    def __init__(
        self, client=None, ttl_s: int = 7 * 24 * 3600, prefix: str = DEFAULT_PREFIX, *, url: str | None = None
    ):
        if client is None and url is None:
            raise ValueError("RedisScoreCache needs a redis client or a url")
        self._client = client
        self._url = url
        self._lock = threading.Lock()
        self.ttl_s = int(ttl_s)
        self.prefix = prefix
        self._skip_until = 0.0

    @classmethod
    def from_url(cls, url: str, ttl_s: int, prefix: str = DEFAULT_PREFIX) -> RedisScoreCache:
        return cls(ttl_s=ttl_s, prefix=prefix, url=url)

    @property
    def client(self):
        with self._lock:
            if self._client is None:
                import redis

                # Short timeouts: a slow cache must not cost more than the model call it saves.
                self._client = redis.Redis.from_url(self._url, socket_connect_timeout=2, socket_timeout=2)
            return self._client

    def key(self, long_key: str) -> str:
        return hashed_key(long_key, self.prefix)

    def get(self, key: str) -> float | None:
        if time.monotonic() < self._skip_until:
            return None
        try:
            raw = self.client.get(self.key(key))
        except Exception as exc:  # noqa: BLE001 - any cache failure is a miss, by design
            self._warn("read", exc)
            return None
        if raw is None:
            return None
        try:
            return float(raw)
        except ValueError:
            log.warning("score cache entry %s holds %r, not a number; ignoring it", self.key(key), raw[:40])
            return None

    def set(self, key: str, value: float) -> None:
        if time.monotonic() < self._skip_until:
            return
        try:
            self.client.set(self.key(key), repr(float(value)), ex=self.ttl_s if self.ttl_s > 0 else None)
        except Exception as exc:  # noqa: BLE001
            self._warn("write", exc)

    def _warn(self, action: str, exc: Exception) -> None:
        self._skip_until = time.monotonic() + RETRY_AFTER_FAILURE_S
        where = redact_url(self._url) if self._url else "redis"
        log.warning(
            "score cache %s at %s failed (%s: %s); judging without the cache for %g s",
            action,
            where,
            type(exc).__name__,
            exc,
            RETRY_AFTER_FAILURE_S,
        )
