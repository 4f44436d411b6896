"""Refuse request bodies over the limit before anything parses them: by the
declared Content-Length at once, and by counting a streamed (chunked) body
as it arrives."""

from __future__ import annotations

import orjson
from starlette.exceptions import HTTPException

from search_extension.gateway import errors


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` mid-stream. An HTTPException because FastAPI
    passes those through its body parsing (anything else becomes a 400)."""

    def __init__(self, limit: int):
        super().__init__(413, errors.too_large(limit).reason)


class BodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared == -1:
            return await _send_error(send, errors.bad_request("the Content-Length header is not a number"))
        if declared is not None and declared > self.max_bytes:
            return await _send_error(send, errors.too_large(self.max_bytes))
        received = 0

        async def counted_receive():
            nonlocal received
            message = await receive()
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
        except BodyTooLarge:
            # Raised past FastAPI (which answers it itself), from the
            # pass-through lane: answer here unless a response has begun.
            if started:
                raise
            await _send_error(send, errors.too_large(self.max_bytes))


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
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), (b"x-elastic-product", b"Elasticsearch")]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
