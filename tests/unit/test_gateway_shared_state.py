"""The shared-state seam without Redis: which store the setting picks, and
how the derived keys use a shared store (a double here; the real one, on a
real Redis, in tests/integration/test_gateway_shared_state.py)."""

import asyncio
import itertools

import orjson
import pytest

from chunkrag_core.settings import GatewaySettings, Settings
from chunkrag_gateway import create_app, errors
from chunkrag_gateway.derived_keys import Derived, DerivedKeys
from chunkrag_gateway.identity import ApiKey
from chunkrag_gateway.limits import RateLimiter
from chunkrag_gateway.origin import HttpResponse
from chunkrag_gateway.shared_state import (
    LocalContexts,
    RedisContexts,
    SharedRateLimiter,
    SharedRedis,
    make_stores,
)

TEAM = ApiKey("team", b"x" * 32, ("docs-*",))


class SharedDouble:
    """Stands in for SharedDerivedKeys: one record per name, compare-and-set on the id."""

    def __init__(self):
        self.records: dict[str, Derived] = {}
        self.stored: list[tuple[str, str | None]] = []

    async def load(self, name, clock):
        return self.records.get(name)

    async def store(self, name, made, replacing, clock):
        self.stored.append((made.id, replacing))
        current = self.records.get(name)
        if current is None or current.id == replacing:
            self.records[name] = made
        return self.records[name]


MADE = itertools.count(1)  # the cluster's key ids, across instances


def key_maker(sent):
    async def send(method, target, headers, body):
        sent.append((method, target))
        if method == "DELETE":
            return HttpResponse(200, (), b"{}")
        number = next(MADE)
        return HttpResponse(200, (), orjson.dumps({"id": f"id-{number}", "encoded": f"enc-{number}"}))

    return send


def keys(sent, shared, now):
    own = [(b"authorization", b"Basic own")]
    return DerivedKeys(
        key_maker(sent), own, ttl_s=3600, gateway_only_accepted=False, clock=lambda: now[0], shared=shared
    )


def test_instances_use_one_derived_key_and_replace_it_once_refused_or_due():
    shared, now, sent_a, sent_b = SharedDouble(), [0.0], [], []
    first, second = keys(sent_a, shared, now), keys(sent_b, shared, now)

    async def scenario():
        made = await first.authorization(TEAM)
        taken = await second.authorization(TEAM)
        assert made == taken and sent_b == []  # the second instance made none
        original = shared.records["team"].id
        second.forget(TEAM)  # the cluster refused it on the second instance
        replaced = await second.authorization(TEAM)
        assert replaced != made and sent_b == [("POST", "/_security/api_key")]
        assert shared.stored[-1] == (shared.records["team"].id, original)
        first.forget(TEAM)  # the first sees the refusal too: it takes the replacement, makes none
        assert await first.authorization(TEAM) == replaced and len(sent_a) == 1
        now[0] = 1801.0  # half the lifetime: due, replaced once
        renewed = await first.authorization(TEAM)
        assert await second.authorization(TEAM) == renewed != replaced and len(sent_b) == 1
        # Shared keys are left to expire: another instance may still use them.
        await first.invalidate_all()
        assert all(method == "POST" for method, _ in sent_a)

    asyncio.run(scenario())


def test_the_setting_picks_the_stores():
    local = RateLimiter(1, 2)
    contexts, limiter, redis = make_stores(Settings(), local)
    assert isinstance(contexts, LocalContexts) and limiter is local and redis is None
    shared = Settings(gateway=GatewaySettings(shared_state="redis"), redis_url="redis://127.0.0.1:1/0")
    contexts, limiter, redis = make_stores(shared, local)
    assert isinstance(contexts, RedisContexts) and isinstance(limiter, SharedRateLimiter)
    assert isinstance(redis, SharedRedis) and redis._client is None  # nothing connects before the first request
    with pytest.raises(ValueError, match="CHUNKRAG_GATEWAY_SHARED_STATE must be one of local, redis"):
        create_app(Settings(gateway=GatewaySettings(shared_state="memcached")))


class RedisDouble:
    """Stands in for SharedRedis: the binding script and MGET over a dict,
    which ``restart`` empties (Redis without persistence) and ``down`` makes
    unreachable."""

    def __init__(self):
        self.values: dict[str, str] = {}
        self.is_down = False

    def restart(self):
        self.values.clear()

    def _reachable(self):
        from chunkrag_gateway.shared_state import RedisUnavailable

        if self.is_down:
            raise RedisUnavailable("down")

    async def run(self, script, keys, args):
        self._reachable()
        current = self.values.get(keys[0])
        if current is not None and current != args[0]:
            return 0
        self.values[keys[0]] = args[0]
        return 1

    async def call(self, command, keys):
        self._reachable()
        assert command == "mget"
        return [self.values[key].encode() if key in self.values else None for key in keys]


def test_an_owner_keeps_its_ids_when_redis_loses_them_and_no_one_else_gets_them():
    """A Redis restart (no persistence) lost every binding: the owner could
    neither continue nor close what it opened. Each instance remembers the
    bindings it made or checked, accepts them for their owner and writes
    them back; another key is refused as before."""
    redis = RedisDouble()
    opened_on, other = RedisContexts(redis), RedisContexts(redis)

    async def scenario():
        await opened_on.bind("team", "scroll-1")
        await other.verify("team", ["scroll-1"])  # checked through the other instance: it remembers it too
        await opened_on.bind("team", "scroll-2")
        redis.restart()
        with pytest.raises(errors.GatewayError) as thief:
            await opened_on.verify("ops", ["scroll-1"])
        assert thief.value.status == 404
        await opened_on.verify("team", ["scroll-2"])  # remembered where it was opened: written back
        await other.verify("team", ["scroll-2"])  # so the other instance accepts it again
        await other.verify("team", ["scroll-1"])
        with pytest.raises(errors.GatewayError):
            await other.verify("ops", ["scroll-2"])
        with pytest.raises(errors.GatewayError) as unknown:
            await opened_on.verify("team", ["never-handed-out"])
        assert unknown.value.status == 404
        # Redis unreachable: what this instance remembers is decided here, the rest is a 503.
        redis.is_down = True
        await opened_on.verify("team", ["scroll-1", "scroll-2"])
        with pytest.raises(errors.GatewayError) as refused:
            await opened_on.verify("ops", ["scroll-1"])
        assert refused.value.status == 404
        with pytest.raises(errors.GatewayError) as unsure:
            await opened_on.verify("team", ["scroll-1", "scroll-9"])
        assert unsure.value.status == 503
        fresh = RedisContexts(redis)  # an instance that never saw them
        with pytest.raises(errors.GatewayError) as unseen:
            await fresh.verify("team", ["scroll-1"])
        assert unseen.value.status == 503

    asyncio.run(scenario())


def test_an_id_handed_back_again_while_redis_is_down_keeps_its_answer():
    """A scroll's next page or a PIT search answers with the id presented:
    with Redis down, the instance that remembers it does not replace that
    answer with a 503; a new id it cannot record still is."""
    redis = RedisDouble()
    contexts = RedisContexts(redis)

    async def scenario():
        await contexts.bind("team", "scroll-1")
        redis.is_down = True
        await contexts.verify("team", ["scroll-1"])
        await contexts.bind("team", "scroll-1")
        with pytest.raises(errors.GatewayError) as new:
            await contexts.bind("team", "scroll-2")
        assert new.value.status == 503

    asyncio.run(scenario())
