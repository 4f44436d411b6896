"""The gateway's second line in service mode, on literal inputs: _msearch
bodies read exactly as Elasticsearch pairs them (or refused), clauses that
read another index by reference, the headers never forwarded, rate-limit
identities, and the paths the guard exempts."""

import base64

import pytest
from starlette.testclient import TestClient

from search_extension.gateway import errors
from search_extension.gateway.body_reads import (
    body_parameters,
    clears_all_scrolls,
    parse_msearch,
    referenced_indices,
    strict_json,
)
from search_extension.gateway.identity import credentials_identity, forwardable_header
from tests.unit.test_gateway_security import KEY_A, KEYS, KeyMakingTransport, app_client


def test_a_plain_msearch_body_is_read_in_pairs():
    body = b'{"index":"docs-1"}\n{"query":{"match_all":{}}}\n{}\n{}\n{"index":["a","b"],"preference":"x"}\n{"size":1}\n'
    assert parse_msearch(body) == [
        ({"index": "docs-1"}, {"query": {"match_all": {}}}),
        ({}, {}),
        ({"index": ["a", "b"], "preference": "x"}, {"size": 1}),
    ]


@pytest.mark.parametrize(
    "body, said",
    [
        (b'{"indices":"secret-docs"}\n{}\n', "accepts only"),
        (b'{"index":["docs-1", 7]}\n{}\n', "list"),
        (b'{"index":{"name":"secret"}}\n{}\n', "dict"),
        (b'{"index":"docs-1"}\n{}\n\n{"index":"secret"}\n{}\n', "blank line"),
        (b'\n{"index":"secret"}\n{}\n', "blank line"),
        (b'{"index":"docs-1"}\r\n{}\r\n', "carriage return"),
        (b'{"index":"docs-1"}\n{}\n{"index":"secret"}\n', "pairs"),
        (b'{"index":"docs-1"}\n{}', "newline"),
        (b'{"index":"docs-1","index":"secret"}\n{}\n', "duplicate key"),
        (b'{"index":"docs-1"} {"index":"secret"}\n{}\n', "strict JSON"),
        (b'{"index":"docs-1" /* c */}\n{}\n', "strict JSON"),
        (b"[]\n{}\n", "JSON objects"),
        (b'{"index":""}\n{}\n', "empty index"),
    ],
)
def test_msearch_bodies_read_otherwise_than_elasticsearch_are_refused(body, said):
    with pytest.raises(errors.GatewayError, match=said) as refused:
        parse_msearch(body)
    assert refused.value.status == 400


@pytest.mark.parametrize(
    "document, expected",
    [
        ({"query": {"terms": {"doc_id": {"index": "secret-docs", "id": "1", "path": "text"}}}}, ("secret-docs",)),
        (
            {"query": {"geo_shape": {"location": {"indexed_shape": {"index": "secret", "id": "1", "path": "s"}}}}},
            ("secret",),
        ),
        ({"query": {"shape": {"geometry": {"indexed_shape": {"id": "1"}}}}}, ("shapes",)),
        (
            {"query": {"more_like_this": {"fields": ["text"], "like": [{"_index": "secret", "_id": "1"}, "text"]}}},
            ("secret",),
        ),
        ({"query": {"more_like_this": {"unlike": {"_index": "a,secret", "doc": {"text": "x"}}}}}, ("a", "secret")),
        ({"query": {"percolate": {"field": "q", "index": "secret", "id": "1"}}}, ("secret",)),
        (
            {
                "knn": {
                    "field": "v",
                    "k": 1,
                    "query_vector_builder": {"lookup": {"index": "secret", "id": "1", "path": "v"}},
                }
            },
            ("secret",),
        ),
        (
            {"query": {"pinned": {"docs": [{"_index": "secret", "_id": "1"}], "organic": {"match_all": {}}}}},
            ("secret",),
        ),
        (
            {
                "runtime_mappings": {
                    "r": {
                        "type": "lookup",
                        "target_index": "secret",
                        "input_field": "a",
                        "target_field": "b",
                        "fetch_fields": ["c"],
                    }
                }
            },
            ("secret",),
        ),
        (
            {
                "retriever": {
                    "rrf": {
                        "retrievers": [
                            {
                                "standard": {
                                    "query": {
                                        "bool": {
                                            "filter": [{"terms": {"f": {"index": ["secret"], "id": "1", "path": "p"}}}]
                                        }
                                    }
                                }
                            }
                        ]
                    }
                }
            },
            ("secret",),
        ),
    ],
)
def test_clauses_that_read_another_index_are_found(document, expected):
    assert [indices for _, indices in referenced_indices(document)] == [expected]


