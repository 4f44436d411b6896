"""The playground: a page beside the gateway to see why each chunk was kept
or dropped, compare two filter settings, run a small query set, and copy the
request it made.

The page is static (HTML, CSS, one script, in ``playground/``): everything it
shows comes from the gateway's public API (``POST /{index}/_search`` with
``ext.chunkrag`` and ``include_dropped``, a plain ``_search`` for a chunk's
neighbours), called from the browser with the credentials typed into it, so
what it shows is exactly what any client gets. Its files carry no data and
are public (the login form is on the page); the one route here that reads
anything, the index list, goes through the guard like any other.

The index list says of each index whether it is a chunk index (``chunkrag
ingest`` wrote it: chunk mode) or an index of the caller's own (post-search
mode), and for the latter its text fields and title field, read from the
cluster's ``_field_caps`` with the caller's credentials (field-level security
applies) by the same rules post-search uses (``text_fields.py``).
"""

from __future__ import annotations

import asyncio
from functools import cache
from importlib import resources
from typing import Any, Sequence
from urllib.parse import quote

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from chunkrag_core.engines.base import field_types_of
from chunkrag_gateway import errors
from chunkrag_gateway.identity import Caller, check_indices
from chunkrag_gateway.passthrough import Passthrough
from chunkrag_gateway.responses import es_json
from search_extension.routing import kinds_of
from search_extension.text_fields import (
    FieldError,
    configured_fields,
    fields_for_index,
    parse_field_patterns,
)

PAGE = "/v1/playground"
# path -> (file in playground/, media type)
ASSETS = {
    PAGE: ("index.html", "text/html; charset=utf-8"),
    f"{PAGE}/app.js": ("app.js", "text/javascript; charset=utf-8"),
    f"{PAGE}/style.css": ("style.css", "text/css; charset=utf-8"),
}
# The guard lets exactly these through without credentials.
PUBLIC_PATHS = tuple(ASSETS)
INDICES = f"{PAGE}/indices"

# Only the gateway's own script, styles and API: no inline script or style,
# no other origin, no plugin, no form submission (the login form is handled
# in script and must never post credentials anywhere), no framing.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",
}
# Where app.js takes the filter's defaults (page_defaults), written in as the script is served.
DEFAULTS_MARK = b"{/* the gateway writes the filter's defaults here */}"
# What the index list asks the cluster: open indices and aliases, which the
# cluster filters by the credentials' privileges (view_index_metadata).
RESOLVE = "/_resolve/index/*?expand_wildcards=open"
# Indices of one list described (chunk index or not, text fields): a
# _field_caps request each. Past this many the rest are listed undescribed
# ("unknown": the gateway decides at search time, as for any client).
DESCRIBED_INDICES = 100
# _field_caps requests of one index list in flight at once.
DESCRIBE_CONCURRENCY = 4


def mount(app: FastAPI, passthrough: Passthrough) -> None:
    """Add the page's routes to ``app`` (out of the OpenAPI document: they are
    not part of the search API)."""
    max_candidates = passthrough.settings.gateway.max_candidates
    for path, (name, media_type) in ASSETS.items():
        app.add_api_route(
            path, _asset_route(name, media_type, max_candidates), methods=["GET"], include_in_schema=False
        )

    patterns = parse_field_patterns(passthrough.settings.post_search.fields)

    async def indices(request: Request) -> Response:
        caller = getattr(request.state, "caller", None) or Caller()
        return await readable_indices(passthrough, caller, patterns)

    app.add_api_route(INDICES, indices, methods=["GET"], include_in_schema=False)


async def readable_indices(passthrough: Passthrough, caller: Caller, patterns: Sequence = ()) -> Response:
    """The indices and aliases ``caller`` may read, each described (see
    :func:`describe`). Forward mode: the cluster answers with the caller's
    credentials and lists only what they may see (a 401 or 403 comes back as
    it is, which is how the page's login learns the credentials are wrong).
    Service mode: the key's derived credentials (or the gateway's), then only
    names inside the gateway key's patterns."""
    response = await passthrough.forward("GET", RESOLVE, [(b"accept", b"application/json")], b"", caller)
    if response.status_code != 200:
        return _without_challenge(response)
    try:
        resolved = orjson.loads(response.body)
    except orjson.JSONDecodeError as exc:
        raise errors.GatewayError(
            502, "bad_gateway_exception", f"the cluster's index list is not JSON: {exc}"
        ) from None
    names = {entry.get("name") for kind in ("indices", "aliases") for entry in resolved.get(kind, ())}
    # Dot-names are system and hidden indices: never chunk indices.
    listed = sorted(
        name for name in names if isinstance(name, str) and not name.startswith(".") and _may_read(caller, name)
    )
    gate = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def described(name: str) -> dict[str, Any]:
        async with gate:
            return await describe(passthrough, caller, name, patterns)

    shown = await asyncio.gather(*(described(name) for name in listed[:DESCRIBED_INDICES]))
    unknown = {"kind": "unknown", "reason": f"not described: the list describes its first {DESCRIBED_INDICES}"}
    kinds = dict(zip(listed, shown)) | {name: unknown for name in listed[DESCRIBED_INDICES:]}
    return es_json({"indices": listed, "described": kinds}, 200)


