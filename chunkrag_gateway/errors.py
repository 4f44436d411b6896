"""Errors in Elasticsearch's shape, so the official clients raise their usual
exceptions (BadRequestError for 400, NotFoundError for 404, ApiError else)
and show the reason; and the mapping from library failures to a status.

A reason is read by whoever calls the gateway: it names a failing
dependency ("Elasticsearch is not reachable") but never its host, port, URL
or account; that detail goes to the gateway's log."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("chunkrag.gateway")


class GatewayError(Exception):
    """A failure the gateway answers with ``status`` and an ES-shaped body."""

    def __init__(
        self,
        status: int,
        type_: str,
        reason: str,
        *,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(reason)
        self.status, self.type, self.reason = status, type_, reason
        # Elasticsearch's own error body, passed on unchanged when it has one.
        self.body = body
        # Retry-After on a 429, WWW-Authenticate on a 401.
        self.headers = dict(headers or {})

    def __reduce__(self):
        # Pickled whole (a filtered search's error crosses from its filter
        # process, filter_processes.py): the default would call the class
        # with the reason alone.
        return _restored, (self.status, self.type, self.reason, self.body, self.headers)


def _restored(status: int, type_: str, reason: str, body, headers) -> GatewayError:
    return GatewayError(status, type_, reason, body=body, headers=headers)


def error_body(status: int, type_: str, reason: str) -> dict[str, Any]:
    cause = {"type": type_, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def body_of(error: GatewayError) -> dict[str, Any]:
    return error.body if error.body is not None else error_body(error.status, error.type, error.reason)


def bad_request(reason: str) -> GatewayError:
    return GatewayError(400, "illegal_argument_exception", reason)


def parse_error(reason: str) -> GatewayError:
    return GatewayError(400, "parse_exception", reason)


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        "content_too_long_exception",
        f"request body is larger than the gateway's limit of {limit} bytes (CHUNKRAG_GATEWAY_MAX_BODY_BYTES)",
    )


def too_many(reason: str, retry_after_s: float) -> GatewayError:
    """429 in Elasticsearch's own shape for a full queue; clients back off."""
    seconds = max(1, int(-(-retry_after_s // 1)))
    return GatewayError(429, "es_rejected_execution_exception", reason, headers={"retry-after": str(seconds)})


def forbidden_endpoint(reason: str) -> GatewayError:
    return GatewayError(403, "security_exception", reason)


def unavailable(reason: str, *, detail: object = None) -> GatewayError:
    """503. ``reason`` (the caller's) names the dependency, never its
    address; ``detail`` (addresses, the client's own words) goes to the log."""
    return _logged(GatewayError(503, "unavailable_exception", reason), detail)


def timed_out(reason: str, *, detail: object = None) -> GatewayError:
    """504; ``reason`` and ``detail`` as for :func:`unavailable`."""
    return _logged(GatewayError(504, "timeout_exception", reason), detail)


def _logged(error: GatewayError, detail: object) -> GatewayError:
    if detail is not None:
        log.warning("%s (%s): %s", error.reason, error.status, detail)
    return error


def from_exception(exc: BaseException) -> GatewayError:
    """The status and reason for an exception raised by the library call.
    Every edge raises the project's own errors (the engines', the model
    providers', the workers' dispatch: workers.errors), so no search-engine,
    model or queue client library is imported or read here. A reason names
    the failing dependency, never its address: that detail goes to the log.
    Anything unforeseen is a 500 naming the exception; the
    traceback goes to the log, not to the caller."""
    from chunkrag_core.cancellation import Cancelled
    from chunkrag_core.engines.errors import EngineRefused, EngineTimeout, EngineUnavailable
    from chunkrag_core.providers.chat import ChatError
    from chunkrag_core.providers.embedding import EmbeddingError
    from chunkrag_core.providers.local_relevance import RelevanceError
    from chunkrag_filter.budget import BudgetSpent
    from chunkrag_gateway.dialect import OptionError
    from search_extension.retriever import IndexNotFound, RetrievalError, SearchFailed, SearchRefused, SearchRejected
    from workers.errors import QueueUnavailable, WorkersTimedOut, WorkersUnavailable

    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, Cancelled):  # its request's deadline passed (or its client went away)
        return timed_out(f"the request was stopped: {exc.reason}")
    if isinstance(exc, BudgetSpent):  # the stage it names decided nothing within budget_s
        return timed_out(str(exc))
    if isinstance(exc, SearchRefused):
        body = {"error": exc.error, "status": exc.status} if isinstance(exc.error, dict) else None
        return GatewayError(exc.status, "security_exception", str(exc), body=body)
    if isinstance(exc, SearchFailed):
        # The cluster's status and error (e.g. 503, every shard failed), as
        # it would answer the search directly.
        kind = exc.error.get("type") if isinstance(exc.error, dict) else None
        body = {"error": exc.error, "status": exc.status} if isinstance(exc.error, dict) else None
        return GatewayError(exc.status, kind or "search_phase_execution_exception", str(exc), body=body)
    if isinstance(exc, SearchRejected):
        # The cluster's own 4xx and error, as it answers a bad search directly.
        kind = exc.error.get("type") if isinstance(exc.error, dict) else None
        body = {"error": exc.error, "status": exc.status} if isinstance(exc.error, dict) else None
        return GatewayError(exc.status, kind or "illegal_argument_exception", str(exc), body=body)
    if isinstance(exc, IndexNotFound):
        return GatewayError(404, "index_not_found_exception", str(exc))
    if isinstance(exc, (OptionError, RetrievalError)):
        return bad_request(str(exc))
    if isinstance(exc, EngineRefused):
        # The cluster's own status and error body, as it would answer directly.
        return GatewayError(exc.status, f"{exc.engine.lower()}_exception", exc.reason, body=exc.body)
    if isinstance(exc, EngineTimeout):
        return timed_out(f"{exc.engine} did not answer in time", detail=exc)
    if isinstance(exc, EngineUnavailable):
        return unavailable(f"{exc.engine} is not reachable", detail=exc)
    if isinstance(exc, ChatError):
        return _from_chat_error(exc)
    if isinstance(exc, RelevanceError):  # an EmbeddingError, but not the embedder's
        log.warning("the relevance model failed: %s", exc)
        return GatewayError(502, "relevance_model_exception", "the relevance model failed")
    if isinstance(exc, EmbeddingError):
        log.warning("the embedding provider failed: %s", exc)
        return GatewayError(502, "embedding_provider_exception", "the embedding provider failed")
    if isinstance(exc, WorkersUnavailable):
        return unavailable(f"no Celery workers are available: {exc.reason}", detail=exc)
    if isinstance(exc, QueueUnavailable):
        return unavailable(exc.reason, detail=exc)
    if isinstance(exc, WorkersTimedOut):
        return timed_out(exc.reason, detail=exc)
    if isinstance(exc, TimeoutError):
        return timed_out("timed out", detail=exc if str(exc) else None)
    log.error("unexpected error in the gateway", exc_info=exc)
    return GatewayError(500, "gateway_exception", f"{type(exc).__name__}: {exc}")


def _from_chat_error(exc) -> GatewayError:
    # A timeout is "too slow"; a refused connection or a 429/5xx is "not
    # available now"; any other answer is the provider refusing the request.
    if exc.timed_out:
        return timed_out("the model provider did not answer in time", detail=exc)
    if exc.retryable:
        answered = f" (it answered {exc.status})" if exc.status else ""
        return unavailable(f"the model provider is unavailable (try again later){answered}", detail=exc)
    log.warning("the model provider failed (502): %s", exc)
    answered = f": it answered {exc.status}" if exc.status else ""
    return GatewayError(502, "model_provider_exception", f"the model provider failed{answered}")
