"""The pure parts of the answers to the attacks in
tests/integration/test_gateway_attacks.py, on literal inputs: which scroll
and PIT ids a request presents or an answer hands out and who may use them,
clearing every scroll by parameter, refusals hidden by filter_path, answers
in formats other than JSON, the index search read from the raw path, and
the client address taken from a header only behind a trusted proxy."""

import orjson
import pytest

from chunkrag_core.settings import GatewaySettings
from chunkrag_gateway import errors
from chunkrag_gateway.body_reads import clears_all_scrolls, non_json_format
from chunkrag_gateway.context_ids import ContextOwners, opened_id, presented_ids
from chunkrag_gateway.identity import key_hash, may_name_cluster_identity, scrub_security_errors
from chunkrag_gateway.lane import carries_chunkrag, is_index_search
from chunkrag_gateway.origin import HttpResponse
from chunkrag_gateway.server import uvicorn_options
from tests.unit.test_gateway_security import KEY_A, KEY_B, KEYS, KeyMakingTransport, app_client


def test_the_ids_an_answer_hands_out():
    assert opened_id(b'{"_scroll_id":"FGlu","took":3}') == "FGlu"
    assert opened_id(b'{"pit_id":"0qLB==","took":3}') == "0qLB=="
    assert opened_id(b'{"id":"0qLB","_shards":{}}') == "0qLB"
    assert opened_id(b'{\n  "_scroll_id" : "FGlu",\n  "took" : 3') == "FGlu"  # pretty
    assert opened_id(b'{"took":3,"hits":{"hits":[{"_id":"x","id":"y"}]}}') is None
    assert opened_id(b'{"error":{}}') is None and opened_id(b"") is None


@pytest.mark.parametrize(
    "method, parts, query, body, ids",
    [
        ("POST", ("_search", "scroll"), "", b'{"scroll_id":"a","scroll":"1m"}', ["a"]),
        ("GET", ("_search", "scroll", "a"), "scroll=1m", b"", ["a"]),
        ("POST", ("_search", "scroll"), "scroll_id=a&scroll=1m", b"", ["a"]),
        ("DELETE", ("_search", "scroll", "a,b"), "", b"", ["a", "b"]),
        ("DELETE", ("_search", "scroll"), "scroll_id=c", b'{"scroll_id":["a","b"]}', ["c", "a", "b"]),
        ("DELETE", ("_pit",), "", b'{"id":"p"}', ["p"]),
        ("POST", ("_search",), "", b'{"pit":{"id":"p","keep_alive":"1m"}}', ["p"]),
        ("POST", ("docs", "_search"), "", b'{"pit":{"id":"p"}}', ["p"]),  # Elasticsearch refuses it; checked anyway
        ("POST", ("_search", "scroll"), "", b'{"scroll_id":{"x":1}}', ['{"x":1}']),  # no id this key was given
        ("POST", ("docs", "_search"), "", b'{"query":{"match_all":{}}}', []),
        ("POST", ("docs", "_pit"), "keep_alive=1m", b"", []),
        # Every search of an _msearch that goes through a PIT, read as the second line reads the body.
        (
            "POST",
            ("_msearch",),
            "",
            b'{}\n{"pit":{"id":"p"}}\n{}\n{"query":{}}\n{}\n{"pit":{"id":"q,r"}}\n',
            ["p", "q", "r"],
        ),
        ("POST", ("docs", "_msearch"), "", b'{"index":"docs"}\n{"query":{}}\n', []),
        ("POST", ("_msearch",), "", b"", []),
        ("POST", ("_async_search",), "", b'{"pit":{"id":"p"}}', ["p"]),
        ("PUT", ("docs", "_doc", "1"), "", b'{"pit":{"id":"a document field"}}', []),
        ("PUT", ("docs", "_doc", "_search"), "", b'{"pit":{"id":"a document field"}}', []),
    ],
)
def test_the_ids_a_request_presents(method, parts, query, body, ids):
    assert presented_ids(method, parts, query, body) == ids


def test_ids_answer_only_the_key_they_were_handed_to():
    owners = ContextOwners(capacity=2)
    owners.remember("team", "a")
    owners.remember("ops", "b")
    owners.check("team", ["a"])
    owners.check("team", [])
    for owner, ids in (("team", ["b"]), ("ops", ["a"]), ("team", ["a", "c"])):
        with pytest.raises(errors.GatewayError) as refused:
            owners.check(owner, ids)
        assert refused.value.status == 404 and refused.value.type == "search_context_missing_exception"
    owners.remember("ops", "a")  # an id stays with the key it was handed to first
    owners.check("team", ["a"])
    # Over a key's capacity its own oldest id is forgotten, never another key's.
    for context_id in ("c", "d", "e"):
        owners.remember("ops", context_id)
    owners.check("team", ["a"])
    owners.check("ops", ["d", "e"])
    with pytest.raises(errors.GatewayError):
        owners.check("ops", ["b"])