def test_ordinary_bodies_reference_nothing():
    document = {
        "query": {
            "bool": {
                "must": [{"match": {"text": "x"}}],
                "filter": [{"term": {"_index": "docs-1"}}, {"terms": {"tag": ["a", "b"]}}],
            }
        },
        "sort": [{"_index": "asc"}],
        "aggs": {"t": {"terms": {"field": "_index"}}},
        "knn": {"field": "v", "query_vector": [0.1], "k": 1},
    }
    assert referenced_indices(document) == []


def test_the_walk_is_iterative_and_wrapper_queries_are_refused():
    deep = {"match_all": {}}
    for _ in range(5000):
        deep = {"bool": {"must": [deep]}}
    assert referenced_indices({"query": deep}) == []
    deep["bool"]["must"].append({"terms": {"f": {"index": "secret", "id": "1", "path": "p"}}})
    assert [i for _, i in referenced_indices({"query": deep})] == [("secret",)]
    with pytest.raises(errors.GatewayError, match="wrapper"):
        referenced_indices({"query": {"wrapper": {"query": base64.b64encode(b'{"match_all":{}}').decode()}}})
    with pytest.raises(errors.GatewayError, match="index as int"):
        referenced_indices({"query": {"terms": {"f": {"index": 3, "id": "1"}}}})
    with pytest.raises(errors.GatewayError) as too_deep:
        strict_json(b"[" * 100_000 + b"]" * 100_000, "the body")
    assert too_deep.value.status == 400


def test_the_strict_reader_measures_depth_before_parsing():
    from search_extension.gateway.body_reads import MAX_BODY_DEPTH, nesting_depth

    assert nesting_depth(1) == 0 and nesting_depth({"a": [1, {"b": []}]}) == 4
    at_limit = b"[" * MAX_BODY_DEPTH + b"]" * MAX_BODY_DEPTH
    assert nesting_depth(strict_json(at_limit, "the body")) == MAX_BODY_DEPTH
    # One level deeper is refused before Python's recursive parser could run out of stack.
    with pytest.raises(errors.GatewayError, match="nests deeper") as refused:
        strict_json(b"[" + at_limit + b"]", "the body")
    assert refused.value.status == 400


def test_raw_depth_counts_brackets_outside_strings_whatever_the_body_holds():
    from search_extension.gateway.body_reads import raw_nesting_depth

    assert raw_nesting_depth(b"") == 0 and raw_nesting_depth(b'{"a": [1, {"b": []}]}') == 4
    assert raw_nesting_depth(b'{"text": "[[[[{{{{ \\" ]]]] [[["}') == 1  # brackets and an escaped quote in a string
    assert raw_nesting_depth(b'{"budget_s": NaN, "w": [1e309]}') == 2  # not JSON orjson reads, still measured
    assert raw_nesting_depth(b"[" * 1100 + b"]" * 1100) == 1100


def test_bodies_in_url_parameters_and_clearing_every_scroll():
    assert body_parameters("source=%7B%7D&source_content_type=application/json&q=x") == [
        "source",
        "source_content_type",
    ]
    assert body_parameters("q=source&size=1") == []
    assert clears_all_scrolls("DELETE", ("_search", "scroll", "_all"), b"")
    assert clears_all_scrolls("DELETE", ("_search", "scroll", "abc,_all"), b"")
    assert clears_all_scrolls("DELETE", ("_search", "scroll"), b'{"scroll_id":"_all"}')
    assert clears_all_scrolls("DELETE", ("_search", "scroll"), b'{"scroll_id":["x","_all"]}')
    assert not clears_all_scrolls("DELETE", ("_search", "scroll"), b'{"scroll_id":["abc"]}')
    assert not clears_all_scrolls("POST", ("_search", "scroll"), b'{"scroll_id":"_all"}')


@pytest.mark.parametrize(
    "name",
    [
        b"es-security-runas-user",
        b"ES-Security-RunAs-User",
        b"es_security_runas_user",
        b"es-secondary-authorization",
        b"es-client-authentication",
        b"opendistro_security_impersonate_as",
        b"x-proxy-user",
        b"x-proxy-roles",
        b"x-forwarded-user",
        b"proxy-authorization",
        b"securitytenant",
    ],
)
def test_identity_headers_are_never_forwarded(name):
    assert not forwardable_header(name) and not forwardable_header(name, trusted_proxy=True)


def test_forwarding_headers_pass_only_from_a_trusted_proxy():
    for name in (b"x-forwarded-for", b"X-Real-IP", b"forwarded", b"x-forwarded-host"):
        assert not forwardable_header(name) and forwardable_header(name, trusted_proxy=True)
    for name in (b"content-type", b"accept", b"x-opaque-id", b"traceparent"):
        assert forwardable_header(name)


