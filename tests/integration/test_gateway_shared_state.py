"""Several gateway instances sharing their state through a real Redis (one
started here, on a port of its own, and stopped to see the bounds): two
apps served on loopback, requests alternating between them as a round-robin
balancer would send them. Scrolls and PITs against the secured node in
service mode (where ids are bound to gateway keys), a caller's rate against
the open node in forward mode."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from contextlib import ExitStack

import httpx
import pytest

from chunkrag_core.settings import state_home
from chunkrag_gateway import create_app, errors
from chunkrag_gateway.derived_keys import Derived
from chunkrag_gateway.limits import RateLimiter
from chunkrag_gateway.server import serve_in_thread as serving
from chunkrag_gateway.shared_state import (
    HOLD_S,
    RedisContexts,
    SharedDerivedKeys,
    SharedRateLimiter,
    SharedRedis,
)
from local_services import redis_server

# The secured node, its indices and the scripted model server, shared with test_gateway_secured.
from tests.integration.test_gateway_secured import (  # noqa: F401
    admin,
    ids,
    indices,
    model_server,
    secured_node,
)
from tests.integration.test_gateway_service_mode import TEAM_KEY, TRUSTED_KEY, raw, service_settings

pytestmark = pytest.mark.integration

REDIS_PORT = int(os.environ.get("CHUNKRAG_SHARED_REDIS_PORT") or 6395)


@pytest.fixture(scope="module")
def own_redis():
    server = redis_server.RedisSettings(home=state_home(os.environ), port=REDIS_PORT)
    redis_server.process(server).up()
    yield server
    redis_server.process(server).down()


@pytest.fixture
def redis_up(own_redis):
    """Redis running, and empty, for the test; running again after it."""
    import redis

    redis_server.process(own_redis).up()
    redis.Redis(port=REDIS_PORT).flushdb()
    yield f"redis://127.0.0.1:{REDIS_PORT}/0"
    redis_server.process(own_redis).up()


def stop(own_redis) -> None:
    redis_server.process(own_redis).down()


def run(coroutine):
    return asyncio.run(coroutine)


def test_bindings_and_buckets_are_one_across_instances_and_bounded_when_redis_is_down(own_redis, redis_up):
    import redis

    async def scenario():
        first, second = SharedRedis(redis_up), SharedRedis(redis_up)
        bound_a, bound_b = RedisContexts(first), RedisContexts(second)
        await bound_a.bind("team", "scroll-1")
        await bound_b.verify("team", ["scroll-1"])  # bound on one, accepted on the other
        await bound_b.bind("trusted", "scroll-1")  # handed out to team first: stays theirs
        with pytest.raises(errors.GatewayError) as other:
            await bound_a.verify("trusted", ["scroll-1"])
        assert other.value.status == 404
        with pytest.raises(errors.GatewayError):
            await bound_a.verify("team", ["scroll-1", "never-bound"])
        limits = [SharedRateLimiter(r, RateLimiter(0.01, 3)) for r in (first, second)]
        for turn in range(3):
            await limits[turn % 2].acquire("key:team")
        with pytest.raises(errors.GatewayError) as limited:
            await limits[1].acquire("key:team")  # the fourth, on either instance
        assert limited.value.status == 429 and float(limited.value.headers["retry-after"]) > 1
        await limits[0].acquire("key:trusted")  # another caller has its own bucket

        stop(own_redis)
        began = time.monotonic()
        for contexts in (bound_a, bound_b):
            with pytest.raises(errors.GatewayError) as closed:
                await contexts.verify("team", ["scroll-1", "bound-elsewhere"])
            assert closed.value.status == 503 and "Redis" in closed.value.reason
            # What an instance bound or checked itself it still decides: the owner's, no one else's.
            await contexts.verify("team", ["scroll-1"])
            with pytest.raises(errors.GatewayError) as theirs:
                await contexts.verify("trusted", ["scroll-1"])
            assert theirs.value.status == 404
            with pytest.raises(errors.GatewayError) as unbound:
                await contexts.bind("team", "scroll-2")
            assert unbound.value.status == 503
        # Rate limits fall back to each instance's own buckets: the full burst each.
        for limiter in limits:
            for _ in range(3):
                await limiter.acquire("key:team")
            with pytest.raises(errors.GatewayError):
                await limiter.acquire("key:team")
        assert time.monotonic() - began < 10  # each call bounded, then held as down without waiting
        redis_server.process(own_redis).up()
        await asyncio.sleep(HOLD_S + 0.1)
        # Back, and empty (Redis keeps no data across a restart): an id no instance remembers is
        # refused; one they remember is accepted for its owner and written back; a new one works.
        with pytest.raises(errors.GatewayError) as forgotten:
            await bound_a.verify("team", ["bound-elsewhere"])
        assert forgotten.value.status == 404
        await bound_a.verify("team", ["scroll-1"])
        assert redis.Redis(port=REDIS_PORT).keys("chunkrag:gateway:ctx:*")  # written back
        third = SharedRedis(redis_up)
        await RedisContexts(third).verify("team", ["scroll-1"])  # an instance that never saw it
        await third.aclose()
        await bound_a.bind("team", "scroll-3")
        await bound_b.verify("team", ["scroll-3"])
        await first.aclose()
        await second.aclose()

    run(scenario())


def test_the_shared_derived_key_is_sealed_with_the_gateways_own_credentials(redis_up):
    import redis

    async def scenario():
        clock = time.monotonic
        first = SharedDerivedKeys(SharedRedis(redis_up), b"Basic own-credentials", 600)
        second = SharedDerivedKeys(SharedRedis(redis_up), b"Basic own-credentials", 600)
        stranger = SharedDerivedKeys(SharedRedis(redis_up), b"Basic someone-else", 600)
        made = Derived(b"ApiKey derived-secret-value", "key-id-1", clock() + 300)
        assert await first.store("team", made, None, clock) == made
        loaded = await second.load("team", clock)
        assert loaded.authorization == made.authorization and loaded.id == "key-id-1"
        assert 290 < loaded.renew_at - clock() <= 300
        assert await stranger.load("team", clock) is None  # cannot be opened without the credentials
        assert await first.load("faq", clock) is None
        # Two instances replacing the same key at once: the first to store wins, the other uses theirs.
        one = Derived(b"ApiKey one", "key-id-2", clock() + 300)
        two = Derived(b"ApiKey two", "key-id-3", clock() + 300)
        assert (await first.store("team", one, "key-id-1", clock)).id == "key-id-2"
        assert (await second.store("team", two, "key-id-1", clock)).id == "key-id-2"

    run(scenario())
    stored = b"".join(
        value
        for key in redis.Redis(port=REDIS_PORT).keys("chunkrag:gateway:derived:*")
        for value in redis.Redis(port=REDIS_PORT).hgetall(key).values()
    )
    assert b"derived-secret-value" not in stored and b"ApiKey" not in stored and b"key-id-2" in stored


@pytest.fixture
def two_service_gateways(settings, embedder, indices, redis_up):  # noqa: F811
    configured = dataclasses.replace(service_settings(settings, shared_state="redis"), redis_url=redis_up)
    with ExitStack() as stack:
        urls = [stack.enter_context(serving(create_app(configured, embedder=embedder))) for _ in range(2)]
        yield urls


def test_a_scroll_and_a_pit_opened_on_one_instance_continue_on_the_other(two_service_gateways, indices):  # noqa: F811
    (first, second), (allowed, _) = two_service_gateways, indices
    page = raw(first, "POST", f"/{allowed}/_search?scroll=1m", TEAM_KEY, json={"size": 2, "sort": ["_doc"]})
    assert page.status_code == 200, page.text
    scroll_id = page.json()["_scroll_id"]
    more = raw(second, "POST", "/_search/scroll", TEAM_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
    assert more.status_code == 200, more.text
    assert len(more.json()["hits"]["hits"]) == 2 and ids(more.json()) != ids(page.json())
    # Another key, on either instance, gets Elasticsearch's answer to an unknown id.
    for url in (first, second):
        other = raw(url, "POST", "/_search/scroll", TRUSTED_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
        assert other.status_code == 404, other.text
    cleared = raw(second, "DELETE", "/_search/scroll", TEAM_KEY, json={"scroll_id": scroll_id})
    assert cleared.status_code == 200 and cleared.json()["succeeded"] is True

    opened = raw(second, "POST", f"/{allowed}/_pit?keep_alive=1m", TEAM_KEY)
    assert opened.status_code == 200, opened.text
    pit = opened.json()["id"]
    body = {"size": 3, "pit": {"id": pit, "keep_alive": "1m"}, "query": {"match_all": {}}}
    searched = raw(first, "POST", "/_search", TEAM_KEY, json=body)
    assert searched.status_code == 200 and len(searched.json()["hits"]["hits"]) == 3, searched.text
    assert raw(first, "POST", "/_search", TRUSTED_KEY, json=body).status_code == 404
    closed = raw(first, "DELETE", "/_pit", TEAM_KEY, json={"id": pit})
    assert closed.status_code == 200 and closed.json()["succeeded"] is True


def test_with_redis_down_a_bound_id_is_refused_unless_the_instance_saw_it(two_service_gateways, indices, own_redis):  # noqa: F811
    (first, second), (allowed, _) = two_service_gateways, indices
    page = raw(first, "POST", f"/{allowed}/_search?scroll=1m", TEAM_KEY, json={"size": 2})
    assert page.status_code == 200, page.text
    scroll_id = page.json()["_scroll_id"]
    stop(own_redis)
    refused = raw(second, "POST", "/_search/scroll", TEAM_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
    assert refused.status_code == 503 and "Redis" in refused.json()["error"]["reason"], refused.text
    assert refused.headers["retry-after"] == "1"
    # The instance that opened it remembers whose it is: the owner goes on, another key is refused.
    more = raw(first, "POST", "/_search/scroll", TEAM_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
    assert more.status_code == 200 and len(more.json()["hits"]["hits"]) == 2, more.text
    stolen = raw(first, "POST", "/_search/scroll", TRUSTED_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
    assert stolen.status_code == 404, stolen.text
    for url in (first, second):
        # Searches that continue nothing still answer: only the binding needs Redis.
        assert raw(url, "POST", f"/{allowed}/_count", TEAM_KEY, json={}).status_code == 200


def test_after_a_redis_restart_the_owner_continues_and_closes_what_it_opened(two_service_gateways, indices, own_redis):  # noqa: F811
    """Redis keeps nothing across a restart (persistence off): every binding
    was lost, and the owner could close none of its scrolls and PITs."""
    (first, second), (allowed, _) = two_service_gateways, indices
    page = raw(first, "POST", f"/{allowed}/_search?scroll=1m", TEAM_KEY, json={"size": 2, "sort": ["_doc"]})
    scroll_id = page.json()["_scroll_id"]
    pit = raw(first, "POST", f"/{allowed}/_pit?keep_alive=1m", TEAM_KEY).json()["id"]
    stop(own_redis)
    redis_server.process(own_redis).up()
    time.sleep(HOLD_S + 0.1)
    body = {"size": 1, "pit": {"id": pit, "keep_alive": "1m"}, "query": {"match_all": {}}}
    for url in (first, second):  # another key: refused everywhere, as before
        assert raw(url, "POST", "/_search", TRUSTED_KEY, json=body).status_code == 404
        stolen = raw(url, "POST", "/_search/scroll", TRUSTED_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
        assert stolen.status_code == 404
    # An instance that never saw them cannot tell whose they are yet.
    assert raw(second, "POST", "/_search", TEAM_KEY, json=body).status_code == 404
    # The one that handed them out can, and writes them back: then every instance can.
    searched = raw(first, "POST", "/_search", TEAM_KEY, json=body)
    assert searched.status_code == 200 and len(searched.json()["hits"]["hits"]) == 1, searched.text
    more = raw(first, "POST", "/_search/scroll", TEAM_KEY, json={"scroll": "1m", "scroll_id": scroll_id})
    assert more.status_code == 200 and len(more.json()["hits"]["hits"]) == 2, more.text
    closed = raw(second, "DELETE", "/_pit", TEAM_KEY, json={"id": searched.json().get("pit_id", pit)})
    assert closed.status_code == 200 and closed.json()["succeeded"] is True, closed.text
    cleared = raw(second, "DELETE", "/_search/scroll", TEAM_KEY, json={"scroll_id": more.json()["_scroll_id"]})
    assert cleared.status_code == 200 and cleared.json()["succeeded"] is True, cleared.text


def test_a_callers_rate_is_counted_once_across_two_instances(settings, redis_up, own_redis):
    configured = dataclasses.replace(
        settings,
        redis_url=redis_up,
        gateway=dataclasses.replace(settings.gateway, shared_state="redis", rate_per_s=0.01, rate_burst=6),
    )
    with serving(create_app(configured)) as first, serving(create_app(configured)) as second:
        statuses = [httpx.get(f"{url}/_count", timeout=30).status_code for url in [first, second] * 4]
        assert statuses == [200] * 6 + [429] * 2  # six in all, however they were spread
        stop(own_redis)
        # Redis down: each instance counts on its own (a full burst each), never refuses everyone.
        down = [httpx.get(f"{url}/_count", timeout=30).status_code for url in [first, second] * 7]
        assert down.count(200) == 12 and down[-2:] == [429, 429]
