"""Service mode against a real secured Elasticsearch (the node on 9250):
each gateway key searches with an API key the cluster itself limits to the
key's indices, and the gateway's second line refuses what the attacks on
the gateway tried. The service account may read sec-docs-* and sec-other-*
(the "secret" indices here); the team key is limited to sec-docs-*."""

from __future__ import annotations

import base64
import uuid

import httpx
import orjson
import pytest
from elasticsearch import ApiError, Elasticsearch

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving
from tests.integration.test_gateway import QUESTION

# The secured node, its indices and the scripted model server, shared with test_gateway_secured.
from tests.integration.test_gateway_secured import (  # noqa: F401
    admin,
    client_for,
    gateway_settings,
    ids,
    indices,
    model_server,
    secured_node,
)
from tests.support import secured_elasticsearch as secured

pytestmark = pytest.mark.integration

TEAM_KEY = "team-key-" + uuid.uuid4().hex  # sec-docs-* only
TRUSTED_KEY = "trusted-key-" + uuid.uuid4().hex  # sec-docs-* and sec-other-*
EVERY_KEY = "every-key-" + uuid.uuid4().hex  # * (what the service account reads: sec-*)
SECRET_TEXT = "SECRETPAYLOAD" + uuid.uuid4().hex[:8]
QUERY = {"match": {"text": QUESTION}}


@pytest.fixture(scope="module")
def secret_document(admin, indices):  # noqa: F811
    _, other = indices
    admin.index(index=other, id="secret-1", document={"doc_id": "secret", "text": SECRET_TEXT}, refresh=True)
    return "secret-1"


def service_settings(settings, user=secured.SERVICE, **gateway):
    team = f"team:{key_hash(TEAM_KEY)}:{secured.ALLOWED_PREFIX}*"
    keys = f"{team}; trusted:{key_hash(TRUSTED_KEY)}:{secured.ALLOWED_PREFIX}*,{secured.OTHER_PREFIX}*"
    keys += f"; every:{key_hash(EVERY_KEY)}:*"
    return gateway_settings(settings, secured.url_for(user), auth="service", api_keys=keys, **gateway)


@pytest.fixture(scope="module")
def service_gateway(settings, embedder, model_server, indices, secret_document):  # noqa: F811
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    app = create_app(service_settings(settings), model=model, embedder=embedder)
    with serving(app) as url:
        yield url, app


def raw(url, method, path, key, **options):
    headers = {"authorization": f"ApiKey {key}", **options.pop("headers", {})}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=60, **options)


def ndjson(url, path, key, body: bytes):
    return raw(url, "POST", path, key, content=body, headers={"content-type": "application/x-ndjson"})


def test_legitimate_use_works_with_a_derived_key_the_cluster_limits(service_gateway, indices, admin):  # noqa: F811
    url, app = service_gateway
    allowed, other = indices
    team = client_for(url, api_key=TEAM_KEY)
    assert ids(team.search(index=allowed, query=QUERY, size=1)) == ["tokyo:0"]
    assert team.count(index=allowed)["count"] == 6
    msearch = team.msearch(
        searches=[{"index": allowed}, {"query": QUERY, "size": 1}, {}, {"query": QUERY, "size": 1}], index=allowed
    )
    assert [ids(item) for item in msearch["responses"]] == [["tokyo:0"], ["tokyo:0"]]
    filtered = team.search(index=allowed, query=QUERY, size=1, ext={"chunkrag": {"stages": False, "candidates": 3}})
    assert ids(filtered) == ["tokyo:0"]
    page = team.search(index=allowed, query={"match_all": {}}, size=2, scroll="1m")
    more = team.scroll(scroll_id=page["_scroll_id"], scroll="1m")
    assert len(page["hits"]["hits"]) == 2 and len(more["hits"]["hits"]) == 2
    team.clear_scroll(scroll_id=page["_scroll_id"])
    pit = team.open_point_in_time(index=allowed, keep_alive="1m")["id"]
    assert len(team.search(pit={"id": pit, "keep_alive": "1m"}, query={"match_all": {}}, size=3)["hits"]["hits"]) == 3
    team.close_point_in_time(id=pit)
    # The cluster holds a key for the team, limited to its patterns, owned by the service account.
    derived = app.state.edges.passthrough.derived._keys["team"]
    listed = admin.security.get_api_key(id=derived.id)["api_keys"][0]
    assert listed["username"] == secured.SERVICE.name and not listed["invalidated"]
    descriptor = listed["role_descriptors"]["chunkrag_gateway_key"]
    assert descriptor["indices"][0]["names"] == [f"{secured.ALLOWED_PREFIX}*"] and descriptor["cluster"] == []
    # The derived key itself, used directly, cannot read the secret index: the cluster enforces the allow-list.
    direct = Elasticsearch(
        secured.url_for(), headers={"authorization": derived.authorization.decode()}, request_timeout=30
    )
    assert direct.count(index=allowed)["count"] == 6
    with pytest.raises(ApiError) as refused:
        direct.count(index=other)
    assert refused.value.meta.status == 403