async def describe(passthrough: Passthrough, caller: Caller, name: str, patterns: Sequence = ()) -> dict[str, Any]:
    """What a search with ``ext.chunkrag`` on ``name`` does, as the gateway
    decides it: ``{"kind": "chunks"}`` for a chunk index; for any other
    ``{"kind": "existing", "fields": [...], "title": ...}`` (post-search, the
    text fields it splits, the passages' header), with ``problem`` when the
    configured fields do not fit; ``{"kind": "unknown", "reason": ...}`` when
    the cluster would not list its fields for these credentials."""
    target = f"/{quote(name, safe='')}/_field_caps?fields=*"
    response = await passthrough.forward("GET", target, [(b"accept", b"application/json")], b"", caller)
    try:
        answer = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        answer = None
    if response.status_code != 200 or not isinstance(answer, dict):
        return {"kind": "unknown", "reason": f"_field_caps answered {response.status_code}"}
    return kind_of(field_types_of(answer), configured_fields(patterns, name))


def kind_of(types, configured: Sequence[str] = ()) -> dict[str, Any]:
    """A field listing's kind and text fields (pure: see :func:`describe`)."""
    if kinds_of({"": types})[0].ingested:  # a companion is post-searched, as the gateway routes it
        return {"kind": "chunks"}
    try:
        found = fields_for_index(types, configured=configured)
    except FieldError as exc:
        return {"kind": "existing", "fields": [], "title": "", "left_out": {}, "problem": str(exc)}
    return {"kind": "existing", "fields": list(found.fields), "title": found.title, "left_out": dict(found.left_out)}


def _may_read(caller: Caller, name: str) -> bool:
    try:
        check_indices(caller, (name,), what="the playground")
    except errors.GatewayError:
        return False
    return True


def _without_challenge(response: Response) -> Response:
    """The cluster's refusal without its ``WWW-Authenticate``: a browser seeing
    a Basic challenge may ask for a password itself and keep it, outside the
    page's memory."""
    response.raw_headers = [
        (name, value) for name, value in response.raw_headers if name.lower() != b"www-authenticate"
    ]
    return response


def page_defaults(max_candidates: int) -> dict:
    """What the page offers and starts from, read from the options'
    declaration and the library's constants, never written in the script."""
    from chunkrag_filter.pipeline import JUDGE_TOP_WHEN_ASKED, RELEVANCE_SOURCES, RERANKERS
    from chunkrag_filter.processors.gate import GATES
    from search_extension.ask import DEFAULT_CANDIDATES
    from search_extension.options import MAX_PASSAGES_LIMIT, OptionsModel
    from search_extension.post_search import EMPTY_HITS
    from search_extension.queries import MODES

    declared = OptionsModel.model_fields
    return {
        "modes": list(MODES),
        "candidates": min(DEFAULT_CANDIDATES, max_candidates),
        "max_candidates": max_candidates,
        "fixed_threshold": declared["fixed_threshold"].default,
        "judge_top": JUDGE_TOP_WHEN_ASKED,
        # Post-search (an index of the caller's own): what a hit without a kept passage becomes, and
        # the passages per hit that go to the filter.
        "empty_hits": list(EMPTY_HITS),
        "empty_hits_default": declared["empty_hits"].default,
        "max_passages": declared["max_passages"].default,
        "max_passages_limit": MAX_PASSAGES_LIMIT,
        # What scores the candidates besides the judge (the project's relevance model: crossencoder),
        # and what orders the kept ones (local: that model).
        "relevance": list(RELEVANCE_SOURCES),
        "relevance_default": declared["relevance"].default,
        "reranks": list(RERANKERS),
        "rerank_default": declared["rerank"].default,
        # Whether anything retrieved is relevant at all, decided before any chunk is kept.
        "gates": list(GATES),
        "gate_default": declared["gate"].default,
    }


def _asset_route(name: str, media_type: str, max_candidates: int):
    async def asset() -> Response:
        return Response(_served(name, max_candidates), media_type=media_type, headers=SECURITY_HEADERS)

    return asset


@cache
def _served(name: str, max_candidates: int) -> bytes:
    body = _read(name)
    if name != "app.js":
        return body
    if body.count(DEFAULTS_MARK) != 1:
        raise RuntimeError(f"playground/app.js must hold {DEFAULTS_MARK.decode()} once")
    return body.replace(DEFAULTS_MARK, orjson.dumps(page_defaults(max_candidates)))


@cache
def _read(name: str) -> bytes:
    return resources.files("chunkrag_gateway").joinpath("playground", name).read_bytes()
