"""Which status and Elasticsearch-shaped body each library failure becomes."""

import httpx
import openai
import pytest
import redis
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig

import elasticsearch
from chunkrag_core.providers.chat import ChatError
from chunkrag_core.providers.embedding import EmbeddingError
from search_extension.gateway import errors
from search_extension.gateway.dialect import OptionError
from search_extension.retriever import RetrievalError


def mapped(exc):
    return errors.from_exception(exc, es_url="http://es:9200")


def chat_error_caused_by(cause, **kwargs):
    try:
        raise ChatError("provider did not answer", **kwargs) from cause
    except ChatError as exc:
        return exc


def test_error_body_is_elasticsearch_shaped():
    assert errors.error_body(400, "illegal_argument_exception", "bad") == {
        "error": {"root_cause": [{"type": "illegal_argument_exception", "reason": "bad"}], "type": "illegal_argument_exception", "reason": "bad"},
        "status": 400,
    }


def test_bad_input_is_400():
    assert mapped(OptionError("unknown option [x]")).status == 400
    assert mapped(RetrievalError("the query text is empty")).status == 400


def test_model_provider_failures():
    refused = mapped(ChatError("http://model/v1 answered 400: bad request", retryable=False, status=400))
    assert (refused.status, refused.type) == (502, "model_provider_exception") and "answered 400" in refused.reason
    request = httpx.Request("POST", "http://model/v1")
    assert mapped(chat_error_caused_by(openai.APITimeoutError(request=request), retryable=True)).status == 504
    assert mapped(chat_error_caused_by(openai.APIConnectionError(request=request), retryable=True)).status == 503
    assert mapped(ChatError("rate limited", retryable=True, status=429)).status == 503
    assert mapped(EmbeddingError("embeddings request failed")).status == 502


def test_elasticsearch_failures():
    meta = ApiResponseMeta(status=404, http_version="1.1", headers=HttpHeaders(), duration=0.0, node=NodeConfig("http", "es", 9200))
    body = {"error": {"type": "index_not_found_exception", "reason": "no such index [x]"}, "status": 404}
    missing = mapped(elasticsearch.NotFoundError("index_not_found_exception", meta, body))
    assert missing.status == 404 and errors.body_of(missing) == body
    assert mapped(elasticsearch.ConnectionError("refused")).status == 503
    assert mapped(elasticsearch.ConnectionTimeout("slow")).status == 504


def test_queue_failures_and_timeouts():
    assert mapped(redis.exceptions.ConnectionError("refused")).status == 503
    from workers.dispatch import WorkersUnavailable

    assert mapped(WorkersUnavailable("no worker answered")).status == 503
    from kombu.exceptions import OperationalError

    assert mapped(OperationalError("broker down")).status == 503
    assert mapped(TimeoutError()).status == 504


def test_anything_else_is_a_500_naming_the_exception(caplog):
    unexpected = mapped(KeyError("doc_id"))
    assert (unexpected.status, unexpected.reason) == (500, "KeyError: 'doc_id'")


@pytest.mark.parametrize("error", [errors.bad_request("x"), errors.unavailable("x"), errors.timed_out("x"), errors.too_large(10), errors.parse_error("x")])
def test_gateway_errors_map_to_themselves(error):
    assert mapped(error) is error
