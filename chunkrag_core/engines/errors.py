"""The few failures a search engine request ends in, whichever engine.

Each backend translates its client's exceptions (``elasticsearch``,
``opensearch-py``) into these, so nothing past the seam imports a client
library to read an error. The message (``str``) is the full detail, address
included, for logs and the command line; ``engine`` names the engine for
callers that must not see the address (the gateway's error bodies).
"""

from __future__ import annotations

from typing import Any


class EngineError(RuntimeError):
    """A request to the search engine failed."""

    def __init__(self, message: str, *, engine: str):
        super().__init__(message)
        # "Elasticsearch" or "OpenSearch", for messages that name no address.
        self.engine = engine


class EngineUnavailable(EngineError):
    """The engine could not be reached (refused, unresolvable, TLS failed), or is not healthy."""


class EngineTimeout(EngineError):
    """The engine did not answer within the request timeout."""


class EngineRefused(EngineError):
    """The engine answered with an error status; ``body`` is its own error
    body (``{"error": ..., "status": ...}``) when it sent one, ``reason`` its
    short description of the error."""

    def __init__(self, message: str, *, engine: str, status: int, body: dict[str, Any] | None = None, reason: str = ""):
        super().__init__(message, engine=engine)
        self.status, self.body, self.reason = status, body, reason or message


class EngineNotFound(EngineRefused):
    """404: the index (or document, or endpoint) does not exist."""


def refused(engine: str, status: int, body: Any, reason: str, where: str) -> EngineRefused:
    """An :class:`EngineRefused` (or :class:`EngineNotFound` for a 404) for an
    error answer; ``body`` is kept only when it is an engine error body."""
    kind = EngineNotFound if status == 404 else EngineRefused
    kept = body if isinstance(body, dict) and "error" in body else None
    message = f"{engine} at {where} answered {status}: {reason}"
    return kind(message, engine=engine, status=status, body=kept, reason=reason)
