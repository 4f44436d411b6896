"""Who is calling, and with whose credentials the gateway reaches the cluster.

Two modes (``CHUNKRAG_GATEWAY_AUTH``):

- ``forward`` (default): the caller's ``Authorization`` (Basic, ApiKey,
  Bearer) goes with every request the gateway makes for that caller, so the
  cluster's own index- and document-level security applies unchanged. The
  gateway holds no credentials of its own for callers' requests.
- ``service``: each caller presents a gateway API key (``Authorization:
  ApiKey <key>`` or ``Bearer <key>``, what the official clients send with
  ``api_key=``). Keys are configured as sha256 hashes, compared in constant
  time, and each lists the index patterns it may read. On Elasticsearch the
  caller's requests go with an API key the gateway made for that key with
  its own credentials, limited by the cluster to the key's patterns
  (``derived_keys.py``); see docs/security.md.

Only an allow-list of caller headers reaches the cluster
(``forwardable_header``): none that would change who the cluster takes the
caller to be (run-as, secondary authorization, proxy authentication) or
where the request came from (forwarding, unless from a trusted proxy). The
rate-limit and per-caller identity does not depend on how a credential is
spelled (``credentials_identity``).

Everything that turns a caller into cluster credentials lives here, so it can
move behind a backend seam (Elasticsearch or OpenSearch) as one piece.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any, Iterable

from chunkrag_core.engines.profile import engine_of
from chunkrag_core.settings import GATEWAY_AUTH_MODES
from chunkrag_gateway import errors

AUTH_MODES = GATEWAY_AUTH_MODES


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
    # Who counts against a rate limit: key name, a hash of the credentials
    # (however their header was spelled), or the client address.
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
            raise ConfigError(
                f"CHUNKRAG_GATEWAY_API_KEYS entry {number + 1} must be name:sha256-hex:index-patterns, "
                f"got {len(fields)} field(s)"
            )
        name, digest, patterns = (f.strip() for f in fields)
        try:
            sha = bytes.fromhex(digest)
        except ValueError:
            sha = b""
        if len(sha) != 32:
            raise ConfigError(
                f"CHUNKRAG_GATEWAY_API_KEYS key [{name}]: the second field must be the 64 hex digits of sha256(key)"
            )
        indices = tuple(p.strip() for p in patterns.split(",") if p.strip())
        if not name or not indices:
            raise ConfigError(
                f"CHUNKRAG_GATEWAY_API_KEYS entry {number + 1} needs a name and at least one index pattern (* for all)"
            )
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
            raise ConfigError(
                "CHUNKRAG_GATEWAY_AUTH=service needs CHUNKRAG_GATEWAY_API_KEYS: "
                "without them anyone could use the gateway's credentials"
            )
        if mode == "forward" and keys:
            raise ConfigError(
                "CHUNKRAG_GATEWAY_API_KEYS is set but CHUNKRAG_GATEWAY_AUTH is forward: "
                "set it to service to use gateway API keys"
            )
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
                return Caller(identity=address_identity(client))
            return Caller(authorization, identity=credentials_identity(authorization))
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


def address_identity(client: Any) -> str:
    """The rate-limit identity of a caller without credentials: its address
    (the connection's peer, or what a trusted proxy's forwarding header
    says: uvicorn reads those only with CHUNKRAG_GATEWAY_TRUSTED_PROXY)."""
    return f"address:{client[0]}" if client else "anonymous"


def check_engine_auth(settings) -> None:
    """SigV4 signs with the gateway's own AWS identity, which a caller's
    credentials cannot take the place of: forward mode would hand that
    identity to anyone, so SigV4 goes only with service mode and its keys."""
    if engine_of(settings).sigv4(settings) is not None and settings.gateway.auth != "service":
        raise ConfigError(
            "OPENSEARCH_AUTH=sigv4 signs every request with the gateway's AWS credentials, "
            "so callers' credentials cannot be forwarded: "
            "set CHUNKRAG_GATEWAY_AUTH=service with CHUNKRAG_GATEWAY_API_KEYS (and index allow-lists per key)"
        )


def unauthenticated(reason: str) -> errors.GatewayError:
    return errors.GatewayError(
        401, "security_exception", reason, headers={"www-authenticate": 'ApiKey realm="chunkrag-gateway"'}
    )


def forbidden(reason: str) -> errors.GatewayError:
    return errors.GatewayError(403, "security_exception", reason)


def check_indices(caller: Caller, indices: tuple[str, ...] | None, *, what: str) -> None:
    """Refuse unless every index expression is inside the caller's allow-list.
    ``indices`` None means "all indices" (no index named). A requested
    wildcard passes only when an allowed pattern covers it literally
    (``docs-*`` allowed covers ``docs-*`` and ``docs-1``, not ``*``). An
    exclusion (``-name``) after an included expression passes: removing
    indices never reaches more."""
    allowed = caller.indices
    if allowed is None or "*" in allowed:
        return
    if indices is None:
        raise forbidden(
            f"gateway API key [{caller.key.name}] may read only [{', '.join(allowed)}]; "
            f"{what} names no index, name one in the path"
        )
    for position, index in enumerate(indices):
        if index.startswith("-") and position > 0:
            # An exclusion after an included expression (``docs-*,-docs-old``)
            # only narrows what the checked expressions before it reach. First
            # in the list it is not taken as one (older versions read a leading
            # ``-x`` as "everything but x"), so it is checked as a name below.
            continue
        if ":" in index:  # cluster:index reaches a remote cluster, whatever the pattern says
            raise forbidden(f"gateway API key [{caller.key.name}] may not use the cross-cluster expression [{index}]")
        if not any(fnmatch.fnmatchcase(index, pattern) for pattern in allowed):
            raise forbidden(
                f"gateway API key [{caller.key.name}] may not read index [{index}]; it may read [{', '.join(allowed)}]"
            )


def service_refusal(caller: Caller, status: int = 403) -> errors.GatewayError:
    """The gateway's own answer to a cluster 401/403 in service mode: the
    cluster's would name the service account, its roles and the derived key."""
    patterns = ", ".join(caller.key.indices) if caller.key is not None else ""
    name = caller.key.name if caller.key is not None else "?"
    if status == 401:
        return errors.unavailable("the cluster did not accept the credentials for this gateway API key; retry later")
    return forbidden(f"gateway API key [{name}] may not do this: it may read only [{patterns}] (the cluster refused)")


