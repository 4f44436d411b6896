"""The first thing every request meets after the body limit: who is calling
(401 in service mode without a valid gateway API key), the caller's rate
limit (429), and whether the endpoint and the indices in its path may be
reached at all (403). The caller is left in ``scope["state"]["caller"]`` for
the pass-through lane and the routes.

The OpenAPI document, the Swagger UI and /v1/health answer anyone: they
carry no data, and a load balancer's probe has no key; with a rate limit
set they count against the client's address. Only those exact
paths and /v1/ask skip the endpoint classes: a path such as /v1/_search is
an index search (of an index named "v1") like any other."""

from __future__ import annotations

from chunkrag_core.engines.profile import ELASTICSEARCH, PointInTimeApi
from chunkrag_gateway import errors, playground, telemetry
from chunkrag_gateway.cluster_users import ClusterUsers
from chunkrag_gateway.identity import Authenticator, address_identity, check_indices
from chunkrag_gateway.limits import RateLimiter
from chunkrag_gateway.policy import classify, refuse_odd_paths, refuse_unless_allowed
from chunkrag_gateway.responses import accept_of, error_response

PUBLIC_PATHS = frozenset(
    {"/openapi.json", "/v1/docs", "/v1/docs/oauth2-redirect", "/v1/health", *playground.PUBLIC_PATHS}
)
# The gateway's own routes that need a caller but name no engine endpoint;
# every other path, /v1/_search included, is classified like any other.
GATEWAY_ROUTES = frozenset({"/v1/ask", playground.INDICES})


class Guard:
    def __init__(
        self,
        app,
        *,
        authenticator: Authenticator,
        rate_limiter: RateLimiter,
        passthrough_classes: frozenset[str],
        users: ClusterUsers | None = None,
        point_in_time: PointInTimeApi = ELASTICSEARCH.point_in_time,
    ):
        self.app = app
        # The engine's point-in-time open and close: read APIs.
        self.point_in_time = point_in_time
        self.authenticator, self.rate_limiter, self.classes = authenticator, rate_limiter, passthrough_classes
        # Forward mode with a rate limit: the cluster's user is the identity.
        self.users = users if rate_limiter.enabled else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] in PUBLIC_PATHS:
            # Anyone may call these (a load balancer's probe has no key), so
            # they count against the client address: /v1/health asks the
            # cluster and Redis each time.
            try:
                await self._limit(scope, address_identity(scope.get("client")))
            except errors.GatewayError as exc:
                return await error_response(exc, accept_of(scope))(scope, receive, send)
            return await self.app(scope, receive, send)
        try:
            try:
                caller = self.authenticator.caller(scope["headers"], scope.get("client"))
            except errors.GatewayError:
                # Service mode without a valid key: such requests count against
                # their client address (each credential tried would be a new
                # bucket), so guessing keys or flooding with 401s is limited too.
                await self._limit(scope, address_identity(scope.get("client")))
                raise
            if self.users is not None:
                caller = await self.users.identify(caller)
            telemetry.note(scope, identity=caller.identity)
            await self._limit(scope, caller.identity)
            endpoint = None
            if scope["path"] not in GATEWAY_ROUTES:
                raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
                refuse_odd_paths(raw_path)
                endpoint = classify(scope["method"], raw_path, self.point_in_time)
                refuse_unless_allowed(endpoint, scope["method"], raw_path, self.classes)
                what = f"{scope['method']} {scope['path']}"
                if endpoint.indices is not None:
                    check_indices(caller, endpoint.indices, what=what)
                # Index-less searches are decided on their body by the lane
                # (an _msearch names its indices there, a search may continue a PIT).
                elif not (endpoint.search or endpoint.msearch or endpoint.no_data):
                    check_indices(caller, None, what=what)
        except errors.GatewayError as exc:
            return await error_response(exc, accept_of(scope))(scope, receive, send)
        state = scope.setdefault("state", {})
        state["caller"] = caller
        state["endpoint"] = endpoint
        await self.app(scope, receive, send)

    async def _limit(self, scope, identity: str) -> None:
        """Take one token of ``identity``'s bucket (every instance's, with
        shared state), counting a refusal in the metrics."""
        try:
            await self.rate_limiter.acquire(identity)
        except errors.GatewayError:
            telemetry.note(scope, identity=identity, shed="rate")
            raise
