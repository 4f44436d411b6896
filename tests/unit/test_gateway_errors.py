"""Which status and Elasticsearch-shaped body each library failure becomes:
client exceptions as their edge translates them (the engines', the chat
provider's), then as the gateway maps the project's errors."""

import logging
import subprocess
import sys

import elasticsearch
import httpx
import openai
import pytest
import redis
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig

from chunkrag_core.engines import elasticsearch as es_engine
from chunkrag_core.engines.errors import EngineNotFound, EngineRefused, EngineTimeout, EngineUnavailable
from chunkrag_core.providers.chat import ChatError, chat_error
from chunkrag_core.providers.embedding import EmbeddingError
from chunkrag_gateway import errors
from chunkrag_gateway.dialect import OptionError
from search_extension.retriever import RetrievalError, SearchRejected
from workers.errors import QueueUnavailable, WorkersTimedOut, WorkersUnavailable, queue_error, queue_errors


def mapped(exc):
    return errors.from_exception(exc)


def from_elasticsearch(exc):
    """As the Elasticsearch backend raises it."""
    return es_engine.engine_error(exc, "http://es:9200")


def from_queue(exc):
    """As the workers' dispatch raises it."""
    return queue_error(exc)


def test_error_body_is_elasticsearch_shaped():
    assert errors.error_body(400, "illegal_argument_exception", "bad") == {
        "error": {
            "root_cause": [{"type": "illegal_argument_exception", "reason": "bad"}],
            "type": "illegal_argument_exception",
            "reason": "bad",
        },
        "status": 400,
    }


def test_bad_input_is_400():
    assert mapped(OptionError("unknown option [x]")).status == 400
    assert mapped(RetrievalError("the query text is empty")).status == 400


def test_a_search_the_cluster_rejects_is_its_own_4xx_and_error():
    """Was a 400 whose reason held the Python repr of the cluster's whole
    error (index uuids, node ids and all)."""
    error = {
        "root_cause": [{"type": "query_shard_exception", "reason": "failed to create query", "index_uuid": "u"}],
        "type": "search_phase_execution_exception",
        "reason": "all shards failed",
    }
    rejected = mapped(SearchRejected(400, error))
    assert (rejected.status, rejected.type) == (400, "search_phase_execution_exception")
    assert rejected.reason == "one side of the hybrid search failed (400): failed to create query"
    assert rejected.body == {"error": error, "status": 400}


def test_model_provider_failures():
    refused = mapped(ChatError("http://model/v1 answered 400: bad request", retryable=False, status=400))
    assert (refused.status, refused.type) == (502, "model_provider_exception") and "answered 400" in refused.reason
    request = httpx.Request("POST", "http://model/v1")
    assert mapped(chat_error(openai.APITimeoutError(request=request), "http://model/v1")).status == 504
    assert mapped(chat_error(openai.APIConnectionError(request=request), "http://model/v1")).status == 503
    assert mapped(ChatError("rate limited", retryable=True, status=429)).status == 503
    assert mapped(EmbeddingError("embeddings request failed")).status == 502


def test_elasticsearch_failures():
    meta = ApiResponseMeta(
        status=404, http_version="1.1", headers=HttpHeaders(), duration=0.0, node=NodeConfig("http", "es", 9200)
    )
    body = {"error": {"type": "index_not_found_exception", "reason": "no such index [x]"}, "status": 404}
    missing = mapped(from_elasticsearch(elasticsearch.NotFoundError("index_not_found_exception", meta, body)))
    assert missing.status == 404 and errors.body_of(missing) == body
    assert mapped(from_elasticsearch(elasticsearch.ConnectionError("refused"))).status == 503
    assert mapped(from_elasticsearch(elasticsearch.ConnectionTimeout("slow"))).status == 504


def test_queue_failures_and_timeouts():
    from celery.exceptions import TimeoutError as CeleryTimeout
    from kombu.exceptions import OperationalError

    assert mapped(from_queue(redis.exceptions.ConnectionError("refused"))).status == 503
    assert mapped(WorkersUnavailable("no worker answered")).status == 503
    assert mapped(from_queue(OperationalError("broker down"))).status == 503
    slow = mapped(from_queue(CeleryTimeout("task abc")))
    assert (slow.status, slow.reason) == (504, "the workers did not finish in time")
    assert mapped(TimeoutError()).status == 504


def test_the_workers_dispatch_translates_its_queue_clients_exceptions():
    from celery.exceptions import TimeoutError as CeleryTimeout
    from kombu.exceptions import OperationalError

    from chunkrag_filter.judging import JudgingUnavailable

    redis_down = from_queue(redis.exceptions.ConnectionError("Error 111 connecting to 10.0.0.5:6379."))
    assert type(redis_down) is QueueUnavailable and isinstance(redis_down, JudgingUnavailable)
    assert redis_down.reason == "Redis is not reachable" and "10.0.0.5:6379" in str(redis_down)  # the detail
    broker_down = from_queue(OperationalError("refused"))
    assert type(broker_down) is QueueUnavailable
    assert broker_down.reason == "the Celery broker (Redis) is not reachable"
    assert isinstance(from_queue(CeleryTimeout()), WorkersTimedOut)
    other = KeyError("doc_id")
    assert from_queue(other) is other
    with pytest.raises(QueueUnavailable) as raised, queue_errors():
        raise redis.exceptions.ConnectionError("refused")
    assert isinstance(raised.value.__cause__, redis.exceptions.ConnectionError)
    with pytest.raises(KeyError), queue_errors():
        raise other