def test_rate_limit_identities_ignore_the_headers_spelling():
    token = base64.b64encode(b"alice:pw")
    spellings = [
        b"Basic " + token,
        b"basic " + token,
        b"BASIC " + token,
        b"Basic  " + token + b" ",
        b"\tBasic\t" + token,
    ]
    assert len({credentials_identity(value) for value in spellings}) == 1
    assert credentials_identity(b"Basic " + token) != credentials_identity(b"Basic " + base64.b64encode(b"alice:other"))
    assert credentials_identity(b"ApiKey " + base64.b64encode(b"id:key")) == credentials_identity(
        b"apikey   " + base64.b64encode(b"id:key")
    )
    assert "alice" not in credentials_identity(b"Basic " + token)


def test_a_path_under_v1_is_an_index_path_like_any_other():
    transport = KeyMakingTransport()
    client = app_client(transport, auth="service", api_keys=KEYS)
    team = {"authorization": f"ApiKey {KEY_A}"}
    for path in ("/v1/_search", "/v1/_count", "/v1/_msearch"):
        refused = client.post(
            path,
            content=b"{}\n{}\n" if "msearch" in path else b"{}",
            headers={**team, "content-type": "application/json"},
        )
        assert refused.status_code == 403 and "may not read index [v1]" in refused.json()["error"]["reason"], path
    assert client.post("/v1/_search", json={}).status_code == 401
    assert transport.requests == []


def test_service_mode_refuses_what_it_cannot_read_before_anything_is_sent():
    transport = KeyMakingTransport()
    client = TestClient(app_client(transport, auth="service", api_keys=KEYS).app)
    team = {"authorization": f"ApiKey {KEY_A}"}
    ndjson = {**team, "content-type": "application/x-ndjson"}
    lookup = {"query": {"terms": {"doc_id": {"index": "secret-docs", "id": "1", "path": "text"}}}, "profile": True}
    attempts = [
        client.post("/docs-1/_msearch", content=b'{"indices":"secret-docs"}\n{}\n', headers=ndjson),
        client.post("/docs-1/_msearch", content=b'{"index":["docs-1",1]}\n{}\n', headers=ndjson),
        client.post("/docs-1/_msearch", content=b'\n{"index":"secret-docs"}\n{}\n', headers=ndjson),
        client.post("/docs-1/_search", json=lookup, headers=team),
        client.post("/docs-1/_count", json={"query": lookup["query"]}, headers=team),
        client.post("/docs-1/_field_caps", json={"index_filter": lookup["query"]}, headers=team),
        client.post(
            "/docs-1/_search",
            json={"query": {"match": {"text": "a"}}, "ext": {"chunkrag": {}}, "post_filter": lookup["query"]},
            headers=team,
        ),
        client.get("/docs-1/_search?source=%7B%7D&source_content_type=application/json", headers=team),
        client.post(
            "/docs-1/_search",
            content=b"query:\n  match_all: {}\n",
            headers={**team, "content-type": "application/yaml"},
        ),
        client.delete("/_search/scroll/_all", headers=team),
        client.request("DELETE", "/_search/scroll", json={"scroll_id": ["_all"]}, headers=team),
    ]
    assert [a.status_code for a in attempts] == [400, 400, 400, 403, 403, 403, 403, 400, 400, 403, 403], [
        a.text for a in attempts
    ]
    assert [r for r in transport.requests if r[1] != "/_security/api_key"] == []
    allowed = client.post(
        "/docs-1/_search",
        json={"query": {"terms": {"doc_id": {"index": "faq", "id": "1", "path": "text"}}}},
        headers=team,
    )
    assert allowed.status_code == 200


def test_identity_headers_are_stripped_in_forward_mode_too():
    transport = KeyMakingTransport()
    client = app_client(transport)
    client.post(
        "/docs/_search",
        json={},
        headers={
            "authorization": "Basic dTpw",
            "es-security-runas-user": "admin",
            "x-forwarded-for": "1.2.3.4",
            "es-secondary-authorization": "Basic eDp5",
            "x-opaque-id": "kept",
        },
    )
    ((_, _, headers, _),) = transport.requests
    assert (
        b"es-security-runas-user" not in headers
        and b"x-forwarded-for" not in headers
        and b"es-secondary-authorization" not in headers
    )
    assert headers[b"x-opaque-id"] == b"kept" and headers[b"authorization"] == b"Basic dTpw"
    trusting = KeyMakingTransport()
    app_client(trusting, trusted_proxy=True).post(
        "/docs/_search", json={}, headers={"x-forwarded-for": "1.2.3.4", "es-security-runas-user": "admin"}
    )
    ((_, _, headers, _),) = trusting.requests
    assert headers[b"x-forwarded-for"] == b"1.2.3.4" and b"es-security-runas-user" not in headers