class ScrollingTransport(KeyMakingTransport):
    """Hands out a scroll id on a search with ``scroll``, and answers the rest."""

    async def request(self, method, target, headers, body):
        if "scroll=" in target and "/_search" in target and "_search/scroll" not in target:
            self.requests.append((method, target, dict(headers), body))
            return HttpResponse(200, (), b'{"_scroll_id":"scroll-of-' + target.split("/")[1].encode() + b'","took":1}')
        return await super().request(method, target, headers, body)


def test_service_mode_binds_scroll_ids_to_the_key_that_opened_them():
    client = app_client(ScrollingTransport(), auth="service", api_keys=KEYS)
    team, ops = {"authorization": f"ApiKey {KEY_A}"}, {"authorization": f"Bearer {KEY_B}"}
    opened = client.post("/docs-1/_search?scroll=1m", json={}, headers=team).json()["_scroll_id"]
    assert client.post("/_search/scroll", json={"scroll_id": opened}, headers=team).status_code == 200
    assert client.request("DELETE", f"/_search/scroll/{opened}", headers=team).status_code == 200
    for method, path, body in (
        ("POST", "/_search/scroll", {"scroll_id": opened}),
        ("DELETE", "/_search/scroll", {"scroll_id": [opened]}),
        ("DELETE", f"/_search/scroll?scroll_id={opened}", None),
    ):
        assert client.request(method, path, json=body, headers=ops).status_code == 404


class PitTransport(KeyMakingTransport):
    """Opens a point in time on ``POST /<index>/_pit``; a search or an
    _msearch through one answers with its id (as Elasticsearch does)."""

    async def request(self, method, target, headers, body):
        if target.endswith("/_pit?keep_alive=1m"):
            self.requests.append((method, target, dict(headers), body))
            opened = f"pit-{len(self.requests)}-of-{target.split('/')[1]}"
            return HttpResponse(200, (), orjson.dumps({"id": opened}))
        if target.startswith("/_msearch"):
            self.requests.append((method, target, dict(headers), body))
            searches = body.decode().splitlines()[1::2]
            pits = [orjson.loads(line).get("pit", {}).get("id") for line in searches]
            answers = [
                {"pit_id": f"{pit}-moved", "hits": {"hits": []}} if pit else {"hits": {"hits": []}} for pit in pits
            ]
            return HttpResponse(200, (), orjson.dumps({"responses": answers}))
        return await super().request(method, target, headers, body)


def test_msearch_items_obey_the_pit_binding_of_a_search():
    """A key that may read every index ("*") sent another key's PIT
    through an _msearch item and read it: each item's PIT id is checked as
    a search's is, and an id an _msearch answer hands back stays the owner's."""
    transport = PitTransport()
    other_key = "key-of-another-star"
    client = app_client(transport, auth="service", api_keys=f"{KEYS}; other:{key_hash(other_key)}:*")
    ops, other = {"authorization": f"Bearer {KEY_B}"}, {"authorization": f"ApiKey {other_key}"}
    team = {"authorization": f"ApiKey {KEY_A}"}
    ndjson = {"content-type": "application/x-ndjson"}
    pit = client.post("/docs-1/_pit?keep_alive=1m", headers=ops).json()["id"]
    through = b'{}\n{"query":{"match_all":{}}}\n{}\n{"pit":{"id":"' + pit.encode() + b'"}}\n'
    transport.requests.clear()
    for path in ("/_msearch", "/docs-1/_msearch", "/_all/_msearch"):
        stolen = client.post(path, content=through, headers={**other, **ndjson})
        assert stolen.status_code == 404, (path, stolen.text)
        assert stolen.json()["error"]["type"] == "search_context_missing_exception"
    assert client.post("/docs-1/_msearch", content=through, headers={**team, **ndjson}).status_code == 404
    assert not transport.requests  # nothing reached the cluster
    own = client.post("/_msearch", content=through, headers={**ops, **ndjson})
    assert own.status_code == 200 and own.json()["responses"][1]["pit_id"] == f"{pit}-moved"
    # The id the answer handed back is the owner's: another key is refused it, the owner is not.
    moved = b'{}\n{"pit":{"id":"' + pit.encode() + b'-moved"}}\n'
    assert client.post("/_msearch", content=moved, headers={**other, **ndjson}).status_code == 404
    assert client.post("/_msearch", content=moved, headers={**ops, **ndjson}).status_code == 200
    # A key limited to some indices searches through its own PIT with no index named, as _search does;
    # an item with no index and no PIT is still refused it.
    own_pit = client.post("/docs-1/_pit?keep_alive=1m", headers=team).json()["id"]
    mine = b'{}\n{"pit":{"id":"' + own_pit.encode() + b'"}}\n'
    assert client.post("/_msearch", content=mine, headers={**team, **ndjson}).status_code == 200
    assert client.post("/_msearch", content=mine, headers={**ops, **ndjson}).status_code == 404
    no_pit = b'{}\n{"query":{"match_all":{}}}\n'
    assert client.post("/_msearch", content=no_pit, headers={**team, **ndjson}).status_code == 403