def test_msearch_attacks_fail_closed(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    bodies = [
        f'{{"indices":"{other}"}}\n{{"query":{{"match_all":{{}}}}}}\n',
        f'{{"index":["{other}", 1]}}\n{{}}\n',
        f'{{"index":[1, "{other}"]}}\n{{}}\n',
        f'{{}}\n{{}}\n\n{{"index":"{other}"}}\n{{}}\n',
        f'\n{{"index":"{other}"}}\n{{}}\n',
        f'{{"index":"{allowed}"}}\r\n{{}}\r\n{{"index":"{other}"}}\r\n{{}}\r\n',
        f'{{"index":"{allowed}","index":"{other}"}}\n{{}}\n',
        f'{{"index":"{other}"}}\n{{}}\n',
    ]
    for body in bodies:
        answer = ndjson(url, f"/{allowed}/_msearch", TEAM_KEY, body.encode())
        assert answer.status_code in (400, 403), (body, answer.text)
        assert (
            SECRET_TEXT not in answer.text
            and "sec-other" not in answer.text.replace(other, "")
            and "tokyo" not in answer.text
        )


def test_a_terms_lookup_on_a_secret_index_is_refused(service_gateway, indices, secret_document):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    lookup = {"terms": {"doc_id": {"index": other, "id": secret_document, "path": "text"}}}
    for path, body in (
        (f"/{allowed}/_search", {"query": lookup, "profile": True}),
        (f"/{allowed}/_count", {"query": lookup}),
        (
            f"/{allowed}/_search",
            {"query": {"bool": {"filter": [lookup]}}, "profile": True, "ext": {"chunkrag": {"stages": False}}},
        ),
    ):
        answer = raw(url, "POST", path, TEAM_KEY, json=body)
        assert answer.status_code == 403 and SECRET_TEXT not in answer.text, answer.text
    # The same lookup on an allowed index is served.
    own = raw(
        url,
        "POST",
        f"/{allowed}/_search",
        TEAM_KEY,
        json={"query": {"terms": {"doc_id": {"index": allowed, "id": "tokyo:0", "path": "doc_id"}}}},
    )
    assert own.status_code == 200 and own.json()["hits"]["hits"]


def test_v1_paths_are_guarded_like_any_other(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    for method, path in (("POST", "/v1/_search"), ("GET", "/v1/_count"), ("POST", "/v1/_pit?keep_alive=1m")):
        answer = raw(url, method, path, TEAM_KEY, json={"query": {"match_all": {}}})
        assert answer.status_code == 403 and "may not read index [v1]" in answer.text, answer.text
    assert httpx.post(f"{url}/v1/_search", json={}, timeout=30).status_code == 401


def test_identity_headers_do_not_reach_the_cluster(service_gateway, indices, forwarding):  # noqa: F811
    url, _ = service_gateway
    allowed, _ = indices
    # Honoured, run-as would be refused (the service account may not run as anyone): a 200 says it was dropped.
    for header in (
        {"es-security-runas-user": secured.ADMIN.name},
        {"es-secondary-authorization": "Basic " + base64.b64encode(b"chunkrag-admin:admin-pw-9f2c").decode()},
    ):
        assert (
            raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json={"query": QUERY}, headers=header).status_code == 200
        )
    alice = {
        "authorization": "Basic "
        + base64.b64encode(f"{secured.READER.name}:{secured.READER.password}".encode()).decode()
    }
    runas = httpx.post(
        f"{forwarding}/{allowed}/_search",
        json={"query": QUERY},
        headers={**alice, "es-security-runas-user": secured.ADMIN.name},
        timeout=30,
    )
    assert runas.status_code == 200


@pytest.fixture(scope="module")
def forwarding(settings, embedder, indices):  # noqa: F811
    with serving(create_app(gateway_settings(settings, secured.url_for(secured.SERVICE)), embedder=embedder)) as url:
        yield url


def test_scrolls_are_bound_to_each_keys_derived_key(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, _ = indices
    trusted, team = client_for(url, api_key=TRUSTED_KEY), client_for(url, api_key=TEAM_KEY)
    theirs = trusted.search(index=allowed, query={"match_all": {}}, size=1, scroll="1m")["_scroll_id"]
    mine = team.search(index=allowed, query={"match_all": {}}, size=1, scroll="1m")["_scroll_id"]
    # Clearing every scroll is refused, in any spelling; the other key's scroll lives on.
    for method, path, body in (
        ("DELETE", "/_search/scroll/_all", None),
        ("DELETE", "/_search/scroll", {"scroll_id": "_all"}),
        ("DELETE", "/_search/scroll", {"scroll_id": ["_all"]}),
        ("DELETE", "/_search/scroll?scroll_id=_all", None),
        ("DELETE", "/_search/scroll?scroll_id=x,%5Fall", None),
    ):
        assert raw(url, method, path, TEAM_KEY, json=body).status_code == 403, path
    assert len(trusted.scroll(scroll_id=theirs, scroll="1m")["hits"]["hits"]) == 1
    # Another key's scroll id (stolen, or counted out: a scroll id is a node session id, seen in one's
    # own ids, and a counter) neither reads nor ends the scroll: the gateway answers as if it did not
    # exist, before Elasticsearch (which ends a scroll for anyone who presents its id).
    for method, path, body in (
        ("POST", "/_search/scroll", {"scroll_id": theirs, "scroll": "1m"}),
        ("GET", f"/_search/scroll/{theirs}?scroll=1m", None),
        ("POST", f"/_search/scroll?scroll_id={theirs}&scroll=1m", None),
        ("DELETE", "/_search/scroll", {"scroll_id": [mine, theirs]}),
        ("DELETE", f"/_search/scroll/{theirs}", None),
        ("DELETE", f"/_search/scroll?scroll_id={theirs}", None),
    ):
        stolen = raw(url, method, path, TEAM_KEY, json=body)
        assert stolen.status_code == 404 and "hits" not in stolen.json() and "succeeded" not in stolen.json(), path
    assert len(trusted.scroll(scroll_id=theirs, scroll="1m")["hits"]["hits"]) == 1
    assert len(team.scroll(scroll_id=mine, scroll="1m")["hits"]["hits"]) == 1
    team.clear_scroll(scroll_id=mine)
    trusted.clear_scroll(scroll_id=theirs)
    # PITs likewise: another key can neither search through nor close one.
    pit = trusted.open_point_in_time(index=allowed, keep_alive="1m")["id"]
    for method, path, body in (
        ("POST", "/_search", {"pit": {"id": pit}, "size": 1}),
        ("DELETE", "/_pit", {"id": pit}),
    ):
        assert raw(url, method, path, TEAM_KEY, json=body).status_code == 404, (method, path)
    after = trusted.search(pit={"id": pit, "keep_alive": "1m"}, query={"match_all": {}}, size=1)
    assert len(after["hits"]["hits"]) == 1
    trusted.close_point_in_time(id=after.get("pit_id", pit))


def test_a_pit_on_a_secret_index_serves_only_the_key_that_may_read_it(service_gateway, indices):  # noqa: F811
    url, app = service_gateway
    raw(url, "POST", f"/{indices[0]}/_count", TEAM_KEY)  # makes the team's derived key
    _, other = indices
    trusted = client_for(url, api_key=TRUSTED_KEY)
    pit = trusted.open_point_in_time(index=other, keep_alive="1m")["id"]
    assert trusted.search(pit={"id": pit}, query={"match": {"text": SECRET_TEXT}}, size=1)["hits"]["hits"]
    stolen = raw(url, "POST", "/_search", TEAM_KEY, json={"pit": {"id": pit}, "query": {"match_all": {}}})
    # The gateway binds the id to the key that opened it (context_ids.py): a missing context for any other.
    assert stolen.status_code == 404 and SECRET_TEXT not in stolen.text
    assert (
        secured.SERVICE.name not in stolen.text
        and "gateway_reader" not in stolen.text
        and "gateway API key [team]" in stolen.text
    )
    # Behind that, the cluster itself refuses the team's derived key a search through the PIT.
    derived = app.state.edges.passthrough.derived._keys["team"]
    direct = httpx.post(
        f"{secured.url_for()}/_search",
        json={"pit": {"id": pit}, "query": {"match_all": {}}},
        headers={"authorization": derived.authorization.decode()},
        timeout=30,
    )
    assert direct.status_code == 403 and SECRET_TEXT not in direct.text
    trusted.close_point_in_time(id=pit)


def test_rate_limits_count_spellings_of_one_credential_once(settings, embedder, indices):  # noqa: F811
    allowed, _ = indices
    token = base64.b64encode(f"{secured.READER.name}:{secured.READER.password}".encode()).decode()
    limited = gateway_settings(settings, secured.url_for(secured.SERVICE), rate_per_s=0.001, rate_burst=3)
    with serving(create_app(limited, embedder=embedder)) as url:
        statuses = [
            httpx.post(f"{url}/{allowed}/_count", headers={"authorization": value}, timeout=30).status_code
            for value in (f"Basic {token}", f"BASIC {token}", f"basic  {token}", f"bAsIc \t{token}")
        ]
        team_limited = create_app(service_settings(settings, rate_per_s=0.001, rate_burst=2), embedder=embedder)
    assert statuses == [200, 200, 200, 429]
    with serving(team_limited) as url:
        keyed = [
            raw(url, "POST", f"/{allowed}/_count", TEAM_KEY, headers={"authorization": spelling}).status_code
            for spelling in (f"ApiKey {TEAM_KEY}", f"apikey {TEAM_KEY}", f"Bearer  {TEAM_KEY}")
        ]
    assert keyed == [200, 200, 429]


def test_a_service_account_that_cannot_make_keys_is_a_clear_503(settings, embedder, indices):  # noqa: F811
    allowed, _ = indices
    with serving(create_app(service_settings(settings, secured.NO_KEYS_SERVICE), embedder=embedder)) as url:
        answer = raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json={"query": QUERY})
    assert answer.status_code == 503 and "manage_own_api_key" in answer.text
    assert secured.NO_KEYS_SERVICE.name not in answer.text and "gateway_reader" not in answer.text


def test_derived_keys_are_invalidated_at_shutdown(settings, embedder, indices, admin):  # noqa: F811
    allowed, _ = indices
    app = create_app(service_settings(settings), embedder=embedder)
    with serving(app) as url:
        assert raw(url, "POST", f"/{allowed}/_count", TEAM_KEY).status_code == 200
        made = app.state.edges.passthrough.derived._keys["team"].id
    assert admin.security.get_api_key(id=made)["api_keys"][0]["invalidated"]


def test_a_cluster_without_security_needs_gateway_only_enforcement_said_outright(settings, embedder):
    """The main node (9200) runs without security: no credentials could limit a key there."""
    open_cluster = dict(auth="service", api_keys=f"team:{key_hash(TEAM_KEY)}:{secured.ALLOWED_PREFIX}*")
    with serving(create_app(gateway_settings(settings, settings.es_url, **open_cluster), embedder=embedder)) as url:
        refused = raw(url, "POST", f"/{secured.ALLOWED_PREFIX}none/_count", TEAM_KEY)
    assert refused.status_code == 503 and "ENFORCE_IN_GATEWAY_ONLY" in refused.text
    accepted = gateway_settings(settings, settings.es_url, enforce_in_gateway_only=True, **open_cluster)
    with serving(create_app(accepted, embedder=embedder)) as url:
        forwarded = raw(url, "POST", f"/{secured.ALLOWED_PREFIX}none/_count", TEAM_KEY)
        still_checked = raw(url, "POST", f"/{secured.OTHER_PREFIX}none/_count", TEAM_KEY)
    assert forwarded.status_code == 404 and "index_not_found_exception" in forwarded.text  # the cluster answered
    assert still_checked.status_code == 403 and "gateway API key [team]" in still_checked.text


def test_the_librarys_own_searches_go_with_the_derived_key(service_gateway, indices):  # noqa: F811
    """Past the gateway's checks (called directly), the filtered search of a
    team caller still cannot read the secret index: the cluster refuses the
    derived key, though the gateway's base client holds the service account's
    credentials, which could."""
    from chunkrag_gateway.dialect import parse_search
    from chunkrag_gateway.identity import ApiKey, Caller
    from search_extension.retriever import SearchRefused

    url, app = service_gateway
    allowed, other = indices
    raw(url, "POST", f"/{allowed}/_count", TEAM_KEY)  # makes the team's derived key
    derived = app.state.edges.passthrough.derived._keys["team"]
    team = ApiKey("team", b"-" * 32, (f"{secured.ALLOWED_PREFIX}*",))
    caller = Caller(authorization=derived.authorization, key=team, identity="key:team")
    search = parse_search(
        {"query": QUERY, "ext": {"chunkrag": {"stages": False}}}, max_candidates=10, max_query_chars=500
    )
    found = app.state.edges.ask(allowed, search.text, search.options, candidates=3, caller=caller)
    assert found.retrieval.chunks
    with pytest.raises(SearchRefused) as refused:
        app.state.edges.ask(other, search.text, search.options, candidates=3, caller=caller)
    assert refused.value.status == 403 and "API key" in str(refused.value.error)


def test_an_msearch_item_cannot_search_through_another_keys_pit(service_gateway, indices):  # noqa: F811
    """The key that may read every index ran another key's PIT through an
    _msearch item (a search's pit.id gets 404; the _msearch item did not)."""
    url, _ = service_gateway
    _, other = indices
    trusted, every = client_for(url, api_key=TRUSTED_KEY), client_for(url, api_key=EVERY_KEY)
    pit = trusted.open_point_in_time(index=other, keep_alive="1m")["id"]
    through = [{}, {"query": {"match": {"text": SECRET_TEXT}}, "size": 1}, {}, {"pit": {"id": pit}, "size": 1}]
    body = b"".join(orjson.dumps(line) + b"\n" for line in through)
    for path in ("/_msearch", f"/{other}/_msearch", "/_all/_msearch"):
        stolen = ndjson(url, path, EVERY_KEY, body)
        assert stolen.status_code == 404 and SECRET_TEXT not in stolen.text, (path, stolen.text[:300])
        assert "gateway API key [every]" in stolen.text
    with pytest.raises(ApiError) as refused:
        every.msearch(searches=through)
    assert refused.value.meta.status == 404
    # The owner runs it, and the id its answer hands back stays the owner's.
    own = trusted.msearch(searches=[{}, {"pit": {"id": pit, "keep_alive": "1m"}, "size": 1}])
    assert own["responses"][0]["hits"]["hits"], own
    moved = own["responses"][0].get("pit_id", pit)
    again = b"".join(orjson.dumps(line) + b"\n" for line in [{}, {"pit": {"id": moved}, "size": 1}])
    assert ndjson(url, "/_msearch", EVERY_KEY, again).status_code == 404
    assert every.msearch(searches=[{"index": other}, {"size": 1}])["responses"][0]["hits"]  # its own reads work
    trusted.close_point_in_time(id=moved)


def test_the_clients_connect_through_a_service_mode_gateway_with_get_root(service_gateway, indices, admin):  # noqa: F811
    """GET / with a derived key was the cluster's 403 (no monitor privilege),
    so stores that check their connection first could not connect. The
    gateway answers it, naming the version and tagline only."""
    from langchain_elasticsearch.client import create_elasticsearch_client

    url, _ = service_gateway
    allowed, _ = indices
    team = client_for(url, api_key=TEAM_KEY)
    info = team.info()
    # The cluster straight, as its administrator sees it (this distribution answers GET / with 405).
    nodes = admin.nodes.info(node_id="_local")
    node_id, node = next(iter(nodes["nodes"].items()))
    cluster_uuid = admin.cluster.state(metric="metadata")["metadata"]["cluster_uuid"]
    assert info["version"] == {"number": node["version"]} and info["tagline"] == "You Know, for Search"
    assert info["name"] == info["cluster_name"] == "chunkrag-gateway"
    shown = orjson.dumps(info.body).decode()
    for secret in (node["name"], nodes["cluster_name"], node_id, cluster_uuid, node["build_hash"]):
        assert secret not in shown, secret
    assert team.ping()
    assert team.count(index=allowed)["count"] == 6  # and then works as before
    # LangChain's client factory checks its connection with GET / before it hands the client out.
    store_client = create_elasticsearch_client(url=url, api_key=TEAM_KEY)
    assert store_client.info()["version"]["number"] == node["version"]
    # A key is still needed, and a wrong one refused.
    assert raw(url, "GET", "/", "not-a-key").status_code == 401
    assert httpx.get(f"{url}/", timeout=30).status_code == 401
