"""What several gateway instances must agree on, kept in Redis: which
gateway key each scroll and PIT id belongs to (``context_ids.py``), each
caller's rate-limit bucket and each caller's filtered searches in the
gateway (``limits.py``, which serves callers without one first). With
``CHUNKRAG_GATEWAY_SHARED_STATE=redis`` N instances behind a round-robin
balancer behave as one: a scroll opened through one is continued through
another, and a caller's rate is counted once. ``local`` (the default) keeps
both in the process, as before.

The Redis is the one REDIS_URL names (the Celery broker's). Each operation
is one round trip: a Lua script for the bucket (tokens and clock read and
written at once, with Redis's own clock, so the instances' clocks do not
matter) and for a binding (owner, its list of ids, the cap on it).

When Redis cannot be reached (each call waits at most ``TIMEOUT_S``, and
after a failure the next ``HOLD_S`` do not wait at all):

- binding fails closed: an id whose owner cannot be checked is refused with
  503 (unless this instance remembers it: ``RedisContexts``), and an answer
  that opens a scroll or PIT whose id cannot be recorded is refused with 503
  too (an id no other instance could later accept);
- rate limits fall back to this instance's own buckets (``RateLimiter``):
  each instance then grants the full rate, so N instances allow at most N
  times it until Redis is back;
- a caller's filtered searches are counted in this instance alone: a
  caller whose searches run only in other instances is served here as one
  without any.

In service mode on Elasticsearch the instances also share each gateway
key's derived API key (``SharedDerivedKeys``): Elasticsearch binds a scroll
to the API key that opened it, so a scroll opened through one instance can
be continued through another only with the same key. The key is kept in
Redis encrypted (AES-GCM) under a key derived from the gateway's own cluster
credentials, which every instance holds and Redis never sees: whoever reads
Redis cannot search with it. With Redis down, an instance makes its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import math
import os
import time
import uuid
from typing import Callable, Iterable

import orjson

from chunkrag_core.settings import GATEWAY_SHARED_STATES
from chunkrag_gateway import errors
from chunkrag_gateway.context_ids import CAPACITY, ContextOwners, context_missing
from chunkrag_gateway.derived_keys import Derived
from chunkrag_gateway.limits import RateLimiter, rate_limited

log = logging.getLogger("chunkrag.gateway")

MODES = GATEWAY_SHARED_STATES
# One Redis call waits at most this (connect, then answer): a request
# should not hang on a Redis that is gone.
TIMEOUT_S = 0.5
# After a failure, Redis is taken as down for this long without trying
# (a blackholed Redis would otherwise cost TIMEOUT_S on every request).
HOLD_S = 1.0
# A binding is kept this long after its last use: Elasticsearch's longest
# keep-alive for a scroll or PIT (search.max_keep_alive) is 24 h by default.
BINDING_TTL_S = 86_400
PREFIX = "chunkrag:gateway:"
# Beyond the longest a filtered search may last, before its count in Redis
# is dropped: a search whose instance died is forgotten then.
LEASE_MARGIN_S = 30.0

# Redis 6 replicates a script verbatim unless told to replicate its effects,
# and then refuses writes after TIME (a no-op from Redis 7 on).
_EFFECTS = "if redis.replicate_commands then redis.replicate_commands() end\n"

# KEYS: the id's binding, the owner's ids. ARGV: owner, ttl, capacity.
# 1 bound (or already this owner's), 0 handed out to another owner first.
_BIND = (
    _EFFECTS
    + """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
local now = redis.call('TIME')
redis.call('ZADD', KEYS[2], tonumber(now[1]) + tonumber(now[2]) / 1e6, KEYS[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], excess)
  for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
end
return 1
"""
)

# KEYS: the bucket. ARGV: rate, burst, ttl. Returns {1 or 0, tokens left}.
# The token arithmetic of RateLimiter.take, on Redis's clock.
_TAKE = (
    _EFFECTS
    + """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1e6
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'seen')
local tokens, seen = tonumber(held[1]), tonumber(held[2])
if tokens == nil or seen == nil then tokens, seen = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - seen) * rate)
local taken = 0
if tokens >= 1 then tokens, taken = tokens - 1, 1 end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'seen', tostring(now))
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {taken, tostring(tokens)}
"""
)


# KEYS: the caller's searches. ARGV: this search's member (this instance's
# prefix, a number), its lease in seconds, the prefix. Drops the leases that
# ended, adds this one; returns how many searches of other instances remain.
_ENTER = (
    _EFFECTS
    + """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
