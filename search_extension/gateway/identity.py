"""Who is calling, and with whose credentials the gateway reaches the cluster.

Two modes (``CHUNKRAG_GATEWAY_AUTH``):

- ``forward`` (default): the caller's ``Authorization`` (Basic, ApiKey,
  Bearer) goes with every request the gateway makes for that caller, so the
  cluster's own index- and document-level security applies unchanged. The
  gateway holds no credentials of its own for callers' requests.
- ``service``: the gateway's credentials (ES_URL user, ES_API_KEY) reach the
  cluster; each caller presents a gateway API key (``Authorization: ApiKey
  <key>`` or ``Bearer <key>``, what the official clients send with
  ``api_key=``). Keys are configured as sha256 hashes, compared in constant
  time, and each lists the index patterns it may read.

Everything that turns a caller into cluster credentials lives here, so it can
move behind a backend seam (Elasticsearch or OpenSearch) as one piece.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Iterable

from search_extension.gateway import errors

AUTH_MODES = ("forward", "service")


class ConfigError(ValueError):
    """A gateway security setting the gateway cannot use."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    sha256: bytes  # digest of the key, never the key itself
    indices: tuple[str, ...]  # index patterns (fnmatch); ("*",) reads all


@dataclass(frozen=True, slots=True)
class Caller:
    # The header forwarded to the cluster (forward mode), as received.
    authorization: bytes | None = None
    # The gateway API key that admitted the caller (service mode).
    key: ApiKey | None = None
    # Who counts against a rate limit: key name, a hash of the credentials,
    # or the client address.
    identity: str = "anonymous"

    @property
    def indices(self) -> tuple[str, ...] | None:
        """Index patterns this caller is limited to; None: the cluster decides."""
        return self.key.indices if self.key is not None else None


def parse_api_keys(raw: str) -> tuple[ApiKey, ...]:
    """``name:sha256hex:pattern,pattern`` entries separated by ``;`` or newlines."""
    keys = []
    for number, entry in enumerate(part.strip() for part in raw.replace("\n", ";").split(";")):
        if not entry:
            continue
        fields = entry.split(":")
        if len(fields) != 3:
            raise ConfigError(f"CHUNKRAG_GATEWAY_API_KEYS entry {number + 1} must be name:sha256-hex:index-patterns, got {len(fields)} field(s)")
        name, digest, patterns = (f.strip() for f in fields)
        try:
            sha = bytes.fromhex(digest)
        except ValueError:
            sha = b""
        if len(sha) != 32:
            raise ConfigError(f"CHUNKRAG_GATEWAY_API_KEYS key [{name}]: the second field must be the 64 hex digits of sha256(key)")
        indices = tuple(p.strip() for p in patterns.split(",") if p.strip())
        if not name or not indices:
            raise ConfigError(f"CHUNKRAG_GATEWAY_API_KEYS entry {number + 1} needs a name and at least one index pattern (* for all)")
        keys.append(ApiKey(name, sha, indices))
    if len({k.name for k in keys}) != len(keys):
        raise ConfigError("CHUNKRAG_GATEWAY_API_KEYS names a key twice")
    return tuple(keys)


