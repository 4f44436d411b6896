"""The gateway over real HTTP (uvicorn on a free port): real Elasticsearch,
the official client pointed at the gateway, and the scripted model server
answering by prompt content."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
import uuid

import httpx
import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_filter.pipeline import FilterOptions
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI, completion, error, is_listwise, listwise_choice
from search_extension import queries
from tests.support.chunking import sentence_chunks

pytestmark = pytest.mark.integration

DOCS = {
    "tokyo": "Tokyo is the capital of Japan. Its metropolitan area is home to about 37 million people.",
    "kyoto": "Kyoto was the imperial capital of Japan for over a thousand years. It has many Buddhist temples.",
    "violin": "The violin has four strings tuned in fifths. It is played with a bow.",
}
DEFAULTS = FilterOptions()
# The judge is off by default (the retrieval signals decide); these tests are
# about the judging path through the gateway, so they turn it on.
JUDGE = {"judge_top": 9}
JUDGED = FilterOptions(judge_top=9)
QUESTION = "What is the capital of Japan?"
# Markers in the question steer the scripted model (every prompt holds the question).
PROVIDER_REFUSES = "refused-by-provider"
MODEL_RAMBLES = "rambling-model"
MODEL_STALLS = "stalling-model"


def by_content(request):
    prompt = request["messages"][-1]["content"]
    if PROVIDER_REFUSES in prompt:
        return error(400, "this model does not accept the request")(request)
    if MODEL_RAMBLES in prompt:
        return completion("well, bananas are yellow")(request)
    if MODEL_STALLS in prompt:
        time.sleep(1.5)
    if is_listwise(request):  # the default judging
        return listwise_choice("Tokyo is the capital")(request)
    if "Passages:" in prompt:
        return completion("Tokyo is the capital of Japan [1].")(request)
    if "optimal threshold" in prompt:  # threshold "llm"
        return completion("0.5")(request)
    if "Rewritten Query:" in prompt:  # the paper's rewriting prompt: the query back
        return completion(prompt.split('Original Query: "', 1)[1].split('"\n', 1)[0])(request)
    chunk = prompt.split("Chunk:", 1)[-1]  # any other prompt: judged as a whole
    return completion("Yes", yes_probability=0.95 if "Tokyo is the capital" in chunk else 0.05)(request)


# The score cache lives in Redis across runs; these tests count model calls,
# so they get a database of their own, emptied before each test.
CACHE_DB = 8


def own_cache(settings):
    return dataclasses.replace(settings, redis_url=settings.redis_url.rsplit("/", 1)[0] + f"/{CACHE_DB}")


@pytest.fixture(autouse=True)
def empty_cache(settings):
    import redis

    redis.Redis.from_url(own_cache(settings).redis_url).flushdb()


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    # Sentence chunks: the tests name the chunk that answers.
    ingest_documents(
        documents, client=es, embedder=embedder, settings=sentence_chunks(settings), index=name, progress=False
    )
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def model_server():
    with ScriptedOpenAI(default=by_content) as server:
        # The stalled replies are written after the client timed out and
        # hung up; http.server would print each broken pipe to stderr.
        server._server.handle_error = lambda request, client_address: None
        yield server


@pytest.fixture(scope="module")
def gateway(settings, embedder, model_server, index):
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    with serving(create_app(own_cache(settings), model=model, embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway):
    from elasticsearch import Elasticsearch

    es = Elasticsearch(gateway, max_retries=0)
    yield es
    es.close()


def ids(response) -> list[str]:
    return [hit["_id"] for hit in response["hits"]["hits"]]


def test_pass_through_answers_like_elasticsearch(settings, embedder, gateway, index):
    spec = queries.QuerySpec(text=QUESTION, vector=embedder.embed([QUESTION])[0], size=3)
    body = queries.native_sum_body(spec)
    headers = {
        "content-type": "application/vnd.elasticsearch+json; compatible-with=9",
        "accept": "application/vnd.elasticsearch+json; compatible-with=9",
    }
    with httpx.Client(headers=headers) as http:
        direct = http.post(f"{settings.es_url}/{index}/_search", json=body)
        proxied = http.post(f"{gateway}/{index}/_search", json=body)
        assert proxied.status_code == direct.status_code == 200
        assert ids(proxied.json()) == ids(direct.json()) and ids(direct.json())[0] == "tokyo:0"
        assert [h["_score"] for h in proxied.json()["hits"]["hits"]] == [
            h["_score"] for h in direct.json()["hits"]["hits"]
        ]
        assert proxied.headers["x-elastic-product"] == "Elasticsearch"
        assert proxied.headers["content-type"] == direct.headers["content-type"]
        # the query string goes along
        filtered = http.post(f"{gateway}/{index}/_search?filter_path=hits.hits._id", json=body).json()
        assert filtered == {"hits": {"hits": [{"_id": i} for i in ids(direct.json())]}}
        # and Elasticsearch's errors come back as they are
        direct_missing = http.post(f"{settings.es_url}/no-such-index-{uuid.uuid4().hex[:6]}/_search", json={})
        proxied_missing = http.post(f"{gateway}/no-such-index-{uuid.uuid4().hex[:6]}/_search", json={})
        assert proxied_missing.status_code == direct_missing.status_code == 404
        assert proxied_missing.json()["error"]["type"] == direct_missing.json()["error"]["type"]


def test_official_client_works_unchanged(client, index):
    assert client.indices.exists(index=index) and not client.indices.exists(index=f"{index}-missing")
    assert client.count(index=index)["count"] == 6
    assert "text" in client.indices.get_mapping(index=index)[index]["mappings"]["properties"]
    plain = client.search(index=index, query={"match": {"text": "violin strings"}}, size=2)
    assert ids(plain)[0] == "violin:0" and "_chunkrag" not in plain["hits"]["hits"][0]

    filtered = client.search(
        index=index,
        query={"match": {"text": QUESTION}},
        size=5,
        ext={"chunkrag": {"candidates": 6, "include_dropped": True, "answer": True, **JUDGE}},
    )
    assert ids(filtered) == ["tokyo:0"]
    hit = filtered["hits"]["hits"][0]
    assert hit["_index"] == index and hit["_score"] == pytest.approx(hit["_chunkrag"]["scores"]["combined"])
    assert hit["_chunkrag"]["scores"]["base"] == pytest.approx(0.95)
    assert hit["_chunkrag"]["kept"] and hit["_chunkrag"]["reason"] == "above_threshold"
    assert "vector" not in hit["_source"] and hit["_source"]["doc_id"] == "tokyo"
    section = filtered["chunkrag"]
    assert section["answer"]["citations"] == ["tokyo:0"] and section["answer"]["found"]
    assert section["threshold"]["method"] == DEFAULTS.threshold and not section["nothing_relevant"]
    assert {d["_id"] for d in section["dropped"]} == {f"{d}:{p}" for d in DOCS for p in (0, 1)} - {"tokyo:0"}
    # One listwise batch, asked in as many orders as the default asks; one answer.
    assert section["usage"]["model_calls"] == JUDGED.scoring.orders + 1 and section["usage"]["prompt_tokens"] > 0
    assert {"embed", "retrieval", "scoring", "answer", "total"} <= set(section["timings_ms"])


def test_retrieval_only_search_calls_no_model(client, index, model_server):
    before = len(model_server.requests)
    response = client.search(
        index=index,
        query={"bool": {"must": {"match": {"text": "capital"}}, "filter": {"term": {"doc_id": "kyoto"}}}},
        size=2,
        ext={"chunkrag": {"stages": False}},
    )
    assert ids(response) == ["kyoto:0", "kyoto:1"] and response["chunkrag"]["stages"] is False
    assert len(model_server.requests) == before


def test_ask_endpoint(gateway, index):
    response = httpx.post(
        f"{gateway}/v1/ask",
        json={"index": index, "question": QUESTION, "options": {"candidates": 4, **JUDGE}},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answer"] == "Tokyo is the capital of Japan [1]." and body["citations"] == ["tokyo:0"]
    assert body["chunks"][0]["id"] == "tokyo:0" and body["chunks"][0]["kept"]
    assert len(body["chunks"]) == 4 and all(not c["kept"] for c in body["chunks"][1:])
    # One listwise batch judges the four candidates (in each order); one call writes the answer.
    assert body["usage"]["model_calls"] == JUDGED.scoring.orders + 1 and body["threshold"]["value"] > 0


def test_filter_processes_answer_as_the_gateways_threads(settings, gateway, index, model_server):
    """The same filtered search and /v1/ask through a gateway whose filtered
    searches run in filter processes (nothing handed in: each process makes
    its own parts from the settings, here pointed at the scripted model)."""
    scripted = dataclasses.replace(
        own_cache(settings),
        chat=dataclasses.replace(settings.chat, model="scripted", base_url=model_server.base_url, timeout_s=10),
        workers=dataclasses.replace(settings.workers, judge="threads"),
        gateway=dataclasses.replace(settings.gateway, filter_processes=True, max_filtered=1),
    )
    body = {"query": {"match": {"text": QUESTION}}, "size": 3, "ext": {"chunkrag": {"candidates": 4, **JUDGE}}}
    app = create_app(scripted)
    with serving(app) as processes:
        in_process = httpx.post(f"{processes}/{index}/_search", json=body, timeout=120)
        asked = httpx.post(
            f"{processes}/v1/ask",
            json={"index": index, "question": QUESTION, "options": {"candidates": 4, **JUDGE}},
            timeout=120,
        )
        (process,) = app.state.filter_processes.pids()
        # Idle, searched at once: whether or not the pool has seen it end (a
        # process killed at nice 10 on a busy machine may wait for the CPU
        # time its own exit takes), no process begins the next search and a
        # fresh pool answers it.
        os.kill(process, signal.SIGKILL)
        again = httpx.post(f"{processes}/{index}/_search", json=body, timeout=120)
        assert again.status_code == 200 and ids(again.json()) == ids(in_process.json()), again.text
        assert app.state.filter_processes.pids() not in ((), (process,))
    in_threads = httpx.post(f"{gateway}/{index}/_search", json=body, timeout=30)
    assert in_process.status_code == in_threads.status_code == 200, in_process.text
    assert ids(in_process.json()) == ids(in_threads.json()) and ids(in_process.json())[0] == "tokyo:0"
    assert [hit["_chunkrag"] for hit in in_process.json()["hits"]["hits"]] == [
        hit["_chunkrag"] for hit in in_threads.json()["hits"]["hits"]
    ]
    assert asked.status_code == 200 and asked.json()["citations"] == ["tokyo:0"], asked.text
    assert app.state.filter_processes.pids() == ()  # ended with the gateway


def test_health_and_openapi(gateway):
    health = httpx.get(f"{gateway}/v1/health")
    assert health.status_code == 200 and health.json()["elasticsearch"]["ok"] and health.json()["redis"]["ok"]
    schema = httpx.get(f"{gateway}/openapi.json").json()
    assert "/v1/ask" in schema["paths"] and {"AskRequest", "AskResponse", "OptionsModel"} <= set(
        schema["components"]["schemas"]
    )


def test_bad_requests_are_refused_in_elasticsearch_shape(client, gateway, index, settings):
    from elasticsearch import ApiError, BadRequestError

    with pytest.raises(BadRequestError) as refused:
        client.search(index=index, query={"match": {"text": QUESTION}}, ext={"chunkrag": {"candidate": 3}})
    assert (
        "unknown option [candidate]" in refused.value.body["error"]["reason"]
        and "candidates" in refused.value.body["error"]["reason"]
    )
    with pytest.raises(BadRequestError):
        client.search(
            index=index,
            query={"match": {"text": QUESTION}},
            ext={"chunkrag": {"candidates": settings.gateway.max_candidates + 1}},
        )
    invalid = httpx.post(
        f"{gateway}/{index}/_search", content=b'{"ext": {"chunkrag": ', headers={"content-type": "application/json"}
    )
    assert invalid.status_code == 400 and invalid.json()["error"]["type"] == "parse_exception"

    oversized = b" " * (settings.gateway.max_body_bytes + 1)
    assert httpx.post(f"{gateway}/{index}/_search", content=oversized).status_code == 413
    assert (
        httpx.post(f"{gateway}/{index}/_search", content=iter([oversized])).status_code == 413
    )  # chunked: no Content-Length
    with pytest.raises(ApiError) as too_large:
        client.search(index=index, query={"match": {"text": "x" * settings.gateway.max_body_bytes}})
    assert too_large.value.meta.status == 413
    # A missing index is a 404 with ext.chunkrag as without it.
    from elasticsearch import NotFoundError

    for ext in ({}, {"ext": {"chunkrag": {"stages": False}}}):
        with pytest.raises(NotFoundError) as missing:
            client.search(index=f"{index}-missing", query={"match": {"text": QUESTION}}, **ext)
        assert missing.value.body["error"]["type"] == "index_not_found_exception"


def test_model_failures(client, index):
    from elasticsearch import ApiError

    with pytest.raises(ApiError) as refused:
        client.search(
            index=index,
            query={"match": {"text": f"{QUESTION} {PROVIDER_REFUSES}"}},
            ext={"chunkrag": {"candidates": 3, **JUDGE}},
        )
    assert refused.value.meta.status == 502 and "400" in refused.value.body["error"]["reason"]

    rambling = client.search(
        index=index,
        query={"match": {"text": f"{QUESTION} {MODEL_RAMBLES}"}},
        ext={"chunkrag": {"candidates": 4, "fallback_k": 1, "include_dropped": True, **JUDGE}},
    )
    decisions = [h["_chunkrag"]["reason"] for h in rambling["hits"]["hits"]] + [
        d["_chunkrag"]["reason"] for d in rambling["chunkrag"]["dropped"]
    ]
    assert sorted(decisions) == ["fallback", "unscored", "unscored", "unscored"]
    assert rambling["chunkrag"]["nothing_relevant"] and all(h["_score"] is None for h in rambling["hits"]["hits"])


def test_budget_and_model_timeout(settings, embedder, model_server, index):
    slow_model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=0.5)
    patient_model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    question = f"{QUESTION} {MODEL_STALLS}"
    with serving(create_app(own_cache(settings), model=patient_model, embedder=embedder)) as url:
        late = httpx.post(
            f"{url}/v1/ask",
            json={"index": index, "question": question, "options": {"candidates": 2, "budget_s": 0.3, **JUDGE}},
            timeout=30,
        )
    assert late.status_code == 200 and {c["reason"] for c in late.json()["chunks"]} <= {"unscored", "fallback"}
    with serving(create_app(own_cache(settings), model=slow_model, embedder=embedder)) as url:
        timed_out = httpx.post(
            f"{url}/v1/ask",
            json={"index": index, "question": question, "options": {"candidates": 2, **JUDGE}},
            timeout=30,
        )
    assert timed_out.status_code == 504 and timed_out.json()["error"]["type"] == "timeout_exception"


def test_elasticsearch_down_is_503(settings, embedder, index):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    down = dataclasses.replace(settings, es_url=f"http://127.0.0.1:{port}")
    with serving(create_app(down, embedder=embedder)) as url:
        assert httpx.get(f"{url}/_count").status_code == 503
        chunkrag = httpx.post(
            f"{url}/{index}/_search", json={"query": {"match": {"text": "x"}}, "ext": {"chunkrag": {"stages": False}}}
        )
        assert chunkrag.status_code == 503 and "not reachable" in chunkrag.json()["error"]["reason"]
        health = httpx.get(f"{url}/v1/health")
        assert health.status_code == 503 and not health.json()["elasticsearch"]["ok"]


def test_a_failed_shard_is_reported_in_shards_and_the_other_indices_answer(es, gateway, index):
    """A real shard failure: a chunk index whose vectors have other dims than
    the query's fails the kNN side on its shard; the cluster answers from the
    other chunk index, and the gateway says which shard failed rather than
    hiding it."""
    broken = f"test-gateway-otherdims-{uuid.uuid4().hex[:8]}"
    mappings = {
        "properties": {
            "doc_id": {"type": "keyword"},
            "position": {"type": "integer"},
            "text": {"type": "text"},
            "vector": {"type": "dense_vector", "dims": 3, "similarity": "cosine"},
        }
    }
    es.create_index(broken, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": mappings})
    try:
        body = {"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"stages": False}}}
        answered = httpx.post(f"{gateway}/{index},{broken}/_search", json=body, timeout=60)
        assert answered.status_code == 200
        shards = answered.json()["_shards"]
        assert (shards["total"], shards["successful"], shards["failed"]) == (2, 1, 1)
        (failure,) = shards["failures"]
        assert failure["index"] == broken and "dimensions" in failure["reason"]["reason"]
        assert ids(answered.json())[0] == "tokyo:0"
        asked = httpx.post(
            f"{gateway}/v1/ask",
            json={"index": f"{index},{broken}", "question": QUESTION, "options": {"stages": False}},
            timeout=60,
        )
        assert asked.status_code == 200 and asked.json()["shards"]["failed"] == 1
    finally:
        es.delete_index(broken)
