"""Nesting is measured before FastAPI decodes a body itself.

FastAPI reads a pydantic-model body (``/v1/ask``) with Python's recursive
``json.loads`` and turns any exception into a 400. A body nested close to the
recursion limit then raises RecursionError inside the parser, and CPython
3.11 may leave its recursion bookkeeping off after catching one (later
``ast`` calls fail with SystemError). So such bodies are decoded here first,
measured from their brackets (outside strings, without parsing), and
refused past the gateway's depth limit; what passes is replayed to FastAPI
unchanged, which reports anything else wrong with it as before.
"""

from __future__ import annotations

from chunkrag_gateway import errors
from chunkrag_gateway.body_reads import MAX_BODY_DEPTH, raw_nesting_depth
from chunkrag_gateway.lane import read_body, replay
from chunkrag_gateway.responses import accept_of, error_response

# The gateway's routes whose JSON body FastAPI decodes into a model.
MODEL_ROUTES = frozenset({"/v1/ask"})


class BodyDepth:
    def __init__(self, app, routes: frozenset[str] = MODEL_ROUTES):
        self.app, self.routes = app, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.routes:
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:
            return  # the client went away
        try:
            refuse_deep(body)
        except errors.GatewayError as exc:
            return await error_response(exc, accept_of(scope))(scope, receive, send)
        await self.app(scope, replay(body, receive), send)


def refuse_deep(body: bytes) -> None:
    """A 400 for a body that nests past the limit."""
    if raw_nesting_depth(body) > MAX_BODY_DEPTH:
        raise errors.bad_request(f"the request body nests deeper than the gateway's limit of {MAX_BODY_DEPTH} levels")
