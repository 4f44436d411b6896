"""The app in process (Starlette's TestClient), its edges replaced by doubles:
routing, pass-through fidelity, the body limit, error shapes, laziness."""

import base64
import dataclasses

import numpy as np
import pytest
from starlette.testclient import TestClient

from chunkrag_core.providers.chat import ChatError, ChatResponse
from chunkrag_core.settings import GatewaySettings, Settings
from chunkrag_filter.processors.relevance import Judgement
from chunkrag_gateway import create_app
from chunkrag_gateway.origin import HttpFailure, HttpResponse

COMPAT = "application/vnd.elasticsearch+json; compatible-with=9"


def hit(doc, position, score):
    return {
        "_index": "idx",
        "_id": f"{doc}:{position}",
        "_score": score,
        "_source": {"doc_id": doc, "position": position, "text": f"{doc} says {position}", "start": 0, "end": 5},
    }


class FakeElasticsearch:
    """A search backend that answers the retriever's _msearch (BM25 side, kNN side)."""

    def __init__(self):
        self.calls = []

    def offers_hybrid_query(self):
        return False

    def field_types(self, index):
        """A chunk index's listing: ext.chunkrag searches it for its chunks."""
        return {"doc_id": ("keyword",), "position": ("integer",), "text": ("text",), "vector": ("dense_vector",)}

    def concrete_indices(self, expression, fields):
        """Whatever the path names is one chunk index."""
        return {"idx": self.field_types("idx")}

    def msearch(self, searches):
        self.calls.append(searches)
        side = {"hits": {"hits": [hit("a", 0, 3.0), hit("b", 0, 2.0), hit("c", 0, 1.0)]}}
        return {"responses": [side, side]}

    def search(self, index, body):
        """The fetch of the chunks fusion kept: every chunk it knows by id."""
        (wanted,) = body["query"]["bool"]["should"]
        ids = wanted["bool"]["filter"][1]["ids"]["values"]
        return {"hits": {"hits": [hit(*i.split(":")[0:1], int(i.split(":")[1]), 1.0) for i in ids]}}


class FakeEmbedder:
    def embed(self, texts):
        return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3)


class FakeModel:
    def __init__(self, fail=None):
        self.fail = fail

    def complete(self, request):
        if self.fail:
            raise self.fail
        return ChatResponse(text="a says 0 [1].", prompt_tokens=20, completion_tokens=5)


def judge_factory(budget_s):
    def judge_many(query, chunks, options):
        return [
            Judgement(
                0.9 if c.doc_id == "a" else 0.1, None, None, 0.9 if c.doc_id == "a" else 0.1, calls=1, prompt_tokens=10
            )
            for c in chunks
        ]

    return judge_many


class RecordingTransport:
    """Stands in for the HTTP/1.1 pool: records what would be sent."""

    def __init__(self, respond):
        self.respond, self.requests = respond, []

    async def request(self, method, target, headers, body):
        self.requests.append((method, target, dict(headers), body))
        return self.respond(method, target)

    async def aclose(self):
        pass


def es_reply(method, target):
    headers = (
        (b"x-elastic-product", b"Elasticsearch"),
        (b"content-type", COMPAT.encode()),
        (b"warning", b'299 Elasticsearch-9.5.0 "deprecated"'),
        (b"warning", b'299 Elasticsearch-9.5.0 "again"'),
    )
    return HttpResponse(200, headers, b'{"hits":{"hits":[]}}')


def make_client(transport=None, model=None, es=None, max_body_bytes=1000, **gateway):
    settings = Settings(
        es_url="http://user:secret@es.internal:9200", gateway=GatewaySettings(max_body_bytes=max_body_bytes, **gateway)
    )
    app = create_app(
        settings,
        es=es or FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=model or FakeModel(),
        judge_many_factory=judge_factory,
        http_transport=transport or RecordingTransport(es_reply),
    )
    return TestClient(app), app


def test_creating_the_app_connects_to_nothing():
    settings = Settings(es_url="http://127.0.0.1:1")
    app = create_app(settings)
    edges = app.state.edges
    assert (
        edges._es is None and edges._model is None and edges._embedder is None and edges.passthrough._transport is None
    )


