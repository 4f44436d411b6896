"""Service mode's answers without the cluster's insides
(``chunkrag_gateway/cluster_internals.py``), on the texts Elasticsearch 9.5
gave for a bad query (read off the secured test node)."""

from __future__ import annotations

import orjson

from chunkrag_gateway.cluster_internals import (
    as_type,
    error_without_internals,
    may_name_internals,
    scrub_internals,
    scrubbed_text,
)
from chunkrag_gateway.errors import GatewayError
from chunkrag_gateway.origin import HttpResponse
from tests.unit.test_gateway_security import KEY_A, KEYS, KeyMakingTransport, app_client

UUID = "TXbUSSpyTuqUNNZKFmMsgg"
NODE = "ZGBWXxKsQSyfzxyOf8kE8Q"
VALIDATE_SHARD = {
    "_shards": {"total": 1, "successful": 1, "failed": 0},
    "valid": False,
    "explanations": [
        {
            "index": "docs-1",
            "valid": False,
            "error": f"[docs-1/{UUID}] org.elasticsearch.index.query.QueryShardException: failed to create query: "
            'For input string: "x"; java.lang.NumberFormatException: For input string: "x"',
        }
    ],
}
VALIDATE_PARSE = {
    "valid": False,
    "error": "org.elasticsearch.common.ParsingException: unknown query [nope]; "
    "org.elasticsearch.xcontent.NamedObjectNotFoundException: [1:18] unknown field [nope]",
}
SEARCH_400 = {
    "error": {
        "root_cause": [{"type": "query_shard_exception", "reason": "bad", "index_uuid": UUID, "index": "docs-1"}],
        "type": "search_phase_execution_exception",
        "reason": "all shards failed",
        "failed_shards": [
            {
                "shard": 0,
                "index": "docs-1",
                "node": NODE,
                "reason": {"type": "query_shard_exception", "reason": "bad", "index_uuid": UUID, "index": "docs-1"},
            }
        ],
    },
    "status": 400,
}
# Data that looks like it, which is never rewritten.
HITS = {
    "hits": {"hits": [{"_id": "java.lang.NullPointerException", "_source": {"error": "java.lang.OutOfMemoryError"}}]},
    "aggregations": {"kinds": {"buckets": [{"key": "org.elasticsearch.common.ParsingException", "doc_count": 1}]}},
    "_shards": {"failures": [{"shard": 0, "index": "docs-1", "node": NODE, "reason": {"index_uuid": UUID}}]},
}

LEAKS = ("Exception", "org.elasticsearch", "java.lang", UUID, NODE)


def test_java_names_become_elasticsearchs_types_and_uuids_go():
    assert as_type("NumberFormatException") == "number_format_exception"
    assert as_type("ParsingException") == "parsing_exception"
    assert as_type("XContentParseException") == "x_content_parse_exception"
    shown = scrubbed_text(VALIDATE_SHARD["explanations"][0]["error"])
    assert shown == (
        '[docs-1] query_shard_exception: failed to create query: For input string: "x"; '
        'number_format_exception: For input string: "x"'
    )
    assert scrubbed_text("plain words, an index [docs-1] and 3.5.0") == "plain words, an index [docs-1] and 3.5.0"
    # Java's other way of printing, and what is no class name: a field's dotted path, a word in brackets.
    assert scrubbed_text("QueryShardException[bad]; nested: NumberFormatException[x];") == (
        "query_shard_exception[bad]; nested: number_format_exception[x];"
    )
    kept = "No mapping found for [doc.meta.Title] or [ParseError] in order to sort on"
    assert scrubbed_text(kept) == kept


def test_every_error_of_an_answer_is_scrubbed_and_no_data_is():
    for answer in (VALIDATE_SHARD, VALIDATE_PARSE, SEARCH_400, {"responses": [SEARCH_400, {"hits": {}}]}):
        raw = orjson.dumps(answer)
        assert may_name_internals(raw)
        document = orjson.loads(raw)
        assert scrub_internals(document)
        assert not any(leak in orjson.dumps(document).decode() for leak in LEAKS), document
    assert VALIDATE_PARSE["error"] and scrubbed_text(VALIDATE_PARSE["error"]).startswith("parsing_exception: unknown")
    data = orjson.loads(orjson.dumps(HITS))
    assert scrub_internals(data)
    assert data["hits"] == HITS["hits"] and data["aggregations"] == HITS["aggregations"]
    assert data["_shards"]["failures"] == [{"shard": 0, "index": "docs-1", "reason": {}}]
    assert not may_name_internals(b'{"took":1,"hits":{"hits":[{"_id":"a","_source":{"text":"an error"}}]}}')


def test_a_filtered_searchs_error_is_scrubbed_too():
    error = GatewayError(400, "search_phase_execution_exception", f"[docs-1/{UUID}] java.lang.X: y", body=SEARCH_400)
    shown = error_without_internals(error)
    assert shown.status == 400 and shown.reason == "[docs-1] x: y"
    assert not any(leak in orjson.dumps(shown.body).decode() for leak in LEAKS)
    assert "index_uuid" in SEARCH_400["error"]["root_cause"][0]  # the original is left as it was


class ValidatingTransport(KeyMakingTransport):
    async def request(self, method, target, headers, body):
        if "_validate" in target:
            return HttpResponse(200, ((b"content-type", b"application/json"),), orjson.dumps(VALIDATE_SHARD))
        return await super().request(method, target, headers, body)


def test_service_mode_answers_without_them_and_forward_mode_as_the_cluster_said():
    team = {"authorization": f"ApiKey {KEY_A}"}
    service = app_client(ValidatingTransport(), auth="service", api_keys=KEYS, passthrough="all")
    answer = service.post("/docs-1/_validate/query?explain=true", json={"query": {}}, headers=team)
    assert answer.status_code == 200 and answer.json()["valid"] is False
    assert not any(leak in answer.text for leak in LEAKS), answer.text
    assert int(answer.headers["content-length"]) == len(answer.content)
    forward = app_client(ValidatingTransport(), passthrough="all")
    assert UUID in forward.post("/docs-1/_validate/query?explain=true", json={"query": {}}).text
