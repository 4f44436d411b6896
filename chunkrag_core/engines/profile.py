"""What each engine is, as data: one frozen :class:`EngineProfile` per value
of SEARCH_BACKEND, for the code that talks to a cluster without a client
backend (the settings that pick its URL, the gateway's pass-through, its
identity look-ups and health report).

The backends (``elasticsearch``, ``opensearch``) hide their differences
behind :class:`~chunkrag_core.engines.base.SearchBackend`; a profile holds
the few facts that are left: how the engine is named and configured, how it
authenticates, what it can do for the gateway, and how the gateway's
pass-through, which holds its own connections, goes round its nodes
(:class:`NodeFailover`). Code outside ``engines`` asks :func:`engine_of`
(or :func:`profile_for`) and never compares an engine's name
(``tests/unit/test_engine_names.py`` checks it).

This module lies below ``chunkrag_core.settings``, which reads it: it
imports nothing of the project's but ``aws_signing`` (below it too, and only
to sign), and takes the settings by what it reads of them
(:class:`ConfiguredEngine`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Protocol
from urllib.parse import unquote


class ConfiguredEngine(Protocol):
    """What a profile reads of the project's settings
    (``chunkrag_core.settings.Settings``): which engine they talk to, and by
    the profile's ``settings_prefix`` its ``<prefix>_url``, ``<prefix>_nodes``
    and ``<prefix>_ca_certs`` (and, to sign, ``aws_signing.SigningSettings``)."""

    search_backend: str


@dataclass(frozen=True, slots=True)
class NodeFailover:
    """How a client that keeps its own connections to each node goes round
    a cluster's nodes: the gateway's pass-through (``NodePools`` in
    ``chunkrag_gateway/origin.py``, whose docstring says how it differs from
    the backends' clients, which go round with their own node pools)."""

    # A node that refused a connection (nothing was sent) is tried again only
    # after this, unless every node is down.
    refused_backoff_s: float
    # A node that left a request unanswered within its attempt timeout is
    # passed over from `refused_backoff_s`, doubling up to this while it
    # stays silent.
    max_silent_backoff_s: float
    # Methods sent again to another node after the exchange broke off once
    # sent: they change nothing on the cluster.
    replayable_methods: frozenset[str]
    # Endpoints (the first path segment that starts with "_") whose POST only
    # reads, so it is sent again like a GET.
    read_only_post_endpoints: frozenset[str]

    def silent_backoff_s(self, silences: int) -> float:
        """How long a node silent ``silences`` attempts in a row is passed over."""
        return min(self.refused_backoff_s * 2 ** (silences - 1), self.max_silent_backoff_s)

    def repeatable(self, method: str, target: str) -> bool:
        """Whether ``method`` on ``target`` (raw path and query) may be sent
        again to another node after it was sent and not answered."""
        if method in self.replayable_methods:
            return True
        if method != "POST":
            return False
        path, _, query = target.partition("?")
        # A search that opens a scroll context, or moves one: a repeat holds a
        # context for nothing, or loses a page.
        if any(name in ("scroll", "scroll_id") for name, _, _ in (p.partition("=") for p in query.split("&"))):
            return False
        segments = [unquote(segment) for segment in path.split("/") if segment]
        # The endpoint is the first "_" segment ("/i/_doc/_search" indexes a
        # document whose id is "_search"); "_all" names every index.
        at = next((n for n, segment in enumerate(segments) if segment.startswith("_") and segment != "_all"), None)
        if at is None or segments[at] not in self.read_only_post_endpoints:
            return False
        rest = segments[at + 1 :]
        if segments[at] in ("_search", "_msearch"):
            # `_search/scroll` moves a cursor; only the template variants also just read.
            return rest in ([], ["template"])
        return True


@dataclass(frozen=True, slots=True)
class PointInTimeApi:
    """How the engine's REST API opens and closes a point in time, for the
    gateway, which passes both through as the read APIs they are (and, in
    service mode, binds each id to the key that opened it)."""

    # Path segments after the index of the open: POST /<index>/<open...>.
    open: tuple[str, ...]
    # Path of the close of the ids a body names: DELETE /<close...>.
    close: tuple[str, ...]
    # The close body's key that holds the id, or a list of ids.
    close_key: str
    # Path of a close of every point in time there is (refused by the
    # gateway: a caller closes its own); None where the engine has none.
    close_all: tuple[str, ...] | None = None


# Endpoints whose POST only reads on both engines: a search or count sent
# twice answers twice and changes nothing. Not among them: `_search/scroll`
# (each call moves the cursor: a page read twice is a page lost), a `_search`
# that opens a scroll or PIT context (`scroll=` in its query: a repeat leaves
# a context held for nothing), `_pit`, `_async_search`, and every write.
_READ_ONLY_POSTS = frozenset({"_search", "_msearch", "_count", "_mget", "_field_caps", "_validate", "_explain"})
_PASS_THROUGH_FAILOVER = NodeFailover(
    # Long enough that requests in a burst do not each pay a refused connect
    # (about a millisecond on a LAN, a connect timeout on a machine that is
    # gone), short enough that a restarted node (tens of seconds to rejoin)
    # takes its share again within a second or two of it.
    refused_backoff_s=2.0,
    # As elasticsearch-py's node pool: each new try of a silent node costs a
    # caller a whole attempt.
    max_silent_backoff_s=30.0,
    replayable_methods=frozenset({"GET", "HEAD"}),
    read_only_post_endpoints=_READ_ONLY_POSTS,
)


@dataclass(frozen=True, slots=True)
class EngineProfile:
    # SEARCH_BACKEND's value; also the key of the engine's state in the
    # gateway's health report.
    name: str
    # The product, in messages ("OpenSearch is not reachable").
    product: str
    # Its settings and variables: `<prefix>_url` (<PREFIX>_URL, a URL or a
    # comma-separated node list), `<prefix>_nodes`, `<prefix>_ca_certs`.
    settings_prefix: str
    # GET: who the cluster takes a credential for (forward mode's rate-limit
    # identity); the answer names a `username` or a `user_name`.
    whoami_path: str
    # Whether ES_API_KEY is the project's own credential, sent as
    # `Authorization: ApiKey <key>`; otherwise only the URL's user and
    # password are (`Authorization: Basic`).
    api_key_auth: bool
    # Whether the cluster mints API keys limited to some indices for the
    # gateway's service mode (derived keys); without them, the gateway's own
    # checks are a gateway key's only limit.
    derived_keys: bool
    # Whether OPENSEARCH_AUTH=sigv4 applies: every request signed with AWS
    # credentials (a managed domain or a Serverless collection).
    sigv4_signing: bool
    # How the gateway's pass-through goes round the nodes of a cluster given
    # as several URLs, and which requests it sends again.
    failover: NodeFailover
    # Its point-in-time API (open, close), which the gateway passes through.
    point_in_time: PointInTimeApi

    @property
    def url_variable(self) -> str:
        """The environment variable of the engine's URL (ES_URL, OPENSEARCH_URL)."""
        return f"{self.settings_prefix.upper()}_URL"

    def url(self, settings: ConfiguredEngine) -> str:
        """The engine's URL (or comma-separated node URLs) in ``settings``."""
        return getattr(settings, f"{self.settings_prefix}_url")

    def nodes(self, settings: ConfiguredEngine) -> tuple[str, ...]:
        """Every node URL of the engine in ``settings`` (`settings.node_urls`)."""
        return getattr(settings, f"{self.settings_prefix}_nodes")

    def ca_certs(self, settings: ConfiguredEngine) -> str | None:
        """The CA bundle for the engine's URL in ``settings``, if one is set."""
        return getattr(settings, f"{self.settings_prefix}_ca_certs")

    def sigv4(self, settings: ConfiguredEngine) -> tuple[str, str] | None:
        """(region, service) when every request to the engine is to be
        SigV4-signed (`aws_signing`), else None."""
        if not self.sigv4_signing:
            return None
        from chunkrag_core.engines.aws_signing import opensearch_sigv4

        return opensearch_sigv4(settings)

    def request_signer(self, settings: ConfiguredEngine):
        """A signer of single requests (`aws_signing.request_signer`), made
        now (botocore's credential chain is looked up); None without SigV4."""
        found = self.sigv4(settings)
        if found is None:
            return None
        from chunkrag_core.engines import aws_signing

        return aws_signing.request_signer(*found)


ELASTICSEARCH = EngineProfile(
    name="elasticsearch",
    product="Elasticsearch",
    settings_prefix="es",
    whoami_path="/_security/_authenticate",
    api_key_auth=True,
    # The grant API (`POST /_security/api_key` with role descriptors).
    derived_keys=True,
    sigv4_signing=False,
    # Elasticsearch's `_terms_enum` (field-value suggestions) only reads too.
    failover=replace(_PASS_THROUGH_FAILOVER, read_only_post_endpoints=_READ_ONLY_POSTS | {"_terms_enum"}),
    # POST /<index>/_pit, DELETE /_pit {"id": ...}.
    point_in_time=PointInTimeApi(open=("_pit",), close=("_pit",), close_key="id"),
)
OPENSEARCH = EngineProfile(
    name="opensearch",
    product="OpenSearch",
    settings_prefix="opensearch",
    whoami_path="/_plugins/_security/authinfo",
    # The security plugin has no API keys a client sends as a header of its own.
    api_key_auth=False,
    derived_keys=False,
    sigv4_signing=True,
    failover=_PASS_THROUGH_FAILOVER,
    # POST /<index>/_search/point_in_time, DELETE /_search/point_in_time
    # {"pit_id": [...]}, and DELETE /_search/point_in_time/_all.
    point_in_time=PointInTimeApi(
        open=("_search", "point_in_time"),
        close=("_search", "point_in_time"),
        close_key="pit_id",
        close_all=("_search", "point_in_time", "_all"),
    ),
)

# Every engine, the default first: the values SEARCH_BACKEND accepts.
PROFILES = (ELASTICSEARCH, OPENSEARCH)
SEARCH_BACKENDS = tuple(profile.name for profile in PROFILES)
DEFAULT_ENGINE = PROFILES[0].name
_BY_NAME = {profile.name: profile for profile in PROFILES}


def profile_for(name: str) -> EngineProfile:
    """The profile of the engine SEARCH_BACKEND calls ``name``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown search backend {name!r}; choose one of {', '.join(SEARCH_BACKENDS)}") from None


def engine_of(settings: ConfiguredEngine) -> EngineProfile:
    """The profile of the engine ``settings`` talk to (``search_backend``)."""
    return profile_for(settings.search_backend)


def engine_chosen_by_urls(env: Mapping[str, str]) -> str:
    """The engine chosen when SEARCH_BACKEND is not set: the one whose URL
    variable alone ``env`` sets (pointing only OPENSEARCH_URL at a cluster
    is choosing it), else the default."""
    chosen = [profile.name for profile in PROFILES if env.get(profile.url_variable)]
    return chosen[0] if len(chosen) == 1 else DEFAULT_ENGINE
