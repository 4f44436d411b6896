"""JSON responses the way Elasticsearch sends them, so the official clients
accept them: the product header, and the media type they asked for."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from chunkrag_gateway import errors

# The 9.x client asks for this media type; Elasticsearch answers in kind.
COMPATIBLE_JSON = "application/vnd.elasticsearch+json;compatible-with=9"


def es_json(payload: Any, status: int, accept: str = "", headers: dict[str, str] | None = None) -> Response:
    media_type = COMPATIBLE_JSON if "vnd.elasticsearch+json" in accept else "application/json"
    # The official clients check this header on every 2xx response.
    return Response(
        orjson.dumps(payload),
        status_code=status,
        media_type=media_type,
        headers={"x-elastic-product": "Elasticsearch", **(headers or {})},
    )


def error_response(error: errors.GatewayError, accept: str = "") -> Response:
    return es_json(errors.body_of(error), error.status, accept, error.headers)


def accept_of(scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"accept":
            return value.decode("latin-1")
    return ""
