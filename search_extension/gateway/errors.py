"""Errors in Elasticsearch's shape, so the official clients raise their usual
exceptions (BadRequestError for 400, NotFoundError for 404, ApiError else)
and show the reason; and the mapping from library failures to a status."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("chunkrag.gateway")


class GatewayError(Exception):
    """A failure the gateway answers with ``status`` and an ES-shaped body."""

    def __init__(self, status: int, type_: str, reason: str, *, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.status, self.type, self.reason = status, type_, reason
        # Elasticsearch's own error body, passed on unchanged when it has one.
        self.body = body
        # Retry-After on a 429, WWW-Authenticate on a 401.
        self.headers = dict(headers or {})


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
    return GatewayError(413, "content_too_long_exception", f"request body is larger than the gateway's limit of {limit} bytes (CHUNKRAG_GATEWAY_MAX_BODY_BYTES)")


def too_many(reason: str, retry_after_s: float) -> GatewayError:
    """429 in Elasticsearch's own shape for a full queue; clients back off."""
    seconds = max(1, int(-(-retry_after_s // 1)))
    return GatewayError(429, "es_rejected_execution_exception", reason, headers={"retry-after": str(seconds)})


def forbidden_endpoint(reason: str) -> GatewayError:
    return GatewayError(403, "security_exception", reason)


def unavailable(reason: str) -> GatewayError:
    return GatewayError(503, "unavailable_exception", reason)


def timed_out(reason: str) -> GatewayError:
    return GatewayError(504, "timeout_exception", reason)


def from_exception(exc: BaseException, *, es_url: str) -> GatewayError:
    """The status and reason for an exception raised by the library call.
    Anything unforeseen is a 500 naming the exception; the traceback goes to
    the log, not to the caller."""
    import elasticsearch

    from chunkrag_core.providers.chat import ChatError
    from chunkrag_core.providers.embedding import EmbeddingError
    from search_extension.gateway.dialect import OptionError
    from search_extension.retriever import IndexNotFound, RetrievalError, SearchRefused

    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, SearchRefused):
        body = {"error": exc.error, "status": exc.status} if isinstance(exc.error, dict) else None
        return GatewayError(exc.status, "security_exception", str(exc), body=body)
    if isinstance(exc, IndexNotFound):
        return GatewayError(404, "index_not_found_exception", str(exc))
    if isinstance(exc, (OptionError, RetrievalError)):
        return bad_request(str(exc))
    if isinstance(exc, elasticsearch.ApiError):
        body = exc.body if isinstance(exc.body, dict) and "error" in exc.body else None
        return GatewayError(exc.meta.status, "elasticsearch_exception", str(exc.message), body=body)
    if isinstance(exc, elasticsearch.ConnectionTimeout):
        return timed_out(f"Elasticsearch at {es_url} did not answer in time: {exc}")
    if isinstance(exc, elasticsearch.TransportError):
        return unavailable(f"Elasticsearch at {es_url} is not reachable: {exc}")
    if (type(exc).__module__ or "").startswith("opensearchpy"):
        return _from_opensearch_error(exc, es_url)
    if isinstance(exc, ChatError):
        return _from_chat_error(exc)
    if isinstance(exc, EmbeddingError):
        return GatewayError(502, "embedding_provider_exception", f"the embedding provider failed: {exc}")
    if (mapped := _from_queue_error(exc)) is not None:
        return mapped
    if isinstance(exc, TimeoutError):
        return timed_out(f"timed out: {exc}" if str(exc) else "timed out")
    log.error("unexpected error in the gateway", exc_info=exc)
    return GatewayError(500, "gateway_exception", f"{type(exc).__name__}: {exc}")


def _from_opensearch_error(exc, url: str) -> GatewayError:
    """opensearch-py's exceptions, as the Elasticsearch client's are mapped
    above: the cluster's own status and error body, 503 when it cannot be
    reached, 504 when it is too slow."""
    import opensearchpy

    if isinstance(exc, opensearchpy.ConnectionTimeout):
        return timed_out(f"OpenSearch at {url} did not answer in time: {exc}")
    if isinstance(exc, opensearchpy.ConnectionError):
        return unavailable(f"OpenSearch at {url} is not reachable: {exc}")
    if isinstance(exc, opensearchpy.TransportError) and isinstance(exc.status_code, int):
        body = exc.info if isinstance(exc.info, dict) and "error" in exc.info else None
        return GatewayError(exc.status_code, "opensearch_exception", str(exc.error), body=body)
    log.error("unexpected OpenSearch client error in the gateway", exc_info=exc)
    return GatewayError(500, "gateway_exception", f"{type(exc).__name__}: {exc}")


def _from_chat_error(exc) -> GatewayError:
    if not exc.retryable:
        return GatewayError(502, "model_provider_exception", f"the model provider failed: {exc}")
    import openai

    # The chat adapter wraps the client's exception; a timeout is "too slow",
    # a refused connection or a 429/5xx is "not available now".
    if isinstance(exc.__cause__, openai.APITimeoutError):
        return timed_out(f"the model provider did not answer in time: {exc}")
    return unavailable(f"the model provider is unavailable (try again later): {exc}")


def _from_queue_error(exc: BaseException) -> GatewayError | None:
    """Redis, Celery and worker failures, without importing Celery unless a
    Celery exception can be in play."""
    import redis

    if isinstance(exc, redis.exceptions.ConnectionError):
        return unavailable(f"Redis is not reachable: {exc}")
    module = type(exc).__module__ or ""
    if module.startswith("workers"):
        from workers.dispatch import WorkersUnavailable

        if isinstance(exc, WorkersUnavailable):
            return unavailable(f"no Celery workers are available: {exc}")
    if module.startswith(("kombu", "celery")):
        from celery.exceptions import TimeoutError as CeleryTimeout
        from kombu.exceptions import OperationalError

        if isinstance(exc, OperationalError):
            return unavailable(f"the Celery broker (Redis) is not reachable: {exc}")
        if isinstance(exc, CeleryTimeout):
            return timed_out(f"the workers did not finish in time: {exc}")
    return None