def test_anything_else_is_a_500_naming_the_exception(caplog):
    unexpected = mapped(KeyError("doc_id"))
    assert (unexpected.status, unexpected.reason) == (500, "KeyError: 'doc_id'")


@pytest.mark.parametrize(
    "error",
    [
        errors.bad_request("x"),
        errors.unavailable("x"),
        errors.timed_out("x"),
        errors.too_large(10),
        errors.parse_error("x"),
    ],
)
def test_gateway_errors_map_to_themselves(error):
    assert mapped(error) is error


def es_meta(status):
    node = NodeConfig("http", "es", 9200)
    return ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders(), duration=0.0, node=node)


def test_the_elasticsearch_backend_translates_its_clients_exceptions():
    body = {"error": {"type": "parsing_exception", "reason": "unknown query [mtch]"}, "status": 400}
    refused = from_elasticsearch(elasticsearch.BadRequestError("parsing_exception", es_meta(400), body))
    assert type(refused) is EngineRefused
    assert (refused.status, refused.body, refused.engine) == (400, body, "Elasticsearch")
    missing = from_elasticsearch(elasticsearch.NotFoundError("not_found", es_meta(404), "no body"))
    assert isinstance(missing, EngineNotFound) and missing.body is None
    down = from_elasticsearch(elasticsearch.ConnectionError("refused"))
    assert isinstance(down, EngineUnavailable) and "http://es:9200" in str(down)  # the detail, for the log
    assert isinstance(from_elasticsearch(elasticsearch.ConnectionTimeout("slow")), EngineTimeout)
    other = KeyError("doc_id")
    assert from_elasticsearch(other) is other


ADDRESSES = ("10.0.0.5", "6379", "9200", "es.internal", "model.internal", "redis://", "http://")
MODEL_URL = "http://model.internal:8088/v1"


def address_free(text: str) -> bool:
    return not any(part in text for part in ADDRESSES)


def failures_with_addresses():
    """(exception, status, the reason's start) for each dependency, every
    exception's own message naming where the dependency lives."""
    from kombu.exceptions import OperationalError

    request = httpx.Request("POST", f"{MODEL_URL}/chat/completions")
    refused_redis = "Error 111 connecting to 10.0.0.5:6379. Connection refused."
    broker_down = "cannot reach the Celery broker (Redis) at redis://10.0.0.5:6379/0: refused"
    return [
        (
            EngineUnavailable("Elasticsearch at http://es.internal:9200 is not reachable", engine="Elasticsearch"),
            503,
            "Elasticsearch is not reachable",
        ),
        (
            EngineTimeout("OpenSearch at http://es.internal:9200 did not answer in time", engine="OpenSearch"),
            504,
            "OpenSearch did not answer in time",
        ),
        (chat_error(openai.APIConnectionError(request=request), MODEL_URL), 503, "the model provider is unavailable"),
        (
            chat_error(openai.APITimeoutError(request=request), MODEL_URL),
            504,
            "the model provider did not answer in time",
        ),
        (ChatError(f"{MODEL_URL} answered 400: bad", status=400), 502, "the model provider failed: it answered 400"),
        (EmbeddingError(f"embeddings request to {MODEL_URL} failed: refused"), 502, "the embedding provider failed"),
        (from_queue(redis.exceptions.ConnectionError(refused_redis)), 503, "Redis is not reachable"),
        (TimeoutError("timed out connecting to 10.0.0.5:6379"), 504, "timed out"),
        (from_queue(OperationalError(refused_redis)), 503, "the Celery broker (Redis) is not reachable"),
        (
            WorkersUnavailable(broker_down, reason="cannot reach the Celery broker (Redis)"),
            503,
            "no Celery workers are available",
        ),
    ]


def test_unavailable_and_timed_out_name_the_dependency_never_its_address(caplog):
    with caplog.at_level(logging.WARNING, logger="chunkrag.gateway"):
        for exc, status, reason in failures_with_addresses():
            error = mapped(exc)
            assert error.status == status and error.reason.startswith(reason), (exc, error.reason)
            assert address_free(str(errors.body_of(error))), error.reason
    # The operator still learns where: the full detail is in the gateway's log.
    assert "http://es.internal:9200" in caplog.text and "10.0.0.5:6379" in caplog.text and MODEL_URL in caplog.text


def test_errors_reads_no_client_library():
    script = (
        "import sys\n"
        "from chunkrag_core.engines.errors import EngineUnavailable\n"
        "from chunkrag_gateway import errors\n"
        "errors.from_exception(EngineUnavailable('x', engine='Elasticsearch'))\n"
        "clients = ('elasticsearch', 'opensearchpy', 'openai', 'redis', 'kombu', 'celery')\n"
        "print(sorted(m for m in clients if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"