def test_pass_through_forwards_method_path_query_body_and_headers():
    transport = RecordingTransport(es_reply)
    client, _ = make_client(transport)
    body = b'{"query":{"match_all":{}}}'
    response = client.post(
        "/logs-%3Cnow%2Fd%3E/_search?filter_path=hits&typed_keys=true",
        content=body,
        headers={"content-type": COMPAT, "accept": COMPAT, "authorization": "Basic Y2FsbGVyOnB3"},
    )
    method, target, headers, sent = transport.requests[0]
    assert (method, target, sent) == ("POST", "/logs-%3Cnow%2Fd%3E/_search?filter_path=hits&typed_keys=true", body)
    assert headers[b"content-type"] == headers[b"accept"] == COMPAT.encode()
    # forward mode: the caller's credentials go along, never the gateway's own
    assert (
        headers[b"authorization"] == b"Basic Y2FsbGVyOnB3"
        and b"host" not in headers
        and b"content-length" not in headers
    )
    assert response.status_code == 200 and response.json() == {"hits": {"hits": []}}
    assert response.headers["x-elastic-product"] == "Elasticsearch" and response.headers["content-type"] == COMPAT
    assert response.headers.get_list("warning") == [
        '299 Elasticsearch-9.5.0 "deprecated"',
        '299 Elasticsearch-9.5.0 "again"',
    ]


def test_the_pool_holds_no_credentials_and_the_gateway_credentials_are_its_own():
    from chunkrag_gateway.passthrough import _make_pool, service_credentials

    pool = _make_pool(Settings(es_url="http://user:secret@es.internal:9200"))
    assert (pool.host, pool.port, pool.host_header) == ("es.internal", 9200, b"es.internal:9200") and pool.ssl is None
    assert b"secret" not in repr(vars(pool)).encode()
    assert service_credentials(Settings(es_url="http://user:secret@es.internal:9200")) == [
        (b"authorization", b"Basic " + base64.b64encode(b"user:secret"))
    ]
    assert service_credentials(Settings(es_url="http://user:secret@es.internal", es_api_key="k")) == [
        (b"authorization", b"ApiKey k")
    ]
    assert _make_pool(Settings(es_url="https://es.internal", es_api_key="k")).port == 443


def test_other_paths_and_methods_pass_through_with_their_status():
    transport = RecordingTransport(
        lambda method, target: HttpResponse(
            404, ((b"x-elastic-product", b"Elasticsearch"), (b"content-length", b"120")), b""
        )
    )
    client, _ = make_client(transport, passthrough="read,write")
    assert client.head("/missing-index").status_code == 404
    assert client.put("/idx/_doc/1", json={"a": 1}).status_code == 404
    assert client.get("/_search", params={"q": "chunkrag"}).status_code == 404
    assert [(m, t) for m, t, _, _ in transport.requests] == [
        ("HEAD", "/missing-index"),
        ("PUT", "/idx/_doc/1"),
        ("GET", "/_search?q=chunkrag"),
    ]


def test_a_body_mentioning_chunkrag_outside_ext_still_passes_through():
    transport = RecordingTransport(es_reply)
    client, _ = make_client(transport)
    body = b'{"query":{"match":{"text":"chunkrag"}}}'
    assert client.post("/idx/_search", content=body).status_code == 200
    assert transport.requests[0][3] == body


def test_chunkrag_search_answers_in_elasticsearch_shape_and_ext_never_reaches_elasticsearch():
    transport, es = RecordingTransport(es_reply), FakeElasticsearch()
    client, _ = make_client(transport, es=es)
    response = client.post(
        "/idx/_search",
        json={
            "query": {"match": {"text": "what does a say"}},
            "size": 5,
            "ext": {
                "chunkrag": {
                    "redundancy_threshold": None,
                    "calibrated": False,
                    "threshold": "dynamic",
                    "judge_top": 9,
                    "answer": True,
                }
            },
        },
        headers={"accept": COMPAT},
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-elastic-product"] == "Elasticsearch" and response.headers["content-type"].startswith(
        "application/vnd.elasticsearch+json"
    )
    body = response.json()
    assert [h["_id"] for h in body["hits"]["hits"]] == ["a:0"] and body["hits"]["hits"][0]["_score"] == 0.9
    assert body["chunkrag"]["answer"]["citations"] == ["a:0"] and body["chunkrag"]["usage"]["model_calls"] == 3 + 1
    assert transport.requests == [] and all("ext" not in body for body in es.calls[0])


