"""The gateway in front of OpenSearch over real HTTP: the real OpenSearch
node, `opensearch-py` pointed at the gateway unchanged, and the scripted
model server answering by prompt content."""

from __future__ import annotations

import dataclasses
import uuid

import httpx
import pytest

from chunkrag_core.engines import make_backend
from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI, completion, is_listwise, listwise_choice
from search_extension import queries

pytestmark = pytest.mark.integration

DOCS = {
    "tokyo": "Tokyo is the capital of Japan. Its metropolitan area is home to about 37 million people.",
    "kyoto": "Kyoto was the imperial capital of Japan for over a thousand years. It has many Buddhist temples.",
    "violin": "The violin has four strings tuned in fifths. It is played with a bow.",
}
QUESTION = "What is the capital of Japan?"
# A Redis database of its own for the score cache: the test counts model calls.
CACHE_DB = 9


def by_content(request):
    if is_listwise(request):
        return listwise_choice("Tokyo is the capital")(request)
    return completion("Tokyo is the capital of Japan [1].")(request)


@pytest.fixture(scope="module")
def os_settings(settings):
    import redis

    chosen = dataclasses.replace(
        settings, search_backend="opensearch", redis_url=settings.redis_url.rsplit("/", 1)[0] + f"/{CACHE_DB}"
    )
    redis.Redis.from_url(chosen.redis_url).flushdb()
    return chosen


@pytest.fixture(scope="module")
def index(os_settings, embedder):
    backend = make_backend(os_settings)
    name = f"test-gateway-os-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    report = ingest_documents(
        documents, client=backend, embedder=embedder, settings=os_settings, index=name, progress=False
    )
    assert report.ok, report.errors
    yield name
    backend.delete_index(name)
    backend.close()


@pytest.fixture(scope="module")
def model_server():
    with ScriptedOpenAI(default=by_content) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(os_settings, embedder, model_server, index):
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    with serving(create_app(os_settings, model=model, embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway):
    from opensearchpy import OpenSearch

    opensearch = OpenSearch([gateway], max_retries=0, timeout=30)
    yield opensearch
    opensearch.close()


def ids(response) -> list[str]:
    return [hit["_id"] for hit in response["hits"]["hits"]]


def test_pass_through_answers_like_opensearch(os_settings, embedder, gateway, index):
    spec = queries.QuerySpec(text=QUESTION, vector=embedder.embed([QUESTION])[0], size=3)
    body = {"size": 3, "query": {"match": {"text": QUESTION}}}
    with httpx.Client() as http:
        direct = http.post(f"{os_settings.opensearch_url}/{index}/_search", json=body)
        proxied = http.post(f"{gateway}/{index}/_search", json=body)
        assert proxied.status_code == direct.status_code == 200
        assert ids(proxied.json()) == ids(direct.json()) and ids(direct.json())[0] == "tokyo:0"
        # OpenSearch's own kNN query passes through as sent.
        knn = {
            "size": 3,
            "query": {"knn": {"vector": {"vector": list(spec.vector), "k": 3}}},
            "_source": {"excludes": ["vector"]},
        }
        assert ids(http.post(f"{gateway}/{index}/_search", json=knn).json())[0] == "tokyo:0"
        missing = http.post(f"{gateway}/no-such-index-{uuid.uuid4().hex[:6]}/_search", json={})
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "index_not_found_exception"


def test_opensearch_py_works_unchanged_through_the_gateway(client, index, model_server):
    assert client.indices.exists(index=index) and not client.indices.exists(index=f"{index}-missing")
    assert client.count(index=index)["count"] == 6
    assert client.indices.get_mapping(index=index)[index]["mappings"]["properties"]["vector"]["type"] == "knn_vector"
    plain = client.search(index=index, body={"query": {"match": {"text": "violin strings"}}, "size": 2})
    assert ids(plain)[0] == "violin:0" and "_chunkrag" not in plain["hits"]["hits"][0]

    before = len(model_server.requests)
    filtered = client.search(
        index=index,
        body={
            "query": {"match": {"text": QUESTION}},
            "size": 5,
            "ext": {"chunkrag": {"candidates": 6, "include_dropped": True, "judge_top": 9, "answer": True}},
        },
    )
    assert ids(filtered) == ["tokyo:0"]
    hit = filtered["hits"]["hits"][0]
    assert hit["_chunkrag"]["kept"] and "vector" not in hit["_source"] and hit["_source"]["doc_id"] == "tokyo"
    assert filtered["chunkrag"]["answer"]["citations"] == ["tokyo:0"]
    assert len(model_server.requests) - before == 2  # one listwise judgement, one answer

    retrieval_only = client.search(
        index=index,
        body={
            "query": {"bool": {"must": {"match": {"text": "capital"}}, "filter": {"term": {"doc_id": "kyoto"}}}},
            "size": 2,
            "ext": {"chunkrag": {"stages": False}},
        },
    )
    assert ids(retrieval_only) == ["kyoto:0", "kyoto:1"]


def test_errors_reach_opensearch_py_as_its_own_exceptions(client, index):
    from opensearchpy import NotFoundError, RequestError

    with pytest.raises(RequestError) as refused:
        client.search(index=index, body={"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"candidate": 3}}})
    assert "unknown option [candidate]" in str(refused.value.info)
    for ext in ({}, {"ext": {"chunkrag": {"stages": False}}}):
        with pytest.raises(NotFoundError):
            client.search(index=f"{index}-missing", body={"query": {"match": {"text": QUESTION}}, **ext})


def test_health_names_the_engine(gateway):
    health = httpx.get(f"{gateway}/v1/health").json()
    assert health["ok"], health
    assert health["opensearch"]["ok"] and "elasticsearch" not in health, health