def test_the_rate_limit_counts_spellings_of_one_credential_as_one_caller():
    client = app_client(rate_per_s=0.001, rate_burst=2)
    token = base64.b64encode(b"alice:pw").decode()
    statuses = [
        client.post("/docs/_count", headers={"authorization": value}).status_code
        for value in (f"Basic {token}", f"BASIC {token}", f"basic  {token}")
    ]
    assert statuses == [200, 200, 429]


def test_derived_keys_are_made_once_rotated_at_half_life_and_invalidated():
    import asyncio

    import orjson

    from search_extension.gateway.derived_keys import DerivedKeys, create_body, security_is_off
    from search_extension.gateway.identity import ApiKey
    from search_extension.gateway.origin import HttpResponse

    sent, now = [], [0.0]

    async def send(method, target, headers, body):
        sent.append((method, target, dict(headers), orjson.loads(body)))
        return HttpResponse(200, (), orjson.dumps({"id": f"id-{len(sent)}", "encoded": f"enc-{len(sent)}"}))

    keys = DerivedKeys(
        send, [(b"authorization", b"Basic own")], ttl_s=3600, gateway_only_accepted=False, clock=lambda: now[0]
    )
    team = ApiKey("team", b"x" * 32, ("docs-*",))

    async def scenario():
        first = await asyncio.gather(*(keys.authorization(team) for _ in range(5)))
        now[0] = 1799.0
        same = await keys.authorization(team)
        now[0] = 1801.0
        rotated = await keys.authorization(team)
        await keys.invalidate_all()
        return first, same, rotated

    first, same, rotated = asyncio.run(scenario())
    assert set(first) == {same} == {b"ApiKey enc-1"} and rotated == b"ApiKey enc-2"
    assert [(m, t) for m, t, _, _ in sent] == [("POST", "/_security/api_key")] * 2 + [("DELETE", "/_security/api_key")]
    assert sent[-1][3] == {"ids": ["id-1", "id-2"], "owner": True} and all(
        h[b"authorization"] == b"Basic own" for _, _, h, _ in sent
    )
    assert create_body(team, 3600)["expiration"] == "3600s"
    assert security_is_off(400, b'{"error":"no handler found for uri [/_security/api_key] and method [POST]"}')
    assert not security_is_off(403, b'{"error":{"type":"security_exception"}}')


def test_a_derived_key_the_cluster_no_longer_accepts_is_made_again():
    from search_extension.gateway.origin import HttpResponse

    answers = [
        HttpResponse(
            401,
            (),
            b'{"error":{"type":"security_exception","reason":"unable to authenticate with provided credentials"}}',
        )
    ]

    def reply(method, target):
        return answers.pop() if answers else HttpResponse(200, (), b'{"hits":{"hits":[]}}')

    transport = KeyMakingTransport(reply)
    client = app_client(transport, auth="service", api_keys=KEYS)
    team = {"authorization": f"ApiKey {KEY_A}"}
    refused = client.post("/docs-1/_search", json={}, headers=team)
    assert refused.status_code == 503 and "unable to authenticate" not in refused.text
    assert client.post("/docs-1/_search", json={}, headers=team).status_code == 200
    assert [t for _, t, _, _ in transport.requests].count("/_security/api_key") == 2


def test_service_mode_on_opensearch_says_at_start_that_the_gateway_enforces_alone(caplog):
    import logging

    from chunkrag_core.settings import GatewaySettings, Settings
    from search_extension.gateway import create_app
    from tests.unit.test_gateway_app import FakeElasticsearch, FakeEmbedder, FakeModel, judge_factory

    settings = Settings(
        search_backend="opensearch",
        opensearch_url="http://gw:pw@os.internal:9201",
        gateway=GatewaySettings(auth="service", api_keys=KEYS),
    )
    transport = KeyMakingTransport()
    app = create_app(
        settings,
        es=FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=FakeModel(),
        judge_many_factory=judge_factory,
        http_transport=transport,
    )
    with caplog.at_level(logging.WARNING, logger="search_extension.gateway.app"), TestClient(app) as client:
        assert client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"}).status_code == 200
    assert "gateway's own checks only" in caplog.text
    ((_, target, headers, _),) = transport.requests  # no API key is made on OpenSearch
    assert target == "/docs-1/_search" and headers[b"authorization"] == b"Basic " + base64.b64encode(b"gw:pw")


def test_service_mode_asks_for_uncompressed_answers_it_can_read():
    transport = KeyMakingTransport()
    client = app_client(transport, auth="service", api_keys=KEYS)
    client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}", "accept-encoding": "gzip"})
    assert b"accept-encoding" not in transport.requests[-1][2]