# What Elasticsearch's refusals say. A caller's ``filter_path`` may keep a
# refusal's reason and drop its type, so the words count as much as the type.
REFUSAL_WORDS = ("security_exception", "is unauthorized for", "unable to authenticate", "API key id [")
_REFUSAL_MARKS = tuple(word.encode() for word in REFUSAL_WORDS)
# Where documents, not errors, sit in a response: their fields are left alone.
DOCUMENT_KEYS = frozenset({"_source", "fields", "highlight", "docvalue_fields"})


def may_name_cluster_identity(body: bytes) -> bool:
    """Whether a response may hold a refusal of the cluster's (cheap: bytes only)."""
    return any(mark in body for mark in _REFUSAL_MARKS)


def scrub_security_errors(document: Any, reason: str) -> bool:
    """Replace, in place, the reason of every refusal in a response (an
    _msearch item, a shard failure), whichever of its fields a filter_path
    kept, and drop its stack trace (``error_trace``): they name the service
    account, its roles and the derived key. A refusal quoted as plain text
    elsewhere (the ``error`` of ``_validate/query``, an explanation) is
    replaced by ``reason`` too. True when something was replaced."""
    replaced = False
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for position, item in enumerate(node):
                if _names_refusal(item):
                    node[position] = reason
                    replaced = True
            stack.extend(item for item in node if isinstance(item, (dict, list)))
        elif isinstance(node, dict):
            if _is_refusal(node):
                if "reason" in node:
                    node["reason"] = reason
                node.pop("stack_trace", None)
                replaced = True
            for key, value in node.items():
                if key in DOCUMENT_KEYS:
                    continue
                if _names_refusal(value):
                    node[key] = reason
                    replaced = True
                elif isinstance(value, (dict, list)):
                    stack.append(value)
    return replaced


def _names_refusal(value: Any) -> bool:
    """A text quoting a refusal (a bare ``security_exception`` is a type: kept)."""
    return isinstance(value, str) and value != "security_exception" and any(word in value for word in REFUSAL_WORDS)


def _is_refusal(node: dict) -> bool:
    if node.get("type") == "security_exception":
        return True
    said = [node.get(key) for key in ("reason", "stack_trace")]
    return any(isinstance(text, str) and any(word in text for word in REFUSAL_WORDS) for text in said)


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
    parts = authorization.split()
    if len(parts) != 2 or parts[0].lower() not in (b"apikey", b"bearer"):
        return None
    return parts[1]


