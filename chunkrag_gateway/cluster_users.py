"""Forward mode's rate-limit identity: the user the cluster authenticates a
credential as, so that one user's several credentials (Basic and API keys,
or API keys minted by the dozen) share one bucket.

The cluster is asked once per credential (``GET /_security/_authenticate``,
OpenSearch's ``/_plugins/_security/authinfo``), and the answer kept for
``ttl_s``; a credential the cluster does not accept, or a cluster that
cannot say (security off, unreachable), keeps the credential's own identity
(``identity.credentials_identity``). Asked only when a rate limit is set."""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from typing import Awaitable, Callable

import orjson

from chunkrag_gateway import errors
from chunkrag_gateway.identity import Caller

# Credentials remembered at most, and for how long (a user's credentials
# rarely change hands; a stale answer only shares or splits a bucket).
CAPACITY = 10_000
TTL_S = 300.0

# (authorization, path) -> (status, body)
Ask = Callable[[bytes, str], Awaitable[tuple[int, bytes]]]


def user_of(status: int, body: bytes) -> str | None:
    """The user name in an answer to the engine's whoami path, if it names one."""
    if status != 200:
        return None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    name = answer.get("username", answer.get("user_name")) if isinstance(answer, dict) else None
    return name if isinstance(name, str) and name else None


class ClusterUsers:
    def __init__(
        self,
        ask: Ask,
        whoami_path: str,
        *,
        capacity: int = CAPACITY,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        # The engine's (`EngineProfile.whoami_path`).
        self._ask, self._path = ask, whoami_path
        self.capacity, self.ttl_s, self.clock = capacity, ttl_s, clock
        self._known: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def identify(self, caller: Caller) -> Caller:
        """``caller`` with its identity the cluster's user, when the cluster names one."""
        if caller.authorization is None or caller.key is not None:
            return caller
        known = self._known.get(caller.identity)
        if known is not None and self.clock() < known[1]:
            return dataclasses.replace(caller, identity=known[0])
        try:
            user = user_of(*await self._ask(caller.authorization, self._path))
        except errors.GatewayError:
            return caller  # the cluster cannot say now: ask again next time
        identity = f"user:{user}" if user is not None else caller.identity
        self._known[caller.identity] = (identity, self.clock() + self.ttl_s)
        self._known.move_to_end(caller.identity)
        while len(self._known) > self.capacity:
            self._known.popitem(last=False)
        return dataclasses.replace(caller, identity=identity)
