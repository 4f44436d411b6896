"""The gateway's second line in service mode, on literal inputs: _msearch
bodies read exactly as Elasticsearch pairs them (or refused), clauses that
read another index by reference, the headers never forwarded, rate-limit
identities, and the paths the guard exempts."""

import base64
import json

import pytest
from starlette.testclient import TestClient

from chunkrag_gateway import errors
from chunkrag_gateway.body_reads import (
    body_parameters,
    clears_all_scrolls,
    parse_msearch,
    referenced_indices,
    strict_json,
)
from chunkrag_gateway.identity import credentials_identity, forwardable_header
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


def test_the_strict_reader_takes_what_elasticsearchs_parser_takes_and_never_recurses():
    from chunkrag_gateway.body_reads import MAX_FORWARDED_DEPTH, nesting_depth

    assert nesting_depth(1) == 0 and nesting_depth({"a": [1, {"b": []}]}) == 4
    # Elasticsearch parses 1,000 levels (Jackson's limit): so does the second line, without recursion.
    at_limit = b"[" * MAX_FORWARDED_DEPTH + b"]" * MAX_FORWARDED_DEPTH
    assert MAX_FORWARDED_DEPTH == 1000 and nesting_depth(strict_json(at_limit, "the body")) == MAX_FORWARDED_DEPTH
    chain = {"match_all": {}}
    for _ in range(100):  # a 100-deep bool chain: 302 levels, the cluster's own to refuse
        chain = {"bool": {"must": [chain]}}
    assert strict_json(json.dumps({"query": chain}).encode(), "the body") == {"query": chain}
    with pytest.raises(errors.GatewayError, match="nests deeper") as refused:
        strict_json(b"[" + at_limit + b"]", "the body")
    assert refused.value.status == 400


def test_the_strict_reader_finds_duplicate_keys_however_they_are_spelled_or_nested():
    for body in (
        b'{"a": 1, "a": 2}',
        b'{"q": {"x": [{"b": 1, "c": "\\"b\\": 2", "b": 3}]}}',
        b'{"index": "x", "\\u0069ndex": "y"}',
        b'{"a" : 1, "a"\n:2}',
    ):
        with pytest.raises(errors.GatewayError, match="duplicate key") as refused:
            strict_json(body, "the body")
        assert refused.value.status == 400, body
    # The same key in sibling objects, and brackets and colons inside strings, are no duplicates.
    assert strict_json(b'{"a": {"b": 1}, "c": {"b": 2}, "d": "{\\"a\\": [", "e": ["a", "a:"]}', "the body")["c"] == {
        "b": 2
    }


def test_raw_depth_counts_brackets_outside_strings_whatever_the_body_holds():
    from chunkrag_gateway.body_reads import raw_nesting_depth

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
    for name in (b"content-type", b"accept", b"x-opaque-id", b"traceparent", b"X-Opaque-Id", b"TraceParent"):
        assert forwardable_header(name)


CALLER_ONLY_HEADERS = (
    "x-elastic-product-origin",
    "x-elastic-internal-origin",
    "x-found-handling-cluster",
    "x-elastic-app-auth",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-rewrite-url",
    "cf-connecting-ip",
    "x-cluster-client-ip",
    "run-as",
    "x-made-up-header",
)


@pytest.mark.parametrize("name", CALLER_ONLY_HEADERS)
def test_only_the_allow_listed_headers_reach_the_cluster_in_any_spelling(name):
    for spelling in (name, name.upper(), name.title(), name.replace("-", "_"), f" {name}"):
        raw = spelling.encode()
        assert not forwardable_header(raw) and not forwardable_header(raw, trusted_proxy=True), spelling
    # The tracing headers pass, exactly as spelled; an underscore spelling is another header.
    assert forwardable_header(b"x-opaque-id") and not forwardable_header(b"x_opaque_id")


def test_error_trace_is_never_sent_to_the_cluster():
    from chunkrag_gateway.passthrough import without_error_trace

    assert without_error_trace("/a/_search?error_trace=true") == "/a/_search"
    assert without_error_trace("/a/_search?size=1&error_trace=true&q=x") == "/a/_search?size=1&q=x"
    assert without_error_trace("/a/_search?%65rror_trace=true&pretty") == "/a/_search?pretty"
    assert without_error_trace("/a/_search?error_trace&error_trace=1") == "/a/_search"
    assert without_error_trace("/a/_search?q=error_trace%3Dtrue") == "/a/_search?q=error_trace%3Dtrue"
    assert without_error_trace("/a%2Cb/_search") == "/a%2Cb/_search"


