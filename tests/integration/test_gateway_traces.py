"""One trace through every part of a filtered search judged on the Celery
workers: the real Elasticsearch, a real Redis (started here, on the
shared-state tests' port) as the broker, a Celery worker in this process (so
the in-memory exporter sees its spans too) and a scripted model server."""

from __future__ import annotations

import dataclasses
import logging
import uuid

import httpx
import pytest
import redis
from celery.contrib.testing.worker import start_worker
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chunkrag_core import tracing
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, QUESTION, by_content
from tests.integration.test_gateway_shared_state import REDIS_PORT, own_redis  # noqa: F401
from workers.app import make_app

pytestmark = pytest.mark.integration

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-traces-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


@pytest.fixture
def root_logging():
    """Celery's in-process worker sets up logging for the whole process (the
    root logger's level and handlers); put them back so later tests' log
    captures see what they expect."""
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.configure(span_processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


def test_a_filtered_search_is_one_trace_from_the_caller_to_the_model(
    settings,
    embedder,
    index,
    own_redis,  # noqa: F811
    spans,
    root_logging,
):
    redis_url = f"redis://127.0.0.1:{REDIS_PORT}/0"
    redis.Redis.from_url(redis_url).flushdb()
    with ScriptedOpenAI(default=by_content) as model_server:
        chat = dataclasses.replace(settings.chat, base_url=model_server.base_url, model="scripted", timeout_s=10)
        configured = dataclasses.replace(
            settings,
            redis_url=redis_url,
            chat=chat,
            workers=dataclasses.replace(settings.workers, judge="celery", query_budget_s=30.0),
        )
        body = {"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"candidates": 3, "judge_top": 9}}}
        with (
            start_worker(make_app(configured), pool="solo", perform_ping_check=False, loglevel="WARNING"),
            serve_in_thread(create_app(configured, embedder=embedder)) as url,
        ):
            answer = httpx.post(
                f"{url}/{index}/_search",
                json=body,
                headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
                timeout=60,
            )
        assert answer.status_code == 200, answer.text
        assert answer.json()["chunkrag"]["judged_by"] == "workers", answer.text
        model_parents = [headers.get("traceparent") for headers in model_server.headers]

    finished = spans.get_finished_spans()
    assert {f"{span.context.trace_id:032x}" for span in finished} == {TRACE_ID}
    by_id = {span.context.span_id: span for span in finished}

    def chain(span) -> list[str]:
        """The names from ``span`` up to the trace's first span of ours."""
        names = [span.name]
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            names.append(span.name)
        return names

    request = next(span for span in finished if span.name == "POST /{index}/_search")
    assert f"{request.parent.span_id:016x}" == CALLER_SPAN  # the caller's traceparent was honoured
    engine = [chain(span) for span in finished if span.name.startswith("engine ")]
    assert engine and all(names[1:] == ["POST /{index}/_search"] for names in engine), engine
    chats = [span for span in finished if span.name == "chat scripted"]
    assert chats
    for span in chats:
        assert chain(span) == ["chat scripted", "judge_chunks", "judge dispatch", "POST /{index}/_search"]
    # The model server was told each call's span.
    assert sorted(model_parents) == sorted(f"00-{TRACE_ID}-{span.context.span_id:016x}-01" for span in chats)
