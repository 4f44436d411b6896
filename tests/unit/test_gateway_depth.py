"""Deeply nested bodies under every field the gateway reads: always a 4xx
(or, for what it forwards, the engine's own answer), never a 500. orjson
parses up to 1024 levels; the gateway refuses more than MAX_BODY_DEPTH in a
body it decodes itself."""

from __future__ import annotations

import orjson
import pytest
from starlette.testclient import TestClient

from chunkrag_gateway.app import MAX_BODY_DEPTH
from chunkrag_gateway.models import OptionsModel, ScoringModel, SegmentsModel
from tests.unit.test_gateway_app import RecordingTransport, es_reply, make_client

DEPTHS = (MAX_BODY_DEPTH - 1, MAX_BODY_DEPTH + 1, 900, 1000, 1023, 1100)
QUERY = {"match": {"text": "what do cats eat"}}


def deep(depth: int, kind: str) -> str:
    """A JSON value ``depth`` levels deep: objects, lists, or bool queries."""
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    levels = depth // 4  # {"bool":{"must":[{ ... }]}} is four levels a step
    return '{"bool":{"must":[' * levels + orjson.dumps(QUERY).decode() + "]}}" * levels


def with_value(template: dict, path: tuple[str, ...], value: str) -> str:
    """``template`` as JSON with ``value`` (raw JSON) at ``path``."""
    marker = "\u0000DEEP\u0000"
    document = orjson.loads(orjson.dumps(template))
    target = document
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = marker
    return orjson.dumps(document).decode().replace(orjson.dumps(marker).decode(), value)


def option_paths(prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    paths = [(*prefix, name) for name in OptionsModel.model_fields] + [(*prefix, "unknown_option")]
    paths += [(*prefix, "scoring", name) for name in ScoringModel.model_fields]
    paths += [(*prefix, "segments", name) for name in SegmentsModel.model_fields]
    return paths


SEARCH_PATHS = [
    ("query",),
    ("query", "match", "text"),
    ("size",),
    ("from",),
    ("knn",),
    ("_source",),
    ("ext",),
    ("ext", "chunkrag"),
    *option_paths(("ext", "chunkrag")),
]
ASK_PATHS = [("index",), ("question",), ("options",), ("extra",), *option_paths(("options",))]


@pytest.fixture(scope="module")
def client():
    _, app = make_client(RecordingTransport(es_reply), max_body_bytes=10_000_000, passthrough="read")
    return TestClient(app, raise_server_exceptions=False)


def refused_or_forwarded(response) -> bool:
    """A 4xx, or a 200: served, or (without ext.chunkrag) forwarded."""
    return 400 <= response.status_code < 500 or response.status_code == 200


@pytest.mark.parametrize("kind", ["object", "list", "bool"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_filtered_search_never_answers_500(client, depth, kind):
    template = {"query": QUERY, "ext": {"chunkrag": {"stages": False}}}
    for path in SEARCH_PATHS:
        response = client.post("/idx/_search", content=with_value(template, path, deep(depth, kind)))
        assert refused_or_forwarded(response), (path, response.status_code, response.text[:300])


@pytest.mark.parametrize("kind", ["object", "list"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_ask_never_answers_500(client, depth, kind):
    template = {"index": "idx", "question": "what do cats eat", "options": {"stages": False}}
    for path in ASK_PATHS:
        response = client.post(
            "/v1/ask",
            content=with_value(template, path, deep(depth, kind)),
            headers={"content-type": "application/json"},
        )
        assert refused_or_forwarded(response), (path, response.status_code, response.text[:300])


@pytest.mark.parametrize("depth", DEPTHS)
def test_msearch_and_plain_searches_are_forwarded_or_refused_never_500(client, depth):
    value = deep(depth, "object")
    bodies = {
        "/idx/_msearch": f'{{}}\n{{"query":{value}}}\n',
        "/_msearch": f'{{"index":"idx","x":{value}}}\n{{"query":{{"match_all":{{}}}}}}\n',
        "/idx/_search": f'{{"query":{value}}}',
        "/idx/_count": f'{{"query":{value}}}',
    }
    for path, body in bodies.items():
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        assert refused_or_forwarded(response), (path, response.status_code, response.text[:300])


def test_the_depth_limit_names_where_and_what():
    _, app = make_client(RecordingTransport(es_reply), max_body_bytes=10_000_000)
    client = TestClient(app, raise_server_exceptions=False)
    response = client.post(
        "/idx/_search",
        content=with_value({"query": QUERY, "ext": {"chunkrag": {}}}, ("ext", "chunkrag", "query"), deep(300, "list")),
    )
    assert response.status_code == 400
    reason = response.json()["error"]["reason"]
    assert "body.ext.chunkrag.query[0][0]" in reason and f"limit of {MAX_BODY_DEPTH} levels" in reason
