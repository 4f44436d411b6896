"""Attacks on the gateway beyond the ones the security review listed, each against the
real secured Elasticsearch (the node tests/support/secured_elasticsearch.py
starts) with the gateway in service mode (a team key limited to sec-docs-*,
a trusted key that may also read sec-other-*, the "secret" indices) or in
forward mode. Each case is either refused or answered without the secret
text, the service account's name or its roles."""

from __future__ import annotations

import base64
import concurrent.futures
import gzip
import json
import socket
import time
import uuid

import httpx
import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import QUESTION, by_content

# The secured node, its indices and the gateways, shared with the other secured-node tests.
from tests.integration.test_gateway_secured import (  # noqa: F401
    admin,
    gateway_settings,
    indices,
    model_server,
    secured_node,
)
from tests.integration.test_gateway_service_mode import (  # noqa: F401
    SECRET_TEXT,
    TEAM_KEY,
    forwarding,
    ndjson,
    raw,
    secret_document,
    service_gateway,
)
from tests.support import secured_elasticsearch as secured

pytestmark = pytest.mark.integration

ADMIN = {
    "authorization": "Basic " + base64.b64encode(f"{secured.ADMIN.name}:{secured.ADMIN.password}".encode()).decode()
}
ALICE = {
    "authorization": "Basic " + base64.b64encode(f"{secured.READER.name}:{secured.READER.password}".encode()).decode()
}
# Words that would tell a caller who the gateway runs as.
ACCOUNT_WORDS = (secured.SERVICE.name, "gateway_reader", "API key id [")


def lookup(index: str, doc_id: str) -> dict:
    return {"terms": {"doc_id": {"index": index, "id": doc_id, "path": "text"}}}


def assert_no_secret(answer: httpx.Response, what) -> None:
    assert SECRET_TEXT not in answer.text, (what, answer.text[:300])
    assert not any(word in answer.text for word in ACCOUNT_WORDS), (what, answer.text[:300])
    assert answer.status_code < 500, (what, answer.status_code, answer.text[:300])