def test_a_filtered_search_writes_an_answer_only_when_asked_and_ask_answers_by_default():
    client, _ = make_client()
    body = {
        "query": {"match": {"text": "what does a say"}},
        "ext": {"chunkrag": {"calibrated": False, "threshold": "dynamic", "judge_top": 9}},
    }
    section = client.post("/idx/_search", json=body).json()["chunkrag"]
    # Three judged chunks, no answer call: a search client asked for hits.
    assert section["answer"] is None and section["usage"]["model_calls"] == 3
    asked = client.post(
        "/v1/ask", json={"index": "idx", "question": "what does a say", "options": body["ext"]["chunkrag"]}
    ).json()
    assert asked["answer"] == "a says 0 [1]." and asked["usage"]["model_calls"] == 3 + 1


def test_invalid_requests_are_400_in_elasticsearch_shape():
    client, _ = make_client()
    unknown = client.post("/idx/_search", json={"query": {"match": {"text": "x"}}, "ext": {"chunkrag": {"nope": 1}}})
    assert (
        unknown.status_code == 400
        and unknown.json()["error"]["type"] == "illegal_argument_exception"
        and unknown.headers["x-elastic-product"] == "Elasticsearch"
    )
    assert "unknown option [nope]" in unknown.json()["error"]["reason"]
    # null is not "no block": the gateway names the option rather than pass it to the cluster.
    null = client.post("/idx/_search", json={"query": {"match": {"text": "x"}}, "ext": {"chunkrag": None}})
    assert null.status_code == 400 and null.json()["error"]["type"] == "illegal_argument_exception"
    assert "ext.chunkrag must be an object, got null" in null.json()["error"]["reason"]
    broken = client.post("/idx/_search", content=b'{"ext": {"chunkrag": {}')
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "parse_exception"
    params = client.post("/idx/_search?from=10", json={"query": {"match": {"text": "x"}}, "ext": {"chunkrag": {}}})
    assert params.status_code == 400 and "query-string parameters" in params.json()["error"]["reason"]
    ask = client.post("/v1/ask", json={"index": "idx", "question": "q", "options": {"rewrite": 1}})
    assert ask.status_code == 400 and "options.rewrite" in ask.json()["error"]["reason"]
    ask_json = client.post("/v1/ask", content=b"{", headers={"content-type": "application/json"})
    assert ask_json.status_code == 400 and ask_json.json()["error"]["type"] == "parse_exception"


def test_bodies_over_the_limit_are_413_declared_or_streamed():
    transport = RecordingTransport(es_reply)
    client, _ = make_client(transport, max_body_bytes=100)
    declared = client.post("/idx/_search", content=b"x" * 101)
    assert declared.status_code == 413 and declared.json()["error"]["type"] == "content_too_long_exception"
    streamed = client.post("/idx/_search", content=iter([b"x" * 60, b"x" * 60]))
    assert streamed.status_code == 413
    assert (
        client.post(
            "/v1/ask", content=iter([b"x" * 60, b"x" * 60]), headers={"content-type": "application/json"}
        ).status_code
        == 413
    )
    assert (
        client.post("/idx/_search", content=b"x" * 100).status_code == 200 and transport.requests[-1][3] == b"x" * 100
    )


def test_model_refusal_is_502_and_elasticsearch_unreachable_is_503():
    client, _ = make_client(model=FakeModel(fail=ChatError("model answered 400: no", retryable=False, status=400)))
    refused = client.post("/v1/ask", json={"index": "idx", "question": "q"})
    assert refused.status_code == 502 and "answered 400" in refused.json()["error"]["reason"]

    def unreachable(method, target):
        raise HttpFailure("cannot connect to es.internal:9200: Connection refused")

    client, _ = make_client(RecordingTransport(unreachable))
    down = client.get("/idx/_count")
    assert down.status_code == 503 and "es.internal" not in down.text and "secret" not in down.text
    assert down.json()["error"]["reason"] == "Elasticsearch is not reachable"


def test_ask_endpoint_and_openapi():
    client, _ = make_client()
    body = client.post(
        "/v1/ask", json={"index": "idx", "question": "what does a say", "options": {"candidates": 3}}
    ).json()
    assert body["citations"] == ["a:0"] and [c["id"] for c in body["chunks"]][0] == "a:0"
    schema = client.get("/openapi.json").json()
    assert schema["paths"]["/v1/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/AskRequest"
    )
    assert "/{path}" not in schema["paths"]


