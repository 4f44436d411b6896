"""The gateway in front of a real Elasticsearch with security on (a second
node on port 9250, file-realm users, roles.yml): the cluster decides what a
caller reads through the gateway, filtered (ext.chunkrag) or not; service
mode restricts gateway API keys to their indices; the pass-through forwards
only what it is configured to."""

from __future__ import annotations

import dataclasses
import uuid

import httpx
import pytest
from elasticsearch import AuthenticationException, AuthorizationException, Elasticsearch

from chunkrag_core.engines.elasticsearch import ElasticsearchBackend
from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, QUESTION, by_content
from tests.support import secured_elasticsearch as secured

pytestmark = pytest.mark.integration

TEAM_KEY = "gateway-key-" + uuid.uuid4().hex


@pytest.fixture(scope="session")
def secured_node():
    with secured.secured_node() as node:
        yield node


@pytest.fixture(scope="module")
def admin(secured_node):
    client = Elasticsearch(secured.url_for(secured.ADMIN), request_timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def indices(admin, embedder, settings):
    suffix = uuid.uuid4().hex[:8]
    allowed, other = f"{secured.ALLOWED_PREFIX}{suffix}", f"{secured.OTHER_PREFIX}{suffix}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    for name in (allowed, other):
        backend = ElasticsearchBackend(admin)
        ingest_documents(documents, client=backend, embedder=embedder, settings=settings, index=name, progress=False)
    yield allowed, other
    admin.indices.delete(index=f"{allowed},{other}", ignore_unavailable=True)


@pytest.fixture(scope="module")
def model_server():
    with ScriptedOpenAI(default=by_content) as server:
        yield server


def gateway_settings(settings, es_url, **gateway):
    # Redis db 13: these tests count model calls, so no cached score may answer.
    return dataclasses.replace(
        settings,
        es_url=es_url,
        redis_url=settings.redis_url.rsplit("/", 1)[0] + "/13",
        gateway=dataclasses.replace(settings.gateway, **gateway),
    )


@pytest.fixture(scope="module")
def forwarding_gateway(settings, embedder, model_server, indices):
    """Forward mode, although the gateway holds credentials that could read
    every test index: they are used for its health probe only."""
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    with serving(
        create_app(gateway_settings(settings, secured.url_for(secured.SERVICE)), model=model, embedder=embedder)
    ) as url:
        yield url


def client_for(url, **auth):
    return Elasticsearch(url, max_retries=0, request_timeout=60, **auth)


def ids(response):
    return [hit["_id"] for hit in response["hits"]["hits"]]


def flush_cache(settings):
    import redis

    redis.Redis.from_url(settings.redis_url.rsplit("/", 1)[0] + "/13").flushdb()


def test_the_cluster_decides_what_a_caller_reads_through_the_gateway(
    forwarding_gateway, indices, model_server, settings, monkeypatch
):
    allowed, other = indices
    flush_cache(settings)
    alice = client_for(forwarding_gateway, basic_auth=(secured.READER.name, secured.READER.password))
    query = {"match": {"text": QUESTION}}
    assert ids(alice.search(index=allowed, query=query, size=1)) == ["tokyo:0"]
    assert alice.count(index=allowed)["count"] == 6 and alice.indices.exists(index=allowed)
    filtered = alice.search(index=allowed, query=query, ext={"chunkrag": {"candidates": 4, "judge_top": 9}})
    assert ids(filtered) == ["tokyo:0"] and filtered["chunkrag"]["usage"]["model_calls"] >= 1
    # Segment extraction fetches neighbours with the client the search used:
    # alice's credentials (the gateway's base client holds none, so without
    # them the fetch would be a 401). These documents are too short for RSE
    # to need a neighbour, so the fetcher it is given fetches one on purpose.
    import search_extension.ask

    fetched = []
    real_fetcher = search_extension.ask.position_fetcher

    def fetching_fetcher(client, index):
        fetch = real_fetcher(client, index)
        fetched.extend(fetch({"kyoto": [1]}))
        return fetch

    monkeypatch.setattr(search_extension.ask, "position_fetcher", fetching_fetcher)
    segments = alice.search(
        index=allowed, query=query, size=2, ext={"chunkrag": {"stages": False, "candidates": 2, "segments": True}}
    )
    assert segments["hits"]["hits"] and all(hit["_chunkrag"]["segment"] for hit in segments["hits"]["hits"])
    assert [chunk.chunk_id for chunk in fetched] == ["kyoto:1"]
    calls_before = len(model_server.requests)
    for ext in ({}, {"ext": {"chunkrag": {"stages": False}}}, {"ext": {"chunkrag": {"candidates": 4}}}):
        with pytest.raises(AuthorizationException) as refused:
            alice.search(index=other, query=query, **ext)
        assert refused.value.meta.status == 403 and "alice" in str(refused.value.body)
    with pytest.raises(AuthorizationException):
        alice.count(index=other)
    # Nothing of the other index reached the model.
    assert len(model_server.requests) == calls_before


def test_forwarded_credentials_reach_the_cluster(forwarding_gateway, indices):
    """Each scheme arrives as sent: the cluster's own 401 names what it got
    (a made-up API key id shows the ApiKey one)."""
    allowed, _ = indices
    query = {"match": {"text": QUESTION}}
    callers = [
        ({"basic_auth": (secured.READER.name, "wrong-password")}, "unable to authenticate user [alice]"),
        ({"api_key": "bm9wZTpub3Bl"}, "apikey with id nope"),
        ({}, "missing authentication credentials"),
    ]
    for auth, said in callers:
        caller = client_for(forwarding_gateway, **auth)
        for ext in ({}, {"ext": {"chunkrag": {"stages": False}}}, {"ext": {"chunkrag": {"candidates": 3}}}):
            with pytest.raises(AuthenticationException) as refused:
                caller.search(index=allowed, query=query, **ext)
            assert refused.value.meta.status == 401 and said in str(refused.value.body), (auth, ext, refused.value.body)


def test_the_clusters_basic_challenge_reaches_api_clients_never_browsers(forwarding_gateway, indices):
    allowed, _ = indices
    url = f"{forwarding_gateway}/{allowed}/_search"
    api = httpx.get(url, timeout=30)
    assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Basic")
    for mode in ("navigate", "cors"):
        browser = httpx.get(url, headers={"Sec-Fetch-Mode": mode, "Sec-Fetch-Site": "cross-site"}, timeout=30)
        assert browser.status_code == 401 and "www-authenticate" not in browser.headers
        assert "missing authentication credentials" in browser.json()["error"]["reason"]


def test_health_uses_the_gateways_own_credentials(forwarding_gateway):
    health = httpx.get(f"{forwarding_gateway}/v1/health", timeout=30).json()
    assert health["elasticsearch"]["ok"] and health["elasticsearch"]["status"] in ("green", "yellow")


def test_service_mode_restricts_gateway_keys_to_their_indices(settings, embedder, model_server, indices):
    allowed, other = indices
    service = gateway_settings(
        settings,
        secured.url_for(secured.SERVICE),
        auth="service",
        api_keys=f"team:{key_hash(TEAM_KEY)}:{secured.ALLOWED_PREFIX}*",
    )
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    query = {"match": {"text": QUESTION}}
    with serving(create_app(service, model=model, embedder=embedder)) as url:
        team = client_for(url, api_key=TEAM_KEY)
        assert ids(team.search(index=allowed, query=query, size=1)) == ["tokyo:0"]
        assert ids(team.search(index=allowed, query=query, size=1, ext={"chunkrag": {"stages": False}})) == ["tokyo:0"]
        for ext in ({}, {"ext": {"chunkrag": {"stages": False}}}):
            with pytest.raises(AuthorizationException) as refused:
                team.search(index=other, query=query, **ext)
            assert "gateway API key [team] may not read index" in refused.value.body["error"]["reason"]
        # The gateway's own user could read it: the refusal is the gateway's.
        assert client_for(secured.url_for(secured.SERVICE)).count(index=other)["count"] == 6
        for stranger in (
            client_for(url),
            client_for(url, api_key="not-a-key"),
            client_for(url, basic_auth=(secured.ADMIN.name, secured.ADMIN.password)),
        ):
            with pytest.raises(AuthenticationException):
                stranger.search(index=allowed, query=query)


def test_writes_pass_only_when_configured_and_then_the_cluster_decides(settings, embedder, indices):
    allowed, _ = indices
    admin_auth = {"basic_auth": (secured.ADMIN.name, secured.ADMIN.password)}
    with serving(create_app(gateway_settings(settings, secured.url_for()), embedder=embedder)) as url:
        with pytest.raises(AuthorizationException) as refused:
            client_for(url, **admin_auth).index(index=allowed, id="w1", document={"text": "x"})
        assert "CHUNKRAG_GATEWAY_PASSTHROUGH" in refused.value.body["error"]["reason"]
        with pytest.raises(AuthorizationException):
            client_for(url, **admin_auth).cluster.health()
    with serving(
        create_app(gateway_settings(settings, secured.url_for(), passthrough="read,write"), embedder=embedder)
    ) as url:
        assert client_for(url, **admin_auth).index(index=allowed, id="w1", document={"text": "x", "doc_id": "w"})[
            "result"
        ] in ("created", "updated")
        with pytest.raises(AuthorizationException) as cluster_says_no:
            client_for(url, basic_auth=(secured.READER.name, secured.READER.password)).index(
                index=allowed, id="w2", document={"text": "x"}
            )
        assert "security_exception" in str(cluster_says_no.value.body) and "alice" in str(cluster_says_no.value.body)
        client_for(url, **admin_auth).delete(index=allowed, id="w1", refresh=True)
