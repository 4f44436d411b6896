"""The gateway's metrics endpoint and access log over real HTTP, with the real
(open) Elasticsearch, Redis's score cache and a scripted model behind it: a
known sequence of requests, then a scrape of the endpoint's own port."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread
from chunkrag_gateway.telemetry import ACCESS_LOGGER
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, QUESTION, by_content

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-telemetry-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_after_a_known_sequence_against_the_real_cluster(settings, embedder, index, caplog):
    port = free_port()
    configured = dataclasses.replace(
        settings,
        gateway=dataclasses.replace(settings.gateway, metrics_port=port, rate_per_s=0.01, rate_burst=6),
    )
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    # A question no earlier run judged: the second asking is the score cache's.
    question = f"{QUESTION} ({uuid.uuid4().hex[:8]})"
    filtered = {"query": {"match": {"text": question}}, "ext": {"chunkrag": {"judge_top": 9, "candidates": 3}}}
    with ScriptedOpenAI(default=by_content) as model_server:
        model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
        app = create_app(configured, model=model, embedder=embedder)
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.post(f"/{index}/_search", json={"query": {"match_all": {}}}).status_code == 200
            assert client.get(f"/{index}/_count").status_code == 200
            first = client.post(f"/{index}/_search", json=filtered)
            second = client.post(f"/{index}/_search", json=filtered)
            assert first.status_code == second.status_code == 200, first.text
            assert client.delete(f"/{index}").status_code == 403  # the write class is not forwarded
            assert client.get(f"/{index}/_count").status_code == 200
            assert client.get(f"/{index}/_count").status_code == 429  # the seventh of a burst of six
            seen = scrape(port)
            usage = [r.json()["chunkrag"]["usage"] for r in (first, second)]

    def requests(route, status, mode):
        labels = (("mode", mode), ("route", route), ("status", status))
        return seen.get(("chunkrag_gateway_requests_total", labels), 0)

    assert requests("/{index}/_search", "200", "passthrough") == 1
    assert requests("/{index}/_count", "200", "passthrough") == 2
    assert requests("/{index}/_search", "200", "filtered") == 2
    assert requests("/{index}", "403", "refused") == 1
    assert requests("/{index}/_count", "429", "refused") == 1
    assert seen[("chunkrag_gateway_rate_limited_total", (("identity_class", "address"),))] == 1
    # The filter's figures are the sum of what the two answers reported.
    assert seen[("chunkrag_gateway_judge_calls_total", ())] == sum(u["model_calls"] for u in usage) > 0
    assert seen[("chunkrag_gateway_judge_cache_hits_total", ())] == sum(u["cached_calls"] for u in usage) > 0
    kept = seen[("chunkrag_gateway_filter_chunks_total", (("decision", "kept"),))]
    dropped = seen[("chunkrag_gateway_filter_chunks_total", (("decision", "dropped"),))]
    assert kept >= 2 and kept + dropped == 6  # three candidates, twice
    assert seen[("chunkrag_gateway_filter_stage_duration_seconds_count", (("stage", "retrieval"),))] == 2
    # The connections of the served protocol: this client's, at least, was open.
    assert seen[("chunkrag_gateway_connections_open", ())] >= 1
    assert seen[("chunkrag_gateway_connections_refused_total", (("cap", "total"),))] == 0
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [line["status"] for line in lines] == [200, 200, 200, 200, 403, 200, 429]
    assert all(question not in json.dumps(line) and index not in json.dumps(line) for line in lines)