def test_openapi_lists_every_status_each_route_answers_in_elasticsearch_shape():
    client, _ = make_client()
    schema = client.get("/openapi.json").json()
    filtered = {"200", "400", "401", "403", "404", "408", "413", "429", "431", "502", "503", "504"}
    expected = {
        ("/v1/ask", "post"): filtered,
        ("/{index}/_search", "post"): filtered,
        ("/v1/health", "get"): {"200", "400", "413", "431", "503"},
    }
    for (path, method), statuses in expected.items():
        responses = schema["paths"][path][method]["responses"]
        assert set(responses) == statuses, path
        for status in statuses - {"200"}:
            assert (
                responses[status]["content"]["application/json"]["schema"]["$ref"]
                == "#/components/schemas/ElasticsearchError"
            ), (path, status)
            assert responses[status]["description"]
    error = schema["components"]["schemas"]["ElasticsearchError"]
    assert (
        set(error["required"]) == {"error", "status"} and "HTTPValidationError" not in schema["components"]["schemas"]
    )


def test_the_search_body_schema_requires_the_query_text_where_the_gateway_does():
    import jsonschema_rs

    from chunkrag_gateway.dialect import parse_search

    client, _ = make_client()
    document = client.get("/openapi.json").json()
    body_schema = document["paths"]["/{index}/_search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.Draft202012Validator({**body_schema, "components": document["components"]})
    valid = [
        {"query": {"match": {"text": "tokyo"}}, "ext": {"chunkrag": {}}},
        {"query": {"match": {"title": {"query": "tokyo"}}}, "size": 3, "ext": {"chunkrag": {"judge_top": 3}}},
        {"query": {"multi_match": {"query": "tokyo", "fields": ["text"]}}, "ext": {"chunkrag": {}}},
        {
            "query": {"bool": {"must": {"match_phrase": {"text": "tokyo"}}, "filter": [{"term": {"doc_id": "a"}}]}},
            "ext": {"chunkrag": {}},
        },
        {"ext": {"chunkrag": {"query": "tokyo"}}},
    ]
    refused = [
        {"ext": {"chunkrag": {}}},
        {"query": {"term": {"doc_id": "x"}}, "ext": {"chunkrag": {}}},
        {"query": {"match": {"text": "  "}}, "ext": {"chunkrag": {}}},
        {"ext": {"chunkrag": {"query": " "}}},
        {"query": {"match": {"text": "x"}}, "ext": {"chunkrag": {"candidate": 3}}},
    ]
    for body in valid:
        assert validator.is_valid(body), body
        parse_search(body, max_candidates=50)
    for body in refused:
        assert not validator.is_valid(body), body
        with pytest.raises(ValueError):
            parse_search(body, max_candidates=50)


@pytest.mark.parametrize("status, ok", [("green", True), ("red", False)])
def test_health_reports_each_dependency(status, ok, monkeypatch):
    reply = HttpResponse(200, (), b'{"status": "%s", "number_of_nodes": 1}' % status.encode())
    client, app = make_client(RecordingTransport(lambda method, target: reply))

    async def redis_up(required):
        return "redis", {"ok": True, "required": required}

    monkeypatch.setattr(app.state.edges, "_redis_health", redis_up)
    response = client.get("/v1/health")
    assert response.status_code == (200 if ok else 503)
    assert (
        response.json()["elasticsearch"]["ok"] is ok
        and response.json()["judge"] == "threads"
        and "workers" not in response.json()
    )


def celery_settings():
    from chunkrag_core.settings import WorkerSettings

    return Settings(workers=WorkerSettings(judge="celery", query_budget_s=40.0))


def test_celery_judging_goes_through_the_dispatcher_with_the_budget(monkeypatch):
    import workers.dispatch
    from chunkrag_filter.judging import Degrading
    from chunkrag_gateway.edges import Edges

    calls = []
    monkeypatch.setattr(
        workers.dispatch, "celery_judge_many", lambda app, **kwargs: calls.append((app, kwargs)) or "judge"
    )
    edges = Edges(celery_settings(), model=FakeModel())
    edges._celery = "celery-app"
    judge = edges.judge_many(7.5)
    assert isinstance(judge, Degrading) and [(p.name, p.judge_many) for p in judge.places][0] == ("workers", "judge")
    assert [p.name for p in judge.places] == ["workers", "gateway"]
    # one health record for every query of the gateway
    assert calls == [("celery-app", {"settings": edges.settings, "budget_s": 7.5, "health": edges.worker_health})]


def celery_client(monkeypatch, model, unavailable):
    import workers.dispatch

    def celery_judge_many(app, **kwargs):
        def judge_many(query, chunks, options):
            raise workers.dispatch.WorkersUnavailable(unavailable)

        return judge_many

    monkeypatch.setattr(workers.dispatch, "celery_judge_many", celery_judge_many)
    # Nothing listens on port 1: the score cache misses instead of sharing scores between tests.
    settings = dataclasses.replace(celery_settings(), redis_url="redis://127.0.0.1:1/0")
    app = create_app(
        settings,
        es=FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=model,
        http_transport=RecordingTransport(es_reply),
    )
    app.state.edges._celery = "celery-app"
    return TestClient(app)


JUDGED = {
    "query": {"match": {"text": "what does a say"}},
    "ext": {
        "chunkrag": {
            "redundancy_threshold": None,
            "judge_top": 9,
            "answer": False,
            "include_dropped": True,
            "gate": "off",  # the judging behind it
        }
    },
}


def test_celery_judging_falls_back_to_the_gateway_threads_and_says_so(monkeypatch):
    class ListwiseModel:
        def complete(self, request):
            return ChatResponse(text="1", prompt_tokens=20, completion_tokens=1)

    client = celery_client(
        monkeypatch, ListwiseModel(), "cannot reach the Celery broker (Redis) at redis://127.0.0.1:6399/0: refused"
    )
    response = client.post("/idx/_search", json=JUDGED)
    assert response.status_code == 200, response.text
    section = response.json()["chunkrag"]
    assert section["judged_by"] == "gateway" and section["judged_by_reason"].startswith(
        "workers: cannot reach the Celery broker"
    )
    assert section["usage"]["model_calls"] == 1  # one listwise call, made here
    ask = client.post(
        "/v1/ask",
        json={
            "index": "idx",
            "question": "what does a say",
            "options": {"judge_top": 9, "answer": False, "gate": "off"},
        },
    ).json()
    assert ask["judged_by"] == "gateway" and "Celery broker" in ask["judged_by_reason"]


def test_celery_judging_without_workers_or_model_scores_by_retrieval(monkeypatch):
    down = ChatError("cannot connect to the model: Connection refused", retryable=True)
    client = celery_client(monkeypatch, FakeModel(fail=down), "no worker took the query's tasks within 3 s")
    response = client.post("/idx/_search", json=JUDGED)
    assert response.status_code == 200, response.text
    body = response.json()
    section = body["chunkrag"]
    assert (
        section["judged_by"] == "retrieval"
        and "no worker took" in section["judged_by_reason"]
        and "model provider is unavailable" in section["judged_by_reason"]
    )
    # every candidate scored by the shipped retrieval-signal model: none "unscored"
    reasons = [h["_chunkrag"]["reason"] for h in body["hits"]["hits"]] + [
        d["_chunkrag"]["reason"] for d in section["dropped"]
    ]
    assert (
        reasons
        and "unscored" not in reasons
        and all("calibrated" in h["_chunkrag"]["scores"] for h in body["hits"]["hits"])
    )
    # a model that refuses (not a failure to reach it) still fails the query
    refused = celery_client(
        monkeypatch, FakeModel(fail=ChatError("model answered 400: no", retryable=False, status=400)), "no worker"
    )
    assert refused.post("/idx/_search", json=JUDGED).status_code == 502


def test_health_with_celery_reports_the_workers(monkeypatch):
    import workers.dispatch

    def no_workers(app, timeout):
        raise workers.dispatch.WorkersUnavailable("no Celery worker answered a ping within 2 s")

    monkeypatch.setattr(workers.dispatch, "check_workers", no_workers)
    reply = HttpResponse(200, (), b'{"status": "green", "number_of_nodes": 1}')
    app = create_app(celery_settings(), http_transport=RecordingTransport(lambda method, target: reply))
    edges = app.state.edges
    edges._celery = "celery-app"

    async def redis_up(required):
        return "redis", {"ok": True, "required": required}

    monkeypatch.setattr(edges, "_redis_health", redis_up)
    response = TestClient(app).get("/v1/health")
    assert response.status_code == 503
    assert response.json()["workers"] == {
        "ok": False,
        "count": 0,
        "reason": "no Celery worker answered a ping within 2 s",
    }
    assert response.json()["redis"]["required"] is True


def test_public_health_shows_no_address(caplog):
    def unreachable(method, target):
        raise HttpFailure("cannot connect to es.internal:9200: Connection refused")

    # Port 1 on this machine: nothing listens, Redis's connection is refused at once.
    settings = Settings(es_url="http://user:secret@es.internal:9200", redis_url="redis://cache-user:pw@127.0.0.1:1/3")
    transport = RecordingTransport(unreachable)
    app = create_app(
        settings, es=FakeElasticsearch(), embedder=FakeEmbedder(), model=FakeModel(), http_transport=transport
    )
    with caplog.at_level("WARNING", logger="chunkrag.gateway"):
        response = TestClient(app).get("/v1/health")
    assert response.status_code == 503
    assert response.json()["elasticsearch"] == {"ok": False, "reason": "Elasticsearch is not reachable"}
    assert response.json()["redis"]["reason"] == "Redis is not reachable"
    addresses = ("es.internal", "9200", "127.0.0.1", "cache-user", "secret", "redis://")
    assert not any(part in response.text for part in addresses)
    assert "es.internal:9200" in caplog.text and "127.0.0.1:1" in caplog.text


class ShardLostElasticsearch(FakeElasticsearch):
    """One shard of three has no live copy: the kNN side says so, as a
    cluster that lost a node with no replica does."""

    FAILURE = {"shard": 1, "index": "idx", "node": "n2", "reason": {"type": "no_shard_available_action_exception"}}

    def msearch(self, searches):
        self.calls.append(searches)
        hits = {"hits": [hit("a", 0, 3.0), hit("b", 0, 2.0)]}
        text = {"_shards": {"total": 3, "successful": 3, "skipped": 0, "failed": 0}, "hits": hits}
        knn = {"_shards": {"total": 3, "successful": 2, "skipped": 0, "failed": 1, "failures": [self.FAILURE]}}
        return {"responses": [text, {**knn, "hits": hits}]}


def test_a_shard_lost_by_the_cluster_is_reported_in_shards_not_hidden():
    client, _ = make_client(es=ShardLostElasticsearch(), max_body_bytes=10_000)
    body = {"query": {"match": {"text": "what does a say"}}, "ext": {"chunkrag": {"stages": False}}}
    searched = client.post("/idx/_search", json=body)
    assert searched.status_code == 200
    assert searched.json()["_shards"] == {
        "total": 3,
        "successful": 2,
        "skipped": 0,
        "failed": 1,
        "failures": [ShardLostElasticsearch.FAILURE],
    }
    assert [h["_id"] for h in searched.json()["hits"]["hits"]] == ["a:0", "b:0"]
    asked = client.post("/v1/ask", json={"index": "idx", "question": "what does a say"})
    assert asked.status_code == 200 and asked.json()["shards"]["failed"] == 1


class AllShardsFailedElasticsearch(FakeElasticsearch):
    ERROR = {
        "type": "search_phase_execution_exception",
        "reason": "all shards failed",
        "phase": "query",
        "root_cause": [{"type": "no_shard_available_action_exception", "reason": None}],
    }

    def msearch(self, searches):
        self.calls.append(searches)
        return {"responses": [{"error": self.ERROR, "status": 503}, {"error": self.ERROR, "status": 503}]}


def test_a_search_no_shard_could_answer_is_the_clusters_503_not_a_bad_request():
    client, _ = make_client(es=AllShardsFailedElasticsearch(), max_body_bytes=10_000)
    body = {"query": {"match": {"text": "what does a say"}}, "ext": {"chunkrag": {"stages": False}}}
    answered = client.post("/idx/_search", json=body)
    assert answered.status_code == 503
    assert answered.json() == {"error": AllShardsFailedElasticsearch.ERROR, "status": 503}


def refusing_reply(method, target):
    return HttpResponse(
        401,
        ((b"content-type", b"application/json"), (b"www-authenticate", b'Basic realm="security", charset="UTF-8"')),
        b'{"error":{"type":"security_exception","reason":"missing authentication credentials"},"status":401}',
    )


def test_a_browser_never_sees_the_clusters_basic_challenge_an_api_client_does():
    client, _ = make_client(transport=RecordingTransport(refusing_reply))
    api = client.get("/idx/_search")
    assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Basic")
    for mode in ("navigate", "cors", "no-cors"):
        browser = client.get("/idx/_search", headers={"Sec-Fetch-Mode": mode})
        assert browser.status_code == 401 and "www-authenticate" not in browser.headers
        assert browser.json()["error"]["type"] == "security_exception"