local others = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(member, 1, #ARGV[3]) ~= ARGV[3] then others = others + 1 end
end
return others
"""
)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"CHUNKRAG_GATEWAY_SHARED_STATE must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def _digest(text: str) -> str:
    """Ids run to kilobytes and identities name callers: keys hold their hash."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RedisUnavailable(Exception):
    """Redis did not answer (or was held as down)."""


class SharedRedis:
    """One lazily made asyncio Redis client per event loop, with the
    bounded waits and the hold after a failure. Nothing connects until the
    first call."""

    def __init__(self, url: str, clock: Callable[[], float] = time.monotonic):
        self.url, self.clock = url, clock
        self._client = None
        self._loop = None
        self._down_until = 0.0
        self._scripts: dict[str, object] = {}

    def _ready(self):
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
            from redis.exceptions import ConnectionError as RedisConnectionError

            self._client = redis.asyncio.Redis.from_url(
                self.url,
                socket_timeout=TIMEOUT_S,
                socket_connect_timeout=TIMEOUT_S,
                # A Redis restarted since the last call closed every pooled
                # connection: one more try, on a new one, at once (bounded
                # with the rest by the wait in ``run`` and ``call``).
                retry=Retry(NoBackoff(), 1),
                retry_on_error=[RedisConnectionError],
            )
            self._loop, self._scripts = loop, {}
        return self._client

    async def run(self, script: str, keys: list[str], args: list) -> object:
        if self.clock() < self._down_until:
            raise RedisUnavailable("held as down after a recent failure")
        client = self._ready()
        registered = self._scripts.get(script)
        if registered is None:
            registered = self._scripts[script] = client.register_script(script)
        try:
            return await asyncio.wait_for(registered(keys=keys, args=args), 2 * TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - whatever the client raised, Redis is down for us
            self._down_until = self.clock() + HOLD_S
            raise RedisUnavailable(str(exc) or type(exc).__name__) from exc

    async def call(self, command: str, *args) -> object:
        """One plain command (``mget``, ``hmget``), bounded as ``run``."""
        if self.clock() < self._down_until:
            raise RedisUnavailable("held as down after a recent failure")
        client = self._ready()
        try:
            return await asyncio.wait_for(getattr(client, command)(*args), 2 * TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            self._down_until = self.clock() + HOLD_S
            raise RedisUnavailable(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None


def unavailable_binding() -> errors.GatewayError:
    return errors.GatewayError(
        503,
        "unavailable_exception",
        "the gateway cannot check which key this scroll or PIT id belongs to right now "
        "(its shared state in Redis is not reachable); retry later",
        headers={"retry-after": "1"},
    )


class LocalContexts:
    """The bindings in this process (``ContextOwners``), behind the same
    awaitable calls as the shared ones."""

    def __init__(self, owners: ContextOwners | None = None):
        self.owners = owners if owners is not None else ContextOwners()

    async def bind(self, owner: str, context_id: str) -> None:
        self.owners.remember(owner, context_id)

    async def verify(self, owner: str, ids: Iterable[str]) -> None:
        self.owners.check(owner, ids)


class RedisContexts:
    """The bindings in Redis: ``<prefix>ctx:<sha256(id)>`` holds the owner's
    name for BINDING_TTL_S after its last binding, and the owner's sorted
    set of them keeps at most ``capacity`` (its oldest dropped first).

    Each instance also remembers the bindings it made or confirmed
    (``ContextOwners``, the same cap per key), because Redis may lose them
    (a restart without persistence): an id Redis no longer knows that this
    instance remembers for the presenting key is accepted and written back,
    so every instance knows it again; one it remembers for another key is
    refused (404). With Redis unreachable, an id remembered here for the
    presenting key is accepted, another key's refused, any other 503. An
    owner therefore keeps continuing and closing what it opened through the
    instances that served it. A binding never changes owner (the first key
    an id was handed out to keeps it), so the memory cannot let anyone else in."""

    def __init__(self, redis: SharedRedis, capacity: int = CAPACITY, ttl_s: int = BINDING_TTL_S):
        self.redis, self.capacity, self.ttl_s = redis, capacity, ttl_s
        self.remembered = ContextOwners(capacity)

    async def bind(self, owner: str, context_id: str) -> None:
        keys = [f"{PREFIX}ctx:{_digest(context_id)}", f"{PREFIX}ids:{_digest(owner)}"]
        try:
            bound = await self.redis.run(_BIND, keys, [owner, self.ttl_s, self.capacity])
        except RedisUnavailable as exc:
            log.warning("shared state: could not bind a scroll or PIT id to gateway key [%s]: %s", owner, exc)
            if self.remembered.owner_of(context_id) == owner:
                return  # handed back again (a scroll's next page, a PIT search): known here already
            raise unavailable_binding() from None
        if int(bound):
            self.remembered.remember(owner, context_id)

    async def verify(self, owner: str, ids: Iterable[str]) -> None:
        wanted = list(ids)
        if not wanted:
            return
        try:
            owners = await self.redis.call("mget", [f"{PREFIX}ctx:{_digest(i)}" for i in wanted])
        except RedisUnavailable as exc:
            if all(self.remembered.owner_of(i) == owner for i in wanted):
                return  # bound to this key, as remembered here
            if any(self.remembered.owner_of(i) not in (None, owner) for i in wanted):
                raise context_missing(owner) from None
            log.warning("shared state: could not check scroll or PIT ids of gateway key [%s]: %s", owner, exc)
            raise unavailable_binding() from None
        lost = [i for i, found in zip(wanted, owners) if found is None]
        if any(found is not None and found != owner.encode("utf-8") for found in owners):
            raise context_missing(owner)
        if any(self.remembered.owner_of(i) != owner for i in lost):
            raise context_missing(owner)
        for context_id in lost:  # Redis lost them (a restart): every instance knows them again
            log.info("shared state: a scroll or PIT id of gateway key [%s] written back to Redis", owner)
            await self.bind(owner, context_id)
        for context_id in wanted:
            self.remembered.remember(owner, context_id)


class SharedRateLimiter:
    """``RateLimiter``'s buckets in Redis; this instance's own when Redis
    cannot be reached."""

    def __init__(self, redis: SharedRedis, local: RateLimiter):
        self.redis, self.local = redis, local
        self.rate, self.burst = local.rate, local.burst
        # A bucket left alone this long is full again: Redis forgets it.
        self.ttl_s = max(1, math.ceil(self.burst / self.rate) + 1) if self.rate > 0 else 1

    @property
    def enabled(self) -> bool:
        return self.local.enabled

    def take(self, caller: str) -> None:
        self.local.take(caller)

    async def acquire(self, caller: str) -> None:
        if not self.enabled:
            return
        try:
            taken, tokens = await self.redis.run(
                _TAKE, [f"{PREFIX}rate:{_digest(caller)}"], [repr(self.rate), self.burst, self.ttl_s]
            )
        except RedisUnavailable:
            # Counted here alone until Redis is back (each instance its full rate).
            self.local.take(caller)
            return
        if not int(taken):
            raise rate_limited(self.rate, self.burst, (1.0 - float(tokens)) / self.rate)


class SharedSearches:
    """Each caller's filtered searches in every instance, in Redis: a sorted
    set per caller (``<prefix>searches:<sha256(identity)>``) of one member
    per search, from the moment it enters the gateway until it leaves,
    scored by the end of its lease (``lease_s``: longer than any search may
    last, so a search of an instance that died is forgotten then). Entering
    is one round trip, which says how many searches the caller has in other
    instances; leaving is sent without waiting for it. With Redis down, no
    search of another instance is seen (this instance's own count alone)."""

    def __init__(self, redis: SharedRedis, lease_s: float):
        self.redis, self.lease_s = redis, max(1.0, lease_s)
        # This instance's members begin with it: the others' are counted apart.
        self.prefix = f"{uuid.uuid4().hex[:16]}:"
        self._numbers = itertools.count()
        self._leaving: set[asyncio.Task] = set()  # held until sent (the loop keeps only weak references)

    def _key(self, caller: str) -> str:
        return f"{PREFIX}searches:{_digest(caller)}"

    async def enter(self, caller: str) -> tuple[str | None, int]:
        """This search's member (None when Redis could not record it) and
        how many searches ``caller`` has in the other instances."""
        member = f"{self.prefix}{next(self._numbers)}"
        try:
            others = await self.redis.run(_ENTER, [self._key(caller)], [member, repr(self.lease_s), self.prefix])
        except RedisUnavailable as exc:
            log.warning("shared state: could not count the filtered searches of a caller: %s", exc)
            return None, 0
        return member, int(others)

    def leave(self, caller: str, member: str) -> None:
        task = asyncio.ensure_future(self._leave(self._key(caller), member))
        self._leaving.add(task)
        task.add_done_callback(self._leaving.discard)

    async def _leave(self, key: str, member: str) -> None:
        try:
            await self.redis.call("zrem", key, member)
        except RedisUnavailable:
            pass  # its lease ends it


# KEYS: the gateway key's shared derived key. ARGV: the id it replaces ("" for
# none), the new id, its sealed record, ttl. Stores the new key unless another
# instance replaced the old one first; returns the sealed record now kept.
_STORE_KEY = """
local current = redis.call('HGET', KEYS[1], 'id')
if (not current) or current == ARGV[1] then
  redis.call('HSET', KEYS[1], 'id', ARGV[2], 'sealed', ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  return ARGV[3]
end
return redis.call('HGET', KEYS[1], 'sealed')
"""


class SharedDerivedKeys:
    """Each gateway key's derived API key, one for every instance, in Redis
    under ``<prefix>derived:<sha256(name)>``: its id in the clear (an id is
    no credential) and the rest sealed with AES-GCM, the gateway key's name
    as associated data (a record cannot be moved to another key)."""

    def __init__(self, redis: SharedRedis, own_credentials: bytes, ttl_s: float):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        if not own_credentials:
            raise ValueError("sharing derived keys needs the gateway's own cluster credentials")
        secret = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=b"chunkrag-gateway", info=b"shared derived api keys"
        ).derive(own_credentials)
        self.redis, self.ttl_s, self._aead = redis, ttl_s, AESGCM(secret)

    def _seal(self, name: str, derived: Derived, clock: Callable[[], float]) -> bytes:
        # Renewal as a wall-clock time: the instances' monotonic clocks differ.
        record = {"authorization": derived.authorization.decode("ascii"), "id": derived.id}
        record["renew_at"] = time.time() + (derived.renew_at - clock())
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, orjson.dumps(record), name.encode("utf-8"))

    def _open(self, name: str, sealed: bytes | None, clock: Callable[[], float]) -> Derived | None:
        if not sealed:
            return None
        from cryptography.exceptions import InvalidTag

        try:
            record = orjson.loads(self._aead.decrypt(sealed[:12], sealed[12:], name.encode("utf-8")))
        except (InvalidTag, ValueError):
            # Sealed under other credentials (the gateway's account changed): replaced.
            return None
        remaining = record["renew_at"] - time.time()
        return Derived(record["authorization"].encode("ascii"), record["id"], clock() + remaining)

    async def load(self, name: str, clock: Callable[[], float]) -> Derived | None:
        """The key every instance uses for ``name``; None when there is none
        yet, or Redis cannot be reached (then this instance makes its own)."""
        try:
            _id, sealed = await self.redis.call("hmget", f"{PREFIX}derived:{_digest(name)}", ["id", "sealed"])
        except RedisUnavailable as exc:
            log.warning("shared state: could not read the shared derived key of gateway key [%s]: %s", name, exc)
            return None
        return self._open(name, sealed, clock)

    async def store(self, name: str, made: Derived, replacing: str | None, clock: Callable[[], float]) -> Derived:
        """Share ``made`` unless another instance replaced ``replacing``
        first: then theirs, which every instance uses from now on."""
        sealed = self._seal(name, made, clock)
        try:
            kept = await self.redis.run(
                _STORE_KEY,
                [f"{PREFIX}derived:{_digest(name)}"],
                [replacing or "", made.id, sealed, max(1, int(self.ttl_s))],
            )
        except RedisUnavailable as exc:
            log.warning("shared state: could not share the derived key of gateway key [%s]: %s", name, exc)
            return made
        theirs = self._open(name, kept, clock)
        return theirs if theirs is not None and theirs.id != made.id else made


def make_stores(
    settings, rate_limiter: RateLimiter
) -> tuple[LocalContexts | RedisContexts, object, SharedRedis | None]:
    """The binding store and the rate limiter CHUNKRAG_GATEWAY_SHARED_STATE
    asks for, and the Redis client they share (None when local)."""
    if check_mode(settings.gateway.shared_state) == "local":
        return LocalContexts(), rate_limiter, None
    redis = SharedRedis(settings.redis_url)
    return RedisContexts(redis), SharedRateLimiter(redis, rate_limiter), redis


def shared_searches(settings, redis: SharedRedis | None) -> SharedSearches | None:
    """The count of each caller's filtered searches in every instance, when
    the state is shared (None: this instance's count alone). A search's
    lease outlasts the longest it may be in the gateway: its wait for a
    place of its caller's own, then its deadline."""
    if redis is None:
        return None
    longest = settings.gateway.retry_after_s + settings.es_request_timeout_s
    longest += settings.max_budget_s + 2 * settings.chat.timeout_s
    return SharedSearches(redis, longest + LEASE_MARGIN_S)
