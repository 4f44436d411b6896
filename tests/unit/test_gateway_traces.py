"""Traces with the app in process and an in-memory span exporter: the
caller's traceparent honoured, the pass-through's span and the traceparent
the cluster gets, the model call's span in the gateway's judging threads;
and with tracing off, nothing of the SDK loaded and headers left alone."""

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from chunkrag_core import tracing
from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_core.settings import Settings
from chunkrag_filter.judging import judge_in_threads
from chunkrag_gateway import create_app
from local_services.scripted_openai import ScriptedOpenAI, completion
from tests.unit.test_gateway_app import FakeElasticsearch, FakeEmbedder, RecordingTransport, es_reply

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


class TracedElasticsearch(FakeElasticsearch):
    """The fake backend, taking headers as a backend does (they are the cluster's to read)."""

    def __init__(self):
        super().__init__()
        self.headers = []

    def with_headers(self, headers):
        self.headers.append(dict(headers))
        return self


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.configure(span_processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


def by_name(finished):
    return {span.name: span for span in finished}


def test_a_forwarded_request_is_a_child_of_the_callers_trace_and_the_cluster_gets_the_forward_span(spans):
    transport = RecordingTransport(es_reply)
    client = TestClient(create_app(Settings(es_url="http://es.internal:9200"), http_transport=transport))
    assert client.get("/idx/_count", headers={"traceparent": TRACEPARENT}).status_code == 200
    named = by_name(spans.get_finished_spans())
    server, forward = named["GET /{index}/_count"], named["forward GET"]
    assert f"{server.context.trace_id:032x}" == TRACE_ID and f"{server.parent.span_id:016x}" == CALLER_SPAN
    assert forward.parent.span_id == server.context.span_id and forward.context.trace_id == server.context.trace_id
    assert server.attributes["http.response.status_code"] == 200 and server.attributes["chunkrag.mode"] == "passthrough"
    # The cluster continues the gateway's span, not the caller's (whose header was replaced).
    (_, _, sent, _) = transport.requests[0]
    assert sent[b"traceparent"] == f"00-{TRACE_ID}-{forward.context.span_id:016x}-01".encode()


def test_a_filtered_search_judged_in_the_gateway_holds_the_model_calls(spans):
    with ScriptedOpenAI(default=completion("1")) as server:
        model = OpenAICompatibleChat(model="scripted", base_url=server.base_url, timeout_s=10)
        es = TracedElasticsearch()
        # The gateway's own judging threads, without the Redis score cache.
        app = create_app(
            Settings(),
            es=es,
            embedder=FakeEmbedder(),
            model=model,
            judge_many_factory=lambda budget_s: judge_in_threads(model, threads=2, budget_s=budget_s),
        )
        body = {"query": {"match": {"text": "what does a say"}}, "ext": {"chunkrag": {"judge_top": 9}}}
        answer = TestClient(app).post("/idx/_search", json=body, headers={"traceparent": TRACEPARENT})
        assert answer.status_code == 200, answer.text
        seen = [headers.get("traceparent") for headers in server.headers]
    finished = spans.get_finished_spans()
    server_span = by_name(finished)["POST /{index}/_search"]
    chats = [span for span in finished if span.name == "chat scripted"]
    assert chats and all(span.parent.span_id == server_span.context.span_id for span in chats)
    assert all(span.attributes["gen_ai.usage.input_tokens"] >= 0 for span in chats)
    assert all(f"{span.context.trace_id:032x}" == TRACE_ID for span in finished)
    # The cluster's searches go with the request's span as their parent.
    assert es.headers == [{"traceparent": f"00-{TRACE_ID}-{server_span.context.span_id:016x}-01"}]
    # The model server got each call's own span as its parent.
    assert sorted(seen) == sorted(f"00-{TRACE_ID}-{span.context.span_id:016x}-01" for span in chats)


def test_tracing_is_off_by_default_loads_no_sdk_and_leaves_headers_alone():
    script = """
import sys
from starlette.testclient import TestClient
from chunkrag_core.settings import Settings
from chunkrag_gateway import create_app
from tests.unit.test_gateway_app import RecordingTransport, es_reply

transport = RecordingTransport(es_reply)
client = TestClient(create_app(Settings(es_url="http://es.internal:9200"), http_transport=transport))
assert client.get("/idx/_count", headers={"traceparent": "00-%s-%s-01"}).status_code == 200
assert transport.requests[0][2][b"traceparent"] == b"00-%s-%s-01"  # the caller's, as it came
assert not [name for name in sys.modules if name.startswith("opentelemetry.sdk")]
""" % (TRACE_ID, CALLER_SPAN, TRACE_ID, CALLER_SPAN)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_an_unknown_exporter_is_named():
    with pytest.raises(tracing.TracingError, match="CHUNKRAG_OTEL_EXPORTER must be one of none, console, otlp"):
        tracing.configure_from_env({"CHUNKRAG_OTEL_EXPORTER": "jaeger"})
    assert not tracing.active()


def test_otlp_without_its_exporter_package_names_the_package():
    pytest.importorskip("opentelemetry.sdk")
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the OTLP exporter is installed here")
    with pytest.raises(tracing.TracingError, match="pip install opentelemetry-exporter-otlp-proto-http"):
        tracing.configure("otlp")
    assert not tracing.active()
