"""Service mode's derived API keys: the cluster itself enforces each gateway
key's allow-list.

For each gateway key the gateway makes, with its own credentials, an
Elasticsearch API key (``POST /_security/api_key``) whose role descriptor
grants ``read`` and ``view_index_metadata`` on the gateway key's index
patterns and nothing else. Elasticsearch gives an API key the intersection of
its descriptors and its owner's rights, so the derived key reads only what
both the gateway key and the service account may. Every request for a caller
goes with that caller's derived key, never the service account's own
credentials: a hole in the gateway's own checks then reaches no index the key
was not given, and scrolls and PITs are bound to the derived key that made
them (Elasticsearch binds a scroll to the API key that created it).

Keys are made on a gateway key's first use, cached, made again once half
their lifetime (``CHUNKRAG_GATEWAY_DERIVED_KEY_TTL_S``) has passed (the old
one expires on its own, so a request in flight keeps working), and every key
made is invalidated when the gateway shuts down.

A cluster with security turned off has no credentials that could limit
anything: the gateway refuses service mode there (503) unless
``CHUNKRAG_GATEWAY_ENFORCE_IN_GATEWAY_ONLY`` says to accept its own checks
alone. OpenSearch's security plugin has no such keys: there the gateway's
checks are the only line (said in a log line at start).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import orjson

from chunkrag_gateway import errors
from chunkrag_gateway.identity import ApiKey

log = logging.getLogger(__name__)

PRIVILEGES = ("read", "view_index_metadata")
ROLE_NAME = "chunkrag_gateway_key"

# (method, target, headers, body) -> a response with .status and .body
Send = Callable[[str, str, list[tuple[bytes, bytes]], bytes], Awaitable]


@dataclass(frozen=True, slots=True)
class Derived:
    authorization: bytes  # b"ApiKey <encoded>"
    id: str
    renew_at: float  # on the injected clock


def create_body(key: ApiKey, ttl_s: float) -> dict:
    """The ``POST /_security/api_key`` body for ``key``: index reads on its
    patterns, no cluster privilege, no remote cluster."""
    return {
        "name": f"chunkrag-gateway-{key.name}",
        "expiration": f"{max(60, int(ttl_s))}s",
        "role_descriptors": {
            ROLE_NAME: {"cluster": [], "indices": [{"names": list(key.indices), "privileges": list(PRIVILEGES)}]}
        },
        "metadata": {"chunkrag_gateway_key": key.name},
    }


def security_is_off(status: int, body: bytes) -> bool:
    """Whether the answer to ``POST /_security/api_key`` says the cluster
    runs without security (no handler for the path, or security disabled)."""
    if status not in (400, 404, 405, 500):
        return False
    text = body.lower()
    return b"no handler found" in text or (
        b"security" in text and (b"not enabled" in text or b"explicitly enabled" in text or b"disabled" in text)
    )


class DerivedKeys:
    def __init__(
        self,
        send: Send,
        own_headers: list[tuple[bytes, bytes]],
        *,
        ttl_s: float,
        gateway_only_accepted: bool,
        clock: Callable[[], float] = time.monotonic,
        shared=None,
    ):
        if ttl_s < 120:
            raise ValueError(f"CHUNKRAG_GATEWAY_DERIVED_KEY_TTL_S must be at least 120 s, got {ttl_s:g}")
        self._send, self._own = send, own_headers
        self.ttl_s, self.gateway_only_accepted, self.clock = ttl_s, gateway_only_accepted, clock
        self._keys: dict[str, Derived] = {}
        self._made: list[str] = []  # ids of every key made, invalidated at shutdown
        self._locks: dict[str, asyncio.Lock] = {}
        self.security_off = False
        # Several instances: one key per gateway key for all of them
        # (shared_state.SharedDerivedKeys), and the ids the cluster refused,
        # never taken from there again.
        self.shared = shared
        self._refused: set[str] = set()

    async def authorization(self, key: ApiKey) -> bytes | None:
        """The Authorization for ``key``'s requests; None only when the
        cluster has security off and gateway-only enforcement was accepted."""
        if self.security_off:
            return None
        current = self._keys.get(key.name)
        if current is not None and self.clock() < current.renew_at:
            return current.authorization
        lock = self._locks.setdefault(key.name, asyncio.Lock())
        async with lock:  # one creation per key, however many requests wait
            current = self._keys.get(key.name)
            if current is not None and self.clock() < current.renew_at:
                return current.authorization
            if self.security_off:
                return None
            made = await self._obtain(key)
            if made is None:
                return None
            self._keys[key.name] = made
            return made.authorization

    async def _obtain(self, key: ApiKey) -> Derived | None:
        """A key for ``key``: made here, or with several instances the one
        they share (made here and shared when there is none, or it is due)."""
        if self.shared is None:
            return await self._create(key)
        known = await self.shared.load(key.name, self.clock)
        if known is not None and known.id not in self._refused and self.clock() < known.renew_at:
            return known
        made = await self._create(key)
        if made is None:
            return None
        return await self.shared.store(key.name, made, known.id if known is not None else None, self.clock)

    async def _create(self, key: ApiKey) -> Derived | None:
        headers = [(b"content-type", b"application/json"), (b"accept", b"application/json"), *self._own]
        response = await self._send("POST", "/_security/api_key", headers, orjson.dumps(create_body(key, self.ttl_s)))
        # The cluster's own words are not passed on: they name the service account and its roles.
        if response.status == 200:
            try:
                answer = orjson.loads(response.body)
                derived = Derived(
                    b"ApiKey " + answer["encoded"].encode("ascii"), str(answer["id"]), self.clock() + self.ttl_s / 2
                )
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeEncodeError):
                raise errors.unavailable(
                    "the cluster's answer to the gateway's API key request could not be read"
                ) from None
            self._made.append(derived.id)
            log.info("made a derived API key for gateway key [%s] (expires in %g s)", key.name, self.ttl_s)
            return derived
        if security_is_off(response.status, response.body):
            if not self.gateway_only_accepted:
                raise errors.unavailable(
                    "the cluster runs without security, so it cannot limit a gateway API key to its indices; "
                    "service mode needs a secured cluster, or CHUNKRAG_GATEWAY_ENFORCE_IN_GATEWAY_ONLY=true "
                    "to accept the gateway's checks alone"
                )
            log.warning(
                "the cluster runs without security: gateway API keys are limited by the gateway's checks only "
                "(CHUNKRAG_GATEWAY_ENFORCE_IN_GATEWAY_ONLY)"
            )
            self.security_off = True
            return None
        if response.status == 401:
            raise errors.unavailable(
                "the cluster refused the gateway's own credentials, so it cannot make the gateway API key's derived key"
            )
        if response.status == 403:
            raise errors.unavailable(
                "the gateway's cluster account may not create API keys (it needs the manage_own_api_key "
                "cluster privilege), so the cluster cannot enforce gateway API keys"
            )
        raise errors.unavailable(
            f"the cluster could not make a derived API key for a gateway API key (status {response.status})"
        )

    def forget(self, key: ApiKey) -> None:
        """Drop ``key``'s derived key (the cluster refused it: invalidated or
        expired early); the next request makes a new one."""
        dropped = self._keys.pop(key.name, None)
        if dropped is not None and self.shared is not None:
            self._refused.add(dropped.id)

    async def invalidate_all(self) -> None:
        """Invalidate every key made (at shutdown); failures are logged, not
        raised. ``owner``: manage_own_api_key may invalidate only its own."""
        if not self._made:
            return
        if self.shared is not None:
            # Other instances may use them: they expire on their own.
            self._made, self._keys = [], {}
            return
        ids, self._made, self._keys = self._made, [], {}
        headers = [(b"content-type", b"application/json"), (b"accept", b"application/json"), *self._own]
        try:
            response = await self._send(
                "DELETE", "/_security/api_key", headers, orjson.dumps({"ids": ids, "owner": True})
            )
            if response.status != 200:
                log.warning(
                    "invalidating %d derived API key(s) answered %d; they expire on their own",
                    len(ids),
                    response.status,
                )
        except errors.GatewayError as exc:
            log.warning(
                "could not invalidate %d derived API key(s): %s; they expire on their own", len(ids), exc.reason
            )
