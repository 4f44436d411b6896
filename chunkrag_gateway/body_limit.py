"""Refuse request bodies over the limit before anything parses them: by the
declared Content-Length at once, and by counting a streamed (chunked) body
as it arrives. A body that does not arrive in time is a 408: a slow sender
would otherwise hold a connection and a slot for as long as it likes."""

from __future__ import annotations

import asyncio

import orjson
from starlette.exceptions import HTTPException

from chunkrag_gateway import errors, telemetry


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` mid-stream. An HTTPException because FastAPI
    passes those through its body parsing (anything else becomes a 400)."""

    def __init__(self, limit: int):
        super().__init__(413, errors.too_large(limit).reason)


class BodyTooSlow(HTTPException):
    def __init__(self, timeout_s: float):
        super().__init__(408, body_timeout(timeout_s).reason)


def body_timeout(timeout_s: float) -> errors.GatewayError:
    return errors.GatewayError(
        408,
        "timeout_exception",
        f"the request body did not arrive within {timeout_s:g} s (CHUNKRAG_GATEWAY_BODY_TIMEOUT_S)",
    )


class BodyLimit:
    def __init__(self, app, max_bytes: int, timeout_s: float = 30.0):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared == -1:
            return await _send_error(send, errors.bad_request("the Content-Length header is not a number"))
        if declared is not None and declared > self.max_bytes:
            return await _send_error(send, errors.too_large(self.max_bytes))
        received = 0
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        complete = False

        async def counted_receive():
            nonlocal received, complete
            if complete:  # later calls wait for a disconnect: no deadline
                return await receive()
            try:
                # asyncio's own timeout: anyio's cancel scope cost more than
                # the rest of this middleware (measured: ~20 us per request).
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                telemetry.note(scope, shed="body_timeout")
                raise BodyTooSlow(self.timeout_s) from None
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        started = False

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except (BodyTooLarge, BodyTooSlow) as exc:
            # Raised past FastAPI (which answers it itself), from the
            # pass-through lane: answer here unless a response has begun.
            if started:
                raise
            await _send_error(
                send,
                errors.too_large(self.max_bytes) if isinstance(exc, BodyTooLarge) else body_timeout(self.timeout_s),
            )


def _content_length(scope) -> int | None:
    """The declared length; None when absent, -1 when unreadable."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None


async def _send_error(send, error: errors.GatewayError) -> None:
    payload = orjson.dumps(errors.body_of(error))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"x-elastic-product", b"Elasticsearch"),
    ]
    headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