def test_a_body_that_does_not_decode_as_its_coding_says_is_a_400_naming_it():
    import gzip
    import zlib

    from chunkrag_gateway.body_reads import check_content_coding, content_coding

    body = b'{"size": 0}'
    raw_deflate = zlib.compressobj(wbits=-15)
    for coding, encoded in (
        ("gzip", gzip.compress(body)),
        ("x-gzip", gzip.compress(body)),
        ("deflate", zlib.compress(body)),
        ("deflate", raw_deflate.compress(body) + raw_deflate.flush()),
        ("br", body),  # not decoded by the cluster either: its own answer
        (None, body),
    ):
        check_content_coding(coding, encoded)
    for coding, encoded in (
        ("deflate", gzip.compress(body)),
        ("gzip", zlib.compress(body)),
        ("gzip", body),
        ("x-deflate", b"\x1f\x8b garbage"),
        ("snappy", body),
    ):
        with pytest.raises(errors.GatewayError) as refused:
            check_content_coding(coding, encoded)
        assert refused.value.status == 400 and f"[{coding}]" in refused.value.reason, (coding, refused.value.reason)
    assert content_coding([(b"Content-Encoding", b" DEFLATE ")]) == "deflate"
    with pytest.raises(errors.GatewayError, match="one Content-Encoding"):
        content_coding([(b"content-encoding", b"gzip"), (b"content-encoding", b"deflate")])


def test_exclusions_after_an_allowed_expression_pass_and_nothing_else_does():
    from chunkrag_gateway.identity import ApiKey, Caller, check_indices

    caller = Caller(key=ApiKey("team", b"x" * 32, ("public-*",)), identity="key:team")
    for indices in (("public-*", "-nothing"), ("public-1", "-public-2", "-secret"), ("public-*", "-*")):
        check_indices(caller, indices, what="a search")
    for indices in (("-nothing",), ("-public-1",), ("public-*", "-nothing", "secret"), ("secret", "-x")):
        with pytest.raises(errors.GatewayError) as refused:
            check_indices(caller, indices, what="a search")
        assert refused.value.status == 403, indices


def test_refusals_quoted_as_text_are_reworded():
    from chunkrag_gateway.identity import scrub_security_errors

    quoted = (
        "[sec-other-1/abc] QueryShardException[...]; nested: ElasticsearchSecurityException[action "
        "[indices:admin/validate/query] is unauthorized for API key id [k1] of user [gateway-service]]"
    )
    answer = {
        "valid": False,
        "error": quoted,
        "explanations": [{"index": "x", "valid": False, "error": quoted}],
        "notes": [quoted, "fine"],
        "hits": {"hits": [{"_source": {"text": quoted}}]},
        "failure": {"type": "security_exception", "reason": quoted},
    }
    assert scrub_security_errors(answer, "REWORDED")
    assert answer["error"] == "REWORDED" and answer["explanations"][0]["error"] == "REWORDED"
    assert answer["notes"] == ["REWORDED", "fine"]
    assert answer["failure"] == {"type": "security_exception", "reason": "REWORDED"}
    assert answer["hits"]["hits"][0]["_source"]["text"] == quoted  # documents are never rewritten


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

    from chunkrag_gateway.derived_keys import DerivedKeys, create_body, security_is_off
    from chunkrag_gateway.identity import ApiKey
    from chunkrag_gateway.origin import HttpResponse

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
    from chunkrag_gateway.origin import HttpResponse

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
    from chunkrag_gateway import create_app
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
    with caplog.at_level(logging.WARNING, logger="chunkrag_gateway.app"), TestClient(app) as client:
        assert client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"}).status_code == 200
    assert "gateway's own checks only" in caplog.text
    ((_, target, headers, _),) = transport.requests  # no API key is made on OpenSearch
    assert target == "/docs-1/_search" and headers[b"authorization"] == b"Basic " + base64.b64encode(b"gw:pw")


def test_service_mode_asks_for_uncompressed_answers_it_can_read():
    transport = KeyMakingTransport()
    client = app_client(transport, auth="service", api_keys=KEYS)
    client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}", "accept-encoding": "gzip"})
    assert b"accept-encoding" not in transport.requests[-1][2]


def test_service_mode_decodes_a_compressed_body_within_the_body_limit():
    import gzip
    import zlib

    from chunkrag_gateway.body_reads import decoded_body

    body = b'{"query": {"match_all": {}}}'
    raw_deflate = zlib.compressobj(wbits=-15)
    for coding, encoded in (
        ("gzip", gzip.compress(body)),
        ("x-gzip", gzip.compress(body)),
        ("deflate", zlib.compress(body)),
        ("deflate", raw_deflate.compress(body) + raw_deflate.flush()),
        ("identity", body),
        (None, body),
    ):
        assert decoded_body(coding, encoded, len(body)) == body, coding
    # The limit holds for what comes out: a 10 kB body of 10 MB is a 413 at the first MB past it.
    with pytest.raises(errors.GatewayError) as bomb:
        decoded_body("gzip", gzip.compress(b"{" + b" " * 10_000_000 + b"}"), 1_000_000)
    assert bomb.value.status == 413 and "CHUNKRAG_GATEWAY_MAX_BODY_BYTES" in bomb.value.reason
    for coding, encoded, why in (
        ("gzip", gzip.compress(body)[:-6], "ends early"),
        ("gzip", gzip.compress(body) + b"{}", "data follows"),
        ("gzip", body, "incorrect header"),
        ("br", body, "gzip, deflate or no encoding"),
    ):
        with pytest.raises(errors.GatewayError) as refused:
            decoded_body(coding, encoded, 1000)
        assert refused.value.status == 400 and why in refused.value.reason, (coding, refused.value.reason)