# The schemes whose credential is standard base64 that the engines decode
# with Java's basic decoder, to which the padding is optional: ``Basic``
# (``user:password``), ``ApiKey`` (``id:key``) and ``Bearer`` (Elasticsearch's
# access and service-account tokens). A JWT (dots) or any other token that is
# not base64 is its own spelling.
_BASE64_SCHEMES = frozenset({b"basic", b"apikey", b"bearer"})
_BASE64_TOKEN = re.compile(rb"[A-Za-z0-9+/]+={0,2}")


def credentials_identity(authorization: bytes) -> str:
    """The rate-limit and per-caller key of an Authorization header: one
    credential is one caller however the header spells it (the scheme's
    case, whitespace around and between, base64 with or without its
    padding), different credentials are different callers, and the key is a
    hash, never the credentials."""
    scheme, *rest = authorization.split() or [b""]
    scheme = scheme.lower()
    decoded = base64_credential(rest[0]) if len(rest) == 1 and scheme in _BASE64_SCHEMES else None
    # The first word tells the two forms apart: no header sent as written
    # reads as another's decoded bytes.
    if decoded is not None:
        canonical = b"decoded " + scheme + b" " + decoded
    else:
        canonical = b" ".join([b"as-sent", scheme, *rest])
    return "credentials:" + hashlib.sha256(canonical).hexdigest()[:24]


def base64_credential(token: bytes) -> bytes | None:
    """The bytes a standard-base64 ``token`` stands for, read as the engines
    read it: padded or not (``YWxpY2U6cHc=`` and ``YWxpY2U6cHc`` are one
    credential); None for anything else (a JWT, the URL-safe alphabet, a
    length no base64 has), which is compared as sent."""
    if not _BASE64_TOKEN.fullmatch(token):
        return None
    body = token.rstrip(b"=")
    if len(body) % 4 == 1:
        return None
    try:
        return base64.b64decode(body + b"=" * (-len(body) % 4), validate=True)
    except binascii.Error:
        return None


# The caller headers the cluster is sent, and no other: what a request's body
# and answer need (type, coding, accepted formats), the official clients'
# own (user agent, client meta, API version), the tracing ones (X-Opaque-Id,
# W3C trace context) and CORS's. An allow-list, because a cluster, its proxy
# and its plugins read more headers than anyone lists: product origin and
# internal-origin markers that lift deprecation and system-index checks,
# method overrides, URL rewrites, client-address headers of CDNs, run-as.
FORWARDED_HEADERS = frozenset(
    {
        b"accept",
        b"accept-encoding",
        b"content-type",
        b"content-encoding",
        b"user-agent",
        b"x-elastic-client-meta",
        b"elastic-api-version",
        b"x-opaque-id",
        b"traceparent",
        b"tracestate",
        b"origin",
        b"access-control-request-method",
        b"access-control-request-headers",
    }
)
# Headers that say where a request came from: a cluster (or its proxy-auth
# realm, or its audit log) may trust them, so they pass only from a proxy the
# operator trusts (CHUNKRAG_GATEWAY_TRUSTED_PROXY).
FORWARDING_HEADERS = frozenset({b"x-real-ip", b"forwarded", b"true-client-ip", b"x-client-ip", b"client-ip", b"via"})
FORWARDING_PREFIXES = (b"x-forwarded-", b"x-original-")
# Forwarding-like names that stay out even from a trusted proxy: the
# caller's name (proxy authentication) rather than its address.
IDENTITY_FORWARDING = frozenset({b"x-forwarded-user"})


def forwardable_header(name: bytes, *, trusted_proxy: bool = False) -> bool:
    """Whether a caller's header may reach the cluster: one of
    ``FORWARDED_HEADERS`` (exactly, case aside: ``x_opaque_id`` is another
    header), or a forwarding header from a trusted proxy."""
    normal = name.strip().lower()
    if normal in FORWARDED_HEADERS:
        return True
    if normal in IDENTITY_FORWARDING or b"_" in normal:
        return False
    if normal in FORWARDING_HEADERS or normal.startswith(FORWARDING_PREFIXES):
        return trusted_proxy
    return False


def basic(user: str, password: str) -> bytes:
    """A Basic Authorization value (tests and the bench build callers with it)."""
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())