def key_hash(key: str) -> str:
    """What to put in CHUNKRAG_GATEWAY_API_KEYS for ``key``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class Authenticator:
    def __init__(self, mode: str, keys: tuple[ApiKey, ...]):
        if mode not in AUTH_MODES:
            raise ConfigError(f"CHUNKRAG_GATEWAY_AUTH must be one of {', '.join(AUTH_MODES)}, got {mode!r}")
        if mode == "service" and not keys:
            raise ConfigError("CHUNKRAG_GATEWAY_AUTH=service needs CHUNKRAG_GATEWAY_API_KEYS: without them anyone could use the gateway's credentials")
        if mode == "forward" and keys:
            raise ConfigError("CHUNKRAG_GATEWAY_API_KEYS is set but CHUNKRAG_GATEWAY_AUTH is forward: set it to service to use gateway API keys")
        self.mode, self.keys = mode, keys

    @classmethod
    def from_settings(cls, gateway_settings) -> Authenticator:
        return cls(gateway_settings.auth, parse_api_keys(gateway_settings.api_keys))

    def caller(self, headers: Iterable[tuple[bytes, bytes]], client: Any = None) -> Caller:
        """The caller of a request (raw ASGI headers); raises a 401 GatewayError
        in service mode without a valid key."""
        authorization = _header(headers, b"authorization")
        if self.mode == "forward":
            if authorization is None:
                return Caller(identity=f"address:{client[0]}" if client else "anonymous")
            return Caller(authorization, identity="credentials:" + hashlib.sha256(authorization).hexdigest()[:16])
        presented = _presented_key(authorization)
        if presented is None:
            raise unauthenticated("this gateway needs a gateway API key: send Authorization: ApiKey <key>")
        digest = hashlib.sha256(presented).digest()
        found = None
        for key in self.keys:  # every key is compared: the time does not tell which matched
            if hmac.compare_digest(digest, key.sha256):
                found = key
        if found is None:
            raise unauthenticated("the gateway API key is not valid")
        return Caller(key=found, identity=f"key:{found.name}")


def check_engine_auth(settings) -> None:
    """SigV4 signs with the gateway's own AWS identity, which a caller's
    credentials cannot take the place of: forward mode would hand that
    identity to anyone, so SigV4 goes only with service mode and its keys."""
    if settings.search_backend == "opensearch" and settings.opensearch_auth == "sigv4" and settings.gateway.auth != "service":
        raise ConfigError(
            "OPENSEARCH_AUTH=sigv4 signs every request with the gateway's AWS credentials, so callers' credentials cannot be forwarded: "
            "set CHUNKRAG_GATEWAY_AUTH=service with CHUNKRAG_GATEWAY_API_KEYS (and index allow-lists per key)"
        )


def unauthenticated(reason: str) -> errors.GatewayError:
    return errors.GatewayError(401, "security_exception", reason, headers={"www-authenticate": 'ApiKey realm="chunkrag-gateway"'})


def forbidden(reason: str) -> errors.GatewayError:
    return errors.GatewayError(403, "security_exception", reason)


def check_indices(caller: Caller, indices: tuple[str, ...] | None, *, what: str) -> None:
    """Refuse unless every index expression is inside the caller's allow-list.
    ``indices`` None means "all indices" (no index named). A requested
    wildcard passes only when an allowed pattern covers it literally
    (``docs-*`` allowed covers ``docs-*`` and ``docs-1``, not ``*``)."""
    allowed = caller.indices
    if allowed is None or "*" in allowed:
        return
    if indices is None:
        raise forbidden(f"gateway API key [{caller.key.name}] may read only [{', '.join(allowed)}]; {what} names no index, name one in the path")
    for index in indices:
        if ":" in index:  # cluster:index reaches a remote cluster, whatever the pattern says
            raise forbidden(f"gateway API key [{caller.key.name}] may not use the cross-cluster expression [{index}]")
        if not any(fnmatch.fnmatchcase(index, pattern) for pattern in allowed):
            raise forbidden(f"gateway API key [{caller.key.name}] may not read index [{index}]; it may read [{', '.join(allowed)}]")


def es_for(client, caller: Caller):
    """The Elasticsearch client to search with for ``caller``: in forward mode
    the caller's Authorization on each request (the base client holds no
    credentials, so a caller without any reaches the cluster without any)."""
    if caller.authorization is None:
        return client
    headers = {"authorization": caller.authorization.decode("latin-1")}
    # A search backend (Elasticsearch or OpenSearch) says it one way, the raw client another.
    with_headers = getattr(client, "with_headers", None)
    return with_headers(headers) if with_headers is not None else client.options(headers=headers)


def forwarded_headers(caller: Caller) -> list[tuple[bytes, bytes]]:
    """Headers the pass-through adds for ``caller``."""
    return [(b"authorization", caller.authorization)] if caller.authorization is not None else []


def _header(headers: Iterable[tuple[bytes, bytes]], wanted: bytes) -> bytes | None:
    for name, value in headers:
        if name.lower() == wanted:
            return value
    return None


def _presented_key(authorization: bytes | None) -> bytes | None:
    """The key from ``ApiKey <key>`` or ``Bearer <key>``. The official clients
    send ``ApiKey base64(id:key)`` for a tuple; a plain key is used as sent."""
    if authorization is None:
        return None
    scheme, _, value = authorization.strip().partition(b" ")
    if scheme.lower() not in (b"apikey", b"bearer") or not value.strip():
        return None
    return value.strip()


def basic(user: str, password: str) -> bytes:
    """A Basic Authorization value (tests and the bench build callers with it)."""
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())

