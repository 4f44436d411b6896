"""Aliases pointing outside a gateway key's patterns (service mode with
CHUNKRAG_GATEWAY_REFUSE_FOREIGN_ALIASES), with the cluster's _resolve/index
answers given by a double."""

from __future__ import annotations

import asyncio

import pytest

from chunkrag_gateway import errors
from chunkrag_gateway.aliases import CACHE_S, ForeignAliases
from chunkrag_gateway.identity import ApiKey, Caller

TEAM = Caller(key=ApiKey("team", b"x" * 32, ("docs-*",)), identity="key:team")
EVERY = Caller(key=ApiKey("every", b"y" * 32, ("*",)), identity="key:every")
ANSWERS = {
    "docs-1": {"indices": [{"name": "docs-1"}], "aliases": []},
    "docs-all": {"aliases": [{"name": "docs-all", "indices": ["docs-1", "secret"]}]},
    "docs-own": {"aliases": [{"name": "docs-own", "indices": ["docs-1", "docs-2"]}]},
    "docs-*": {"indices": [{"name": "docs-1"}], "aliases": [{"name": "docs-all", "indices": ["docs-1", "secret"]}]},
}


class Cluster:
    def __init__(self, status: int = 200):
        self.asked: list[str] = []
        self.status = status

    async def get_json(self, path: str):
        self.asked.append(path)
        expression = path.removeprefix("/_resolve/index/").split("?")[0]
        if self.status != 200:
            return self.status, {}
        return (200, ANSWERS[expression]) if expression in ANSWERS else (404, {})


def check(aliases, caller, indices):
    asyncio.run(aliases.check(caller, indices))


def test_an_alias_pointing_outside_the_keys_patterns_is_refused_wherever_it_is_reached():
    cluster = Cluster()
    aliases = ForeignAliases(cluster.get_json)
    check(aliases, TEAM, ("docs-1", "docs-own", "missing", "-docs-all"))
    for indices in (("docs-all",), ("docs-*",), ("docs-1", "docs-all")):
        with pytest.raises(errors.GatewayError) as refused:
            check(aliases, TEAM, indices)
        assert refused.value.status == 403 and "alias [docs-all]" in refused.value.reason
        assert "secret" not in refused.value.reason  # the target is not named
    check(aliases, EVERY, ("docs-all",))  # a key for every index may read it anyway
    check(aliases, Caller(), ("docs-all",))  # forward mode: the cluster decides
    assert all("expand_wildcards=all" in path for path in cluster.asked)


def test_answers_are_kept_briefly_and_an_unanswered_resolution_fails_closed():
    now = [0.0]
    cluster = Cluster()
    aliases = ForeignAliases(cluster.get_json, clock=lambda: now[0])
    check(aliases, TEAM, ("docs-1",))
    check(aliases, TEAM, ("docs-1",))
    assert len(cluster.asked) == 1
    now[0] += CACHE_S + 1
    check(aliases, TEAM, ("docs-1",))
    assert len(cluster.asked) == 2
    with pytest.raises(errors.GatewayError) as refused:
        check(ForeignAliases(Cluster(status=500).get_json), TEAM, ("docs-1",))
    assert refused.value.status == 503