def test_index_expressions_in_the_path_cannot_reach_a_secret_index(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    paths = [
        f"/{allowed},{other}/_search",
        f"/{secured.ALLOWED_PREFIX}*,{other}/_search",
        f"/{allowed}%2C{other}/_search",  # an encoded comma
        f"/{allowed}%252C{other}/_search",  # encoded twice: one (missing) index to Elasticsearch
        f"/-{allowed}/_search",
        f"/{secured.ALLOWED_PREFIX}*,-{allowed},{other}/_search",
        "/*/_search",
        "/_all/_search",
        "/sec-*/_search",
        f"/{other}*/_search",
        f"/%3C{secured.OTHER_PREFIX}%7Bnow%2Fd%7D%3E/_search",  # date math
        f"/*:{other}/_search",  # cross-cluster
        f"/{other.upper()}/_search",
        f"/%73{other[1:]}/_search",  # an encoded first letter
        f"/ {other}/_search",
        f"/{allowed},/_search",
        f"/{other}%2F_search",  # an encoded "/": one index segment, not a search of [other]
        f"/{allowed}//_search",
        f"/{allowed}/%2E%2E/{other}/_search",
        f"/_search?index={other}",  # the index as a parameter of an index-less search
        f"/_count?index={other}",
        f"/_field_caps?fields=*&index={other}",
        f"/_mapping?index={other}",
        "/v1/_search",
        f"/{other}/_count",
        f"/{other}/_field_caps?fields=*",
        f"/{other}/_mapping",
        f"/{other}/_pit?keep_alive=1m",
        f"/{other}/_doc/secret-1",
        f"/{other}/_source/secret-1",
        f"/{other}/_explain/secret-1",
        f"/{other}/_termvectors/secret-1",
        f"/{other}/_validate/query?explain=true",
        f"/{other}/_search/template",
        f"/{other}/_async_search",
        f"/{other}/_eql/search",
        "/_sql?format=json",
        "/_query",
        "/_mget",
    ]
    for path in paths:
        for method in ("GET", "POST"):
            answer = raw(url, method, path, TEAM_KEY, json={"query": {"match_all": {}}})
            assert answer.status_code in (400, 403, 404, 405), (method, path, answer.status_code)
            assert_no_secret(answer, (method, path))
    # The path names the index; an index parameter beside it changes nothing.
    answer = raw(url, "POST", f"/{allowed}/_search?index={other}", TEAM_KEY, json={"size": 100})
    assert answer.status_code == 200 and {hit["_index"] for hit in answer.json()["hits"]["hits"]} == {allowed}


def test_clauses_that_read_another_index_are_refused_wherever_they_nest(service_gateway, indices, secret_document):  # noqa: F811
    url, app = service_gateway
    allowed, other = indices
    ref = lookup(other, secret_document)
    queries = {
        "bool/dis_max/function_score/nested": {
            "bool": {
                "should": [
                    {"dis_max": {"queries": [{"function_score": {"query": {"nested": {"path": "x", "query": ref}}}}]}}
                ]
            }
        },
        "has_child": {"has_child": {"type": "chunk", "query": ref}},
        "constant_score": {"constant_score": {"filter": ref}},
        "boosting": {"boosting": {"positive": {"match_all": {}}, "negative": ref, "negative_boost": 0.5}},
        "more_like_this _index": {
            "more_like_this": {
                "fields": ["text"],
                "like": [{"_index": other, "_id": secret_document}],
                "min_term_freq": 1,
            }
        },
        "more_like_this index": {
            "more_like_this": {"fields": ["text"], "like": [{"index": other, "id": secret_document}]}
        },
        "percolate by id": {"percolate": {"field": "query", "index": other, "id": secret_document}},
        "geo_shape indexed_shape": {
            "geo_shape": {"loc": {"indexed_shape": {"index": other, "id": secret_document, "path": "loc"}}}
        },
        "indexed_shape from the default index": {"shape": {"loc": {"indexed_shape": {"id": "x", "path": "loc"}}}},
        "pinned _index": {
            "pinned": {"docs": [{"_index": other, "_id": secret_document}], "organic": {"match_all": {}}}
        },
        "escaped key": "ESCAPED",
        "index as a list": {"terms": {"doc_id": {"index": [other], "id": secret_document, "path": "text"}}},
        "wrapper": {"wrapper": {"query": base64.b64encode(json.dumps(ref).encode()).decode()}},
    }
    bodies = {name: {"query": query, "profile": True} for name, query in queries.items()}
    bodies.update(
        {
            "aggs filter": {"size": 0, "aggs": {"a": {"filter": ref}}},
            "significant_terms background": {
                "aggs": {"a": {"significant_terms": {"field": "doc_id", "background_filter": ref}}}
            },
            "rescore": {"rescore": {"query": {"rescore_query": ref}}},
            "highlight_query": {"highlight": {"fields": {"text": {}}, "highlight_query": ref}},
            "post_filter": {"post_filter": ref},
            "collapse inner_hits": {"collapse": {"field": "doc_id", "inner_hits": {"name": "i"}}, "post_filter": ref},
            "retriever": {"retriever": {"rrf": {"retrievers": [{"standard": {"query": ref}}]}}},
            "knn filter": {
                "knn": {"field": "vector", "query_vector": [0.1] * 4, "k": 1, "num_candidates": 2, "filter": ref}
            },
            "lookup runtime field": {
                "runtime_mappings": {
                    "leak": {
                        "type": "lookup",
                        "target_index": other,
                        "input_field": "doc_id",
                        "target_field": "_id",
                        "fetch_fields": ["text"],
                    }
                },
                "fields": ["leak"],
            },
        }
    )
    for name, body in bodies.items():
        content = json.dumps(body).encode()
        if name == "escaped key":  # "index" spelled with a JSON escape
            content = json.dumps({"query": ref, "profile": True}).replace('"index"', '"ind\\u0065x"').encode()
        for path in (f"/{allowed}/_search", f"/{allowed}/_count", f"/{allowed}/_search?scroll=1m"):
            answer = raw(url, "POST", path, TEAM_KEY, content=content, headers={"content-type": "application/json"})
            assert answer.status_code in (400, 403), (name, path, answer.status_code, answer.text[:200])
            assert_no_secret(answer, (name, path))
        msearch = b"{}\n" + content + b"\n"
        answer = ndjson(url, f"/{allowed}/_msearch", TEAM_KEY, msearch)
        assert answer.status_code in (400, 403), (name, answer.text[:200])
        assert_no_secret(answer, (name, "_msearch"))
    # Where else a query goes: field_caps' index_filter, a PIT-less count, a filtered search's filter.
    for path, body in (
        (f"/{allowed}/_field_caps?fields=*", {"index_filter": ref}),
        (
            f"/{allowed}/_search",
            {
                "query": {"bool": {"must": [{"match": {"text": "x"}}], "filter": [ref]}},
                "ext": {"chunkrag": {"stages": False}},
            },
        ),
    ):
        answer = raw(url, "POST", path, TEAM_KEY, json=body)
        assert answer.status_code == 403, (path, answer.text[:200])
        assert_no_secret(answer, path)
    # Behind the gateway's check, the cluster refuses the team's derived key the lookup itself.
    raw(url, "POST", f"/{allowed}/_count", TEAM_KEY)
    derived = app.state.edges.passthrough.derived._keys["team"]
    direct = httpx.post(
        f"{secured.url_for()}/{allowed}/_search",
        json={"query": ref, "profile": True},
        headers={"authorization": derived.authorization.decode()},
        timeout=30,
    )
    assert direct.status_code >= 400 and SECRET_TEXT not in direct.text and "security_exception" in direct.text


def test_bodies_the_gateway_would_read_otherwise_than_elasticsearch_are_refused(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    body = json.dumps({"query": lookup(other, "secret-1"), "profile": True})
    cases = [
        ("gzip", gzip.compress(body.encode()), {"content-encoding": "gzip", "content-type": "application/json"}, ""),
        (
            "yaml",
            f"query:\n  terms:\n    doc_id:\n      index: {other}\n      id: secret-1\n      path: text\n",
            {"content-type": "application/yaml"},
            "",
        ),
        ("cbor type", body, {"content-type": "application/cbor"}, ""),
        ("comments", '{"query": /* x */ {"match_all": {}}}', {"content-type": "application/json"}, ""),
        (
            "duplicate keys",
            body.replace('"index"', f'"index": "{allowed}", "index"'),
            {"content-type": "application/json"},
            "",
        ),
        ("BOM", b"\xef\xbb\xbf" + body.encode(), {"content-type": "application/json"}, ""),
        ("UTF-16", body.encode("utf-16"), {"content-type": "application/json; charset=utf-16"}, ""),
        ("NaN", '{"size": NaN}', {"content-type": "application/json"}, ""),
        ("deep", '{"query":' * 300 + "{}" + "}" * 300, {"content-type": "application/json"}, ""),
        ("source parameter", None, {}, "source=" + body + "&source_content_type=application/json"),
        ("encoded source parameter", None, {}, "%73ource=" + body + "&source_content_type=application/json"),
        ("two content types", body, {"content-type": "application/json"}, ""),
        ("yaml answer", "{}", {"content-type": "application/json", "accept": "application/yaml"}, ""),
        ("format parameter", "{}", {"content-type": "application/json"}, "format=smile"),
    ]
    for name, content, headers, query in cases:
        path = f"/{allowed}/_search" + (f"?{query}" if query else "")
        sent = dict(headers)
        if name == "two content types":
            request = httpx.Request(
                "POST",
                f"{url}{path}",
                content=content,
                headers=[
                    ("authorization", f"ApiKey {TEAM_KEY}"),
                    ("content-type", "application/json"),
                    ("content-type", "application/yaml"),
                ],
            )
            answer = httpx.Client(timeout=30).send(request)
        else:
            answer = raw(url, "GET" if content is None else "POST", path, TEAM_KEY, content=content, headers=sent)
        assert answer.status_code in (400, 403), (name, answer.status_code, answer.text[:200])
        assert_no_secret(answer, name)


def test_refusals_name_no_account_whatever_filter_path_or_format_asks(settings, embedder, indices, admin):  # noqa: F811
    """A key for every index ("*"): the gateway lets an _msearch of an index
    outside the service account's reach through, and the cluster refuses it
    inside a 200. A filter_path that keeps the reason and drops the type
    hid the refusal from the gateway: the reason names the service account
    and the derived key's id."""
    outside = f"gw-outside-{uuid.uuid4().hex[:8]}"
    admin.index(index=outside, id="1", document={"text": "not for the service account"}, refresh=True)
    every_key = "every-key-" + uuid.uuid4().hex
    service = gateway_settings(
        settings, secured.url_for(secured.SERVICE), auth="service", api_keys=f"every:{key_hash(every_key)}:*"
    )
    try:
        with serving(create_app(service, embedder=embedder)) as url:
            search = f'{{"index":"{outside}"}}\n{{}}\n{{"index":"{indices[0]}"}}\n{{"size":0}}\n'.encode()
            for query in (
                "",
                "?filter_path=responses.error.reason",
                "?filter_path=**.reason",
                "?filter_path=responses.error.root_cause.reason,responses.status",
                "?error_trace=true",
                "?error_trace=true&filter_path=responses.error.stack_trace,responses.error.reason",
                "?format=yaml&filter_path=responses.error.reason",
                "?format=cbor",
            ):
                answer = ndjson(url, f"/_msearch{query}", every_key, search)
                assert answer.status_code in (200, 400), (query, answer.status_code)
                assert not any(word.encode() in answer.content for word in ACCOUNT_WORDS), (query, answer.content[:300])
                if answer.status_code == 200 and "reason" in query:
                    assert b"gateway API key [every]" in answer.content, (query, answer.content[:300])
            answer = raw(url, "POST", f"/{outside}/_search?filter_path=error.reason", every_key, json={})
            assert answer.status_code == 403 and "gateway API key [every]" in answer.text
            assert not any(word in answer.text for word in ACCOUNT_WORDS)
    finally:
        admin.indices.delete(index=outside, ignore_unavailable=True)


def test_forward_mode_cannot_clear_every_scroll_nor_override_the_method(forwarding, indices, admin):  # noqa: F811
    """An administrator's credentials through a read-only gateway: the cluster
    would clear every scroll and delete an index for them; the gateway does
    not let either through, whatever the spelling."""
    allowed, _ = indices
    scroll = admin.search(index=allowed, query={"match_all": {}}, size=1, scroll="1m")["_scroll_id"]
    for path in ("/_search/scroll?scroll_id=_all", "/_search/scroll?scroll_id=abc,_all", "/_search/scroll/_all"):
        answer = httpx.request("DELETE", f"{forwarding}{path}", headers=ADMIN, timeout=30)
        assert answer.status_code == 403 and "clearing every scroll" in answer.text, path
    assert len(admin.scroll(scroll_id=scroll, scroll="1m")["hits"]["hits"]) == 1
    admin.clear_scroll(scroll_id=scroll)
    victim = f"{secured.ALLOWED_PREFIX}victim-{uuid.uuid4().hex[:6]}"
    admin.indices.create(index=victim)
    try:
        for header in ("x-http-method-override", "x-http-method", "x-method-override"):
            for method, path in (("GET", f"/{victim}"), ("POST", f"/{victim}/_search"), ("HEAD", f"/{victim}")):
                httpx.request(method, f"{forwarding}{path}", headers={**ADMIN, header: "DELETE"}, json=None, timeout=30)
        assert httpx.request("DELETE", f"{forwarding}/{victim}", headers=ADMIN, timeout=30).status_code == 403
        assert admin.indices.exists(index=victim)
    finally:
        admin.indices.delete(index=victim, ignore_unavailable=True)


def test_a_forwarded_for_header_does_not_make_a_new_caller(settings, embedder, indices):  # noqa: F811
    """Callers without credentials are limited by their address; uvicorn
    took it from X-Forwarded-For for a peer on 127.0.0.1, so each made-up
    address was a new caller with a full bucket."""
    allowed, _ = indices
    limited = gateway_settings(settings, secured.url_for(secured.SERVICE), rate_per_s=0.001, rate_burst=2)
    with serving(create_app(limited, embedder=embedder)) as url:
        statuses = [
            httpx.get(
                f"{url}/{allowed}/_count",
                headers={"x-forwarded-for": f"10.0.0.{n}", "forwarded": f"for=10.1.0.{n}", "x-real-ip": f"10.2.0.{n}"},
                timeout=30,
            ).status_code
            for n in range(4)
        ]
    assert statuses == [401, 401, 429, 429]


def _exchange(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received


def test_ambiguous_framing_is_refused_and_a_pipelined_request_needs_its_own_key(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    key = f"Authorization: ApiKey {TEAM_KEY}\r\n".encode()
    body = json.dumps({"query": lookup(other, "secret-1"), "profile": True}).encode()
    head = f"POST /{allowed}/_search HTTP/1.1\r\nHost: gateway\r\n".encode() + key
    json_type = b"Content-Type: application/json\r\n"
    ambiguous = {
        "two content lengths": head
        + json_type
        + b"Content-Length: 2\r\nContent-Length: %d\r\n\r\n{}" % len(body)
        + body,
        "chunked and a length": head
        + json_type
        + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{}",
        "an unknown coding": head + json_type + b"Transfer-Encoding: xchunked\r\nContent-Length: 2\r\n\r\n{}",
        "a folded header line": head
        + b"X-A: b\r\n es-security-runas-user: chunkrag-admin\r\nContent-Length: 2\r\n\r\n{}",
        "a space before the colon": head + b"Content-Length : 2\r\n\r\n{}",
        "a NUL in the path": f"GET /{allowed}\x00/_search HTTP/1.1\r\nHost: g\r\n".encode() + key + b"\r\n",
    }
    for name, data in ambiguous.items():
        answer = _exchange(url, data)
        assert answer.startswith(b"HTTP/1.1 400"), (name, answer[:200])
        assert SECRET_TEXT.encode() not in answer
    # Two requests on one connection: the second, without a key, is refused, whatever the first carried.
    first = (
        f"POST /{allowed}/_count HTTP/1.1\r\nHost: g\r\n".encode() + key + json_type + b"Content-Length: 2\r\n\r\n{}"
    )
    second = f"GET /{other}/_search HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n".encode()
    answers = _exchange(url, first + second)
    assert answers.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 401" in answers and SECRET_TEXT.encode() not in answers
    # An absolute-form target names the same path to the guard.
    absolute = f"POST http://{secured.url_for().removeprefix('http://')}/{other}/_search HTTP/1.1\r\nHost: g\r\n"
    answer = _exchange(url, absolute.encode() + key + json_type + b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.1 403") and SECRET_TEXT.encode() not in answer


def test_playground_routes_in_both_modes(service_gateway, forwarding, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    for base in (url, forwarding):
        page = httpx.get(f"{base}/v1/playground", timeout=30)
        assert page.status_code == 200 and "frame-ancestors 'none'" in page.headers["content-security-policy"]
    listed = httpx.get(f"{url}/v1/playground/indices", headers={"authorization": f"ApiKey {TEAM_KEY}"}, timeout=30)
    assert listed.status_code == 200 and allowed in listed.json()["indices"] and other not in listed.json()["indices"]
    # Each listed index described with the key's derived credentials; nothing about the others.
    assert listed.json()["described"][allowed]["kind"] != "unknown" and other not in listed.json()["described"]
    assert httpx.get(f"{url}/v1/playground/indices", timeout=30).status_code == 401
    listed = httpx.get(f"{forwarding}/v1/playground/indices", headers=ALICE, timeout=30)
    assert listed.status_code == 200 and allowed in listed.json()["indices"] and other not in listed.json()["indices"]
    anonymous = httpx.get(f"{forwarding}/v1/playground/indices", timeout=30)
    assert anonymous.status_code == 401 and "www-authenticate" not in anonymous.headers
    # The page's paths take no other method, and a path beside them is an index path like any other.
    assert (
        httpx.post(f"{url}/v1/playground/indices", headers={"authorization": f"ApiKey {TEAM_KEY}"}).status_code == 405
    )
    beside = httpx.get(f"{url}/v1/playground/other", headers={"authorization": f"ApiKey {TEAM_KEY}"}, timeout=30)
    assert beside.status_code == 403 and "does not forward GET /v1/playground/other" in beside.text


def test_huge_sizes_get_a_4xx_or_a_bounded_answer(service_gateway, forwarding, indices):  # noqa: F811
    url, app = service_gateway
    allowed, _ = indices
    most = app.state.edges.settings.gateway.max_candidates
    for body in ({"size": 10**8}, {"from": 2**40}, {"size": 2**63}, {"size": -1}, {"from": 9_999, "size": 9_999}):
        for answer in (
            raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json=body),
            httpx.post(f"{forwarding}/{allowed}/_search", json=body, headers=ALICE, timeout=30),
        ):
            assert 400 <= answer.status_code < 500, (body, answer.status_code, answer.text[:200])
        # Filtered, size only bounds the hits returned: the candidates are capped anyway.
        filtered = {**body, "query": {"match": {"text": "x"}}, "ext": {"chunkrag": {"stages": False}}}
        answer = raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json=filtered)
        assert answer.status_code < 500, (body, answer.text[:200])
        assert answer.status_code != 200 or len(answer.json()["hits"]["hits"]) <= most


def test_a_filtered_search_of_an_index_without_chunks_is_a_4xx(service_gateway, forwarding, admin):  # noqa: F811
    """ext.chunkrag on an index not made by ingestion (a log index, say) was
    a 500 naming a KeyError."""
    plain = f"{secured.ALLOWED_PREFIX}plain-{uuid.uuid4().hex[:6]}"
    admin.index(index=plain, id="1", document={"text": "cats and dogs", "doc_id": "d"}, refresh=True)
    body = {"query": {"match": {"text": "cats"}}, "ext": {"chunkrag": {"stages": False, "mode": "bm25"}}}
    url, _ = service_gateway
    try:
        for answer in (
            httpx.post(f"{forwarding}/{plain}/_search", json=body, headers=ALICE, timeout=60),
            raw(url, "POST", f"/{plain}/_search", TEAM_KEY, json=body),
        ):
            assert answer.status_code == 400, answer.text[:300]
            # A retrieval mode asks for chunk retrieval; the refusal names the index and the way out.
            assert plain in answer.text and '\\"mode\\": \\"post_search\\"' in answer.text
    finally:
        admin.indices.delete(index=plain, ignore_unavailable=True)


def test_where_the_gateway_alone_enforces_keys_only_reads_pass_and_ids_stay_bound(settings, embedder, es):
    """The open node (9200, no security) with gateway-only enforcement
    accepted: every key's requests go with the same credentials. An _mget
    (a write-class API here) naming another index in its body read it, and
    another key's scroll or PIT id read its data."""
    suffix = uuid.uuid4().hex[:8]
    mine, theirs = f"gwonly-docs-{suffix}", f"gwonly-secret-{suffix}"
    es.client.index(index=mine, id="1", document={"text": "open"}, refresh=True)
    es.client.index(index=theirs, id="1", document={"text": SECRET_TEXT}, refresh=True)
    team, trusted = "gwonly-team-" + uuid.uuid4().hex, "gwonly-trusted-" + uuid.uuid4().hex
    keys = f"team:{key_hash(team)}:gwonly-docs-*; trusted:{key_hash(trusted)}:gwonly-*"
    gateway_only = gateway_settings(
        settings, settings.es_url, auth="service", api_keys=keys, enforce_in_gateway_only=True, passthrough="read,write"
    )
    try:
        with serving(create_app(gateway_only, embedder=embedder)) as url:
            for method, path, body in (
                ("POST", f"/{mine}/_mget", {"docs": [{"_index": theirs, "_id": "1"}]}),
                ("GET", f"/{mine}/_doc/1", None),
                ("POST", f"/{mine}/_delete_by_query", {"query": lookup(theirs, "1")}),
            ):
                answer = raw(url, method, path, team, json=body)
                assert answer.status_code == 403 and "only read APIs pass" in answer.text, (path, answer.text[:200])
                assert SECRET_TEXT not in answer.text
            assert raw(url, "POST", f"/{mine}/_search", team, json={}).status_code == 200
            scroll = raw(url, "POST", f"/{theirs}/_search?scroll=1m", trusted, json={"size": 1}).json()["_scroll_id"]
            pit = raw(url, "POST", f"/{theirs}/_pit?keep_alive=1m", trusted).json()["id"]
            for path, body in (
                ("/_search/scroll", {"scroll_id": scroll, "scroll": "1m"}),
                ("/_search", {"pit": {"id": pit}}),
            ):
                stolen = raw(url, "POST", path, team, json=body)
                assert stolen.status_code == 404 and SECRET_TEXT not in stolen.text, (path, stolen.text[:200])
            owned = raw(url, "POST", "/_search/scroll", trusted, json={"scroll_id": scroll, "scroll": "1m"})
            assert owned.status_code == 200
            assert raw(url, "DELETE", "/_pit", trusted, json={"id": pit}).status_code == 200
            assert raw(url, "DELETE", "/_search/scroll", trusted, json={"scroll_id": scroll}).status_code == 200
    finally:
        es.client.indices.delete(index=f"{mine},{theirs}", ignore_unavailable=True)


def test_with_derived_keys_document_reads_are_the_clusters_to_refuse(settings, embedder, indices, secret_document):  # noqa: F811
    """On the secured node the derived key limits every API, so a write-class
    read may pass: the cluster refuses the secret document inside the 200,
    and the refusal names no account."""
    allowed, other = indices
    team_only = f"team:{key_hash(TEAM_KEY)}:{secured.ALLOWED_PREFIX}*"
    service = gateway_settings(
        settings, secured.url_for(secured.SERVICE), auth="service", api_keys=team_only, passthrough="read,write"
    )
    with serving(create_app(service, embedder=embedder)) as url:
        for query in ("", "?filter_path=docs.error.reason"):
            answer = raw(
                url,
                "POST",
                f"/{allowed}/_mget{query}",
                TEAM_KEY,
                json={"docs": [{"_index": other, "_id": secret_document}]},
            )
            assert answer.status_code == 200 and "gateway API key [team]" in answer.text, answer.text[:300]
            assert_no_secret(answer, query)
        written = raw(url, "POST", f"/{allowed}/_doc", TEAM_KEY, json={"text": "x"})
        assert written.status_code == 403 and "gateway API key [team]" in written.text
        assert_no_secret(written, "_doc")


def test_one_users_several_credentials_share_one_rate_limit(settings, embedder, indices, admin):  # noqa: F811
    """Forward mode keyed the limit on the credential: a user with an API key
    beside their password (or API keys minted by the dozen) had a bucket per
    credential. Now the cluster's user is the identity."""
    allowed, _ = indices
    granted = admin.security.grant_api_key(
        grant_type="password",
        username=secured.READER.name,
        password=secured.READER.password,
        api_key={"name": f"gateway-rate-{uuid.uuid4().hex[:6]}", "expiration": "1h"},
    )
    alice_key = {"authorization": f"ApiKey {granted['encoded']}"}
    service = {
        "authorization": "Basic "
        + base64.b64encode(f"{secured.SERVICE.name}:{secured.SERVICE.password}".encode()).decode()
    }
    limited = gateway_settings(settings, secured.url_for(secured.SERVICE), rate_per_s=0.001, rate_burst=3)
    try:
        with serving(create_app(limited, embedder=embedder)) as url:
            statuses = [
                httpx.post(f"{url}/{allowed}/_count", headers=headers, timeout=30).status_code
                for headers in (ALICE, alice_key, ALICE, alice_key, service)
            ]
    finally:
        admin.security.invalidate_api_key(ids=[granted["id"]])
    assert statuses == [200, 200, 200, 429, 200]


def _slow_judge(request):
    """The scripted model's judging, each call held long enough that a
    caller's two searches are still running when its third has waited
    Retry-After (1 s)."""
    time.sleep(4.0)
    return by_content(request)


def test_an_api_key_padded_or_not_is_one_caller_against_the_cap(settings, embedder, indices, admin):  # noqa: F811
    """Forward mode with no rate limit keys the per-caller cap on the
    credential: the same API key sent with and without its base64 padding
    (the cluster takes both) counted as two callers, so one caller ran three
    filtered searches against a cap of two. Another credential is still
    another caller."""
    allowed, _ = indices
    granted = admin.security.grant_api_key(
        grant_type="password",
        username=secured.READER.name,
        password=secured.READER.password,
        api_key={"name": f"gateway-cap-{uuid.uuid4().hex[:6]}", "expiration": "1h"},
    )
    padded = granted["encoded"]
    assert padded.endswith("="), padded  # base64 of a 20-character id, ":" and a 22-character key
    spellings = {"padded": f"ApiKey {padded}", "unpadded": f"apikey {padded.rstrip('=')}"}
    body = {
        "query": {"match": {"text": QUESTION}},
        "size": 1,
        "ext": {"chunkrag": {"candidates": 2, "judge_top": 2, "gate": "off"}},
    }
    capped = gateway_settings(settings, secured.url_for(secured.SERVICE), max_filtered_per_caller=2, retry_after_s=1)

    def searches(url: str, authorizations: list[str]) -> list[int]:
        def search(authorization: str) -> int:
            return httpx.post(
                f"{url}/{allowed}/_search", json=body, headers={"authorization": authorization}, timeout=60
            ).status_code

        with concurrent.futures.ThreadPoolExecutor(len(authorizations)) as pool:
            return list(pool.map(search, authorizations))

    try:
        for authorization in spellings.values():  # the cluster takes both spellings
            answer = httpx.get(f"{secured.url_for()}/_security/_authenticate", headers={"authorization": authorization})
            assert answer.status_code == 200 and answer.json()["username"] == secured.READER.name
        with ScriptedOpenAI(default=_slow_judge) as model_server:
            model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=30)
            with serving(create_app(capped, model=model, embedder=embedder)) as url:
                one_key = searches(url, [spellings["padded"], spellings["padded"], spellings["unpadded"]])
                two_credentials = searches(url, [spellings["padded"], spellings["padded"], ALICE["authorization"]])
    finally:
        admin.security.invalidate_api_key(ids=[granted["id"]])
    assert sorted(one_key) == [200, 200, 429], one_key
    assert two_credentials == [200, 200, 200], two_credentials


def test_a_scroll_whose_query_names_chunkrag_is_bound_like_any_other(service_gateway, indices):  # noqa: F811
    """A search holding the word "chunkrag" outside ext went through the
    route, past the lane that binds scroll ids: its owner's continuation was
    refused, and a PIT id in such a body was not checked."""
    url, _ = service_gateway
    allowed, _ = indices
    body = {"query": {"bool": {"should": [{"match": {"text": "chunkrag"}}, {"match_all": {}}]}}, "size": 1}
    opened = raw(url, "POST", f"/{allowed}/_search?scroll=1m", TEAM_KEY, json=body)
    assert opened.status_code == 200
    scroll = opened.json()["_scroll_id"]
    more = raw(url, "POST", "/_search/scroll", TEAM_KEY, json={"scroll_id": scroll, "scroll": "1m"})
    assert more.status_code == 200 and len(more.json()["hits"]["hits"]) == 1
    assert raw(url, "DELETE", "/_search/scroll", TEAM_KEY, json={"scroll_id": scroll}).status_code == 200
