"""The shared-state seam without Redis: which store the setting picks, and
how the derived keys use a shared store (a double here; the real one, on a
real Redis, in tests/integration/test_gateway_shared_state.py)."""

import asyncio
import itertools

import orjson
import pytest

from chunkrag_core.settings import GatewaySettings, Settings
from chunkrag_gateway import create_app
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