def test_clearing_every_scroll_by_parameter_is_seen():
    scroll = ("_search", "scroll")
    assert clears_all_scrolls("DELETE", scroll, b"", "scroll_id=_all")
    assert clears_all_scrolls("DELETE", scroll, b"", "scroll_id=abc,%5Fall")
    assert clears_all_scrolls("DELETE", scroll, b"", "scroll_id=+_all+")
    assert clears_all_scrolls("DELETE", scroll, b'{"scroll_id":"abc, _all"}', "")
    assert not clears_all_scrolls("DELETE", scroll, b"", "scroll_id=abc")
    assert not clears_all_scrolls("GET", scroll, b"", "scroll_id=_all")


def test_refusals_are_scrubbed_whichever_fields_a_filter_path_kept():
    reason = "gateway API key [team] may not do this"
    said = "action [indices:data/read/search] is unauthorized for API key id [k1] of user [gateway-service]"
    for document in (
        {"responses": [{"error": {"reason": said}}]},
        {"responses": [{"error": {"root_cause": [{"reason": said}], "reason": said}}]},
        {"responses": [{"error": {"type": "security_exception", "reason": said}, "status": 403}]},
        {"error": {"reason": "search failed", "stack_trace": "ElasticsearchSecurityException: " + said}},
        {"_shards": {"failures": [{"reason": {"type": "security_exception", "reason": said}}]}},
    ):
        assert may_name_cluster_identity(repr(document).encode())
        assert scrub_security_errors(document, reason)
        assert "gateway-service" not in repr(document) and "k1" not in repr(document)
    # A document that merely holds the words is a document, not a refusal.
    hits = {"hits": {"hits": [{"_source": {"reason": said}, "fields": {"reason": [said]}}]}}
    assert not scrub_security_errors(hits, reason) and hits["hits"]["hits"][0]["_source"]["reason"] == said
    assert not may_name_cluster_identity(b'{"hits":{"hits":[]}}')


def test_answers_in_other_formats_than_json_are_seen():
    assert non_json_format("format=yaml", []) == "yaml"
    assert non_json_format("pretty&format=SMILE", []) == "SMILE"
    assert non_json_format("", [(b"Accept", b"application/cbor")]) == "application/cbor"
    assert non_json_format("", [(b"content-type", b"application/vnd.elasticsearch+yaml")])
    for query, headers in (
        ("format=json", [(b"accept", b"application/vnd.elasticsearch+json; compatible-with=9")]),
        ("", [(b"accept", b"*/*"), (b"content-type", b"application/x-ndjson")]),
    ):
        assert non_json_format(query, headers) is None


@pytest.mark.parametrize(
    "path, search",
    [
        ("/docs/_search", True),
        ("/docs/%5Fsearch", True),
        ("/docs%2C/_search", True),
        ("/secret%2F_search", False),  # one index segment: decoded, it would look like a search of [secret]
        ("/a%2Fb/_search", False),
        ("/docs/_search/", False),
        ("/_search", False),
        ("//_search", False),
    ],
)
def test_the_index_search_is_read_from_the_raw_path(path, search):
    assert is_index_search("POST", path) is search


def test_the_client_address_comes_from_a_header_only_behind_a_trusted_proxy():
    assert uvicorn_options(GatewaySettings())["proxy_headers"] is False
    assert uvicorn_options(GatewaySettings(trusted_proxy=True))["proxy_headers"] is True


def test_only_bodies_with_ext_chunkrag_go_to_the_route():
    assert carries_chunkrag(b'{"query":{"match":{"text":"x"}},"ext":{"chunkrag":{}}}')
    assert carries_chunkrag(b'{"ext": {"chunkrag": {}')  # broken: the route names the problem
    assert not carries_chunkrag(b'{"query":{"match":{"text":"chunkrag"}}}')
    assert not carries_chunkrag(b'{"pit":{"id":"p"},"query":{"term":{"tag":"chunkrag"}}}')
    assert not carries_chunkrag(b'{"query":{"match_all":{}}}')
