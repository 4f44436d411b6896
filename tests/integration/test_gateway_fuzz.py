"""Property-based fuzzing of the gateway's OpenAPI operations (schemathesis)
with the real Elasticsearch behind it and the scripted model server: no
request may get a 5xx, and no response may carry a stack trace. Then the
inputs a fuzzer finds by luck, sent on purpose: bad bodies, wrong types,
huge numbers, odd unicode and NUL bytes each get a 4xx naming the problem.
The generated requests are also sent mutated: a part of the body nested up
to 1,100 levels deep (400, or served when shallow enough), a body over the
body limit (413), headers over the total or the per-line limit (431).

Bounded: FUZZ_EXAMPLES cases per operation and mode (~1 min on 2 cores).
With CHUNKRAG_FUZZ_REPORT=<file> the counts are written there for
bench/results/gateway.json (its fuzz section)."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections import Counter

import httpx
import pytest
import schemathesis

# Loaded here, at collection, rather than lazily by `openapi.from_url` deep in
# the test's stack: pytest rewrites schemathesis (a pytest plugin) as it is
# imported, and CPython 3.11's parser once failed there with "AST constructor
# recursion depth mismatch".
import schemathesis.specs.openapi.schemas  # noqa: F401
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_core.settings import GatewaySettings
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, QUESTION, by_content

pytestmark = pytest.mark.integration

FUZZ_EXAMPLES = int(os.environ.get("CHUNKRAG_FUZZ_EXAMPLES") or 100)
# What a stack trace or a leaked internal looks like in a response body.
TRACE_MARKS = ("Traceback (most recent call last)", 'File "/', "site-packages", "\n    at ")
OUTCOMES: Counter = Counter()
FAILURES: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def lambda_descriptions_survive_the_interpreter():
    """Hypothesis describes the lambdas of schemathesis's strategies (for
    filter rewriting and reprs) by parsing their source with `ast.parse`.
    Deep in this test's stack, CPython 3.11.7 can raise `SystemError: AST
    constructor recursion depth mismatch` there (the interpreter's bug, fixed
    in later releases), which hypothesis reports as a flaky failure of the
    gateway. A description the interpreter cannot build is read as unknown,
    which hypothesis already handles for lambdas whose source it cannot find."""
    from hypothesis.internal import lambda_sources

    describe = lambda_sources._lambda_description

    def described(f, *args, **kwargs):
        try:
            return describe(f, *args, **kwargs)
        except SystemError:
            return "lambda *args, **kwargs: <unknown>"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lambda_sources, "_lambda_description", described)
        yield


@pytest.fixture(scope="module")
def fuzz_index(es, embedder, settings):
    name = f"test-gateway-fuzz-{uuid.uuid4().hex[:8]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def fuzz_gateway(settings, embedder, fuzz_index):
    with ScriptedOpenAI(default=by_content) as server:
        model = OpenAICompatibleChat(model="scripted", base_url=server.base_url, timeout_s=10)
        quiet = dataclasses.replace(settings, redis_url=settings.redis_url.rsplit("/", 1)[0] + "/14")
        with serving(create_app(quiet, model=model, embedder=embedder)) as url:
            yield url
    report = os.environ.get("CHUNKRAG_FUZZ_REPORT")
    if report:
        with open(report, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "cases": sum(OUTCOMES.values()),
                    "by_status": {str(k): v for k, v in sorted(OUTCOMES.items())},
                    "failures": len(FAILURES),
                    "first_failure": FAILURES[0] if FAILURES else None,
                    "examples_per_operation_and_mode": FUZZ_EXAMPLES,
                },
                handle,
                indent=2,
            )


def assert_answered_cleanly(response_status: int, text: str, where: str) -> None:
    assert response_status < 500, f"{where}: {response_status} {text[:500]}"
    assert not any(mark in text for mark in TRACE_MARKS), f"{where}: internals in the response: {text[:500]}"
    if response_status >= 400:
        error = json.loads(text)["error"]
        reason = error.get("reason") if isinstance(error, dict) else error
        assert reason, f"{where}: a {response_status} without a reason: {text[:300]}"


def test_no_request_gets_a_server_error_or_a_stack_trace(fuzz_gateway, fuzz_index):
    """Every operation of the OpenAPI document, with valid (positive) and
    invalid (negative) requests generated from its schema."""
    schema = schemathesis.openapi.from_url(f"{fuzz_gateway}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} == {"/v1/health", "/v1/ask", "/{index}/_search"}

    for operation in operations:
        for mode in schemathesis.GenerationMode:
            if mode is schemathesis.GenerationMode.NEGATIVE and operation.path == "/v1/health":
                continue  # no parameters and no body: nothing to make invalid

            @given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis_settings(
                max_examples=FUZZ_EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def run(case):
                # Half the cases aim at the real index so the whole filter
                # runs; the others keep the generated name (most are
                # missing or invalid indices).
                aim = OUTCOMES.total() % 2 == 0
                if aim and "index" in (case.path_parameters or {}):
                    case.path_parameters["index"] = fuzz_index
                if aim and operation.path == "/v1/ask" and isinstance(case.body, dict):
                    case.body = {**case.body, "index": fuzz_index}
                response = case.call(base_url=fuzz_gateway, timeout=60)
                OUTCOMES[response.status_code] += 1
                where = f"{mode.value} {case.method} {case.formatted_path} {str(case.body)[:300]}"
                try:
                    assert_answered_cleanly(response.status_code, response.text, where)
                    if mode is schemathesis.GenerationMode.POSITIVE and response.status_code == 400:
                        # The schema says where the query text is required:
                        # a request valid by it never lacks one.
                        reason = response.json()["error"]["reason"]
                        assert "no query text" not in reason and "question is empty" not in reason, f"{where}: {reason}"
                except AssertionError as exc:
                    FAILURES.append(str(exc)[:500])
                    raise

            run()


# What each mutation of a generated request must get (None: any clean answer).
MUTATIONS = {"deep": None, "big_body": 413, "big_header": 431, "long_header_line": 431}


def test_mutated_requests_deep_or_oversized_get_a_clean_4xx(fuzz_gateway, fuzz_index):
    """The generated requests of every operation, mutated: nested deep,
    grown over the body limit, or sent with oversized headers."""
    limits = GatewaySettings()
    schema = schemathesis.openapi.from_url(f"{fuzz_gateway}/openapi.json")
    for operation in (result.ok() for result in schema.get_all_operations()):

        @given(
            case=operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE),
            mutation=st.sampled_from(sorted(MUTATIONS)),
            depth=st.integers(1, 1100),
            data=st.data(),
        )
        @hypothesis_settings(
            max_examples=max(8, FUZZ_EXAMPLES // 2),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case, mutation, depth, data):
            path = case.formatted_path.replace("{index}", fuzz_index)
            if "index" in (case.path_parameters or {}):
                path = operation.path.replace("{index}", fuzz_index)
            # NOT_SET when the operation has no body.
            body = case.body if isinstance(case.body, (dict, list, str, int, float, bool)) else {}
            if operation.path == "/v1/ask" and isinstance(body, dict):
                body = {**body, "index": fuzz_index}
            content = json.dumps(body)
            headers = {"content-type": "application/json"}
            if mutation == "deep":
                nest = data.draw(st.sampled_from(["object", "list"]))
                opening, closing = ('{"a":', "}") if nest == "object" else ("[", "]")
                if isinstance(body, dict) and body:
                    key = data.draw(st.sampled_from(sorted(body)))
                    marker = '"\u0000DEEP\u0000"'
                    nested = opening * depth + json.dumps(body[key]) + closing * depth
                    content = json.dumps({**body, key: "\u0000DEEP\u0000"}).replace(marker, nested)
                else:
                    content = opening * depth + content + closing * depth
            elif mutation == "big_body":
                if isinstance(body, dict):
                    content = json.dumps({**body, "padding": "a" * limits.max_body_bytes})
                else:
                    content = " " * (limits.max_body_bytes + 1) + content
            elif mutation == "big_header":
                headers |= {f"x-padding-{n}": "a" * 4000 for n in range(limits.max_header_bytes // 4000 + 1)}
            else:
                headers["x-padding"] = "a" * (limits.max_header_line_bytes + 1)
            method = "GET" if operation.method.upper() == "GET" and mutation != "big_body" else "POST"
            if operation.path == "/v1/health":
                method = "GET" if mutation not in ("deep", "big_body") else "POST"
            url = f"{fuzz_gateway}{path}"
            params = case.query or None
            response = httpx.request(method, url, params=params, content=content.encode(), headers=headers, timeout=60)
            OUTCOMES[response.status_code] += 1
            where = f"{mutation} {method} {path} depth {depth}"
            try:
                assert_answered_cleanly(response.status_code, response.text, where)
                expected = MUTATIONS[mutation]
                assert expected is None or response.status_code == expected, (
                    f"{where}: {response.status_code} {response.text[:300]}"
                )
            except AssertionError as exc:
                FAILURES.append(str(exc)[:500])
                raise

        run()


ASK_CASES = [
    (b'{"index": "x", "question": ', "parse_exception", "not valid JSON"),
    (b"[1, 2]", None, "body"),
    (b'{"index": 5, "question": "q"}', None, "index"),
    (b'{"index": "IDX", "question": "q", "options": {"candidates": 1e300}}', None, "candidates"),
    (b'{"index": "IDX", "question": "q", "options": {"candidates": 99999999999999999999999}}', None, "candidates"),
    (b'{"index": "IDX", "question": "q", "options": {"budget_s": -1}}', None, "budget_s"),
    (
        b'{"index": "IDX", "question": "q", "options": {"scoring": {"weights": [1e309, 0, 0]}}}',
        None,
        "options.scoring.weights[0] is inf",
    ),
    (b'{"index": "IDX", "question": "q", "options": {"fixed_threshold": NaN}}', None, "fixed_threshold"),
    (b'{"index": "IDX", "question": "q", "options": {"budget_s": Infinity}}', None, "options.budget_s"),
    ('{"index": "IDX", "question": "q\\u0000?"}'.encode(), None, "NUL"),
    ('{"index": "IDX", "question": "\\ud800"}'.encode(), None, ""),
    ('{"index": "IDX\\u0000", "question": "q"}'.encode(), None, ""),
    (('{"index": "IDX", "question": "%s"}' % ("\u202e\u0301" * 1500)).encode(), None, "limit is 2000"),
    (b'{"index": "IDX", "question": "q", "options": {"mode": "\xff"}}', None, ""),
]


@pytest.mark.parametrize("body, kind, named", ASK_CASES)
def test_bad_ask_bodies_get_a_4xx_naming_the_problem(fuzz_gateway, fuzz_index, body, kind, named):
    response = httpx.post(
        f"{fuzz_gateway}/v1/ask",
        content=body.replace(b"IDX", fuzz_index.encode()),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert 400 <= response.status_code < 500, response.text
    assert_answered_cleanly(response.status_code, response.text, "ask")
    assert named in response.json()["error"]["reason"]
    if kind:
        assert response.json()["error"]["type"] == kind


SEARCH_CASES = [
    ({"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"candidates": "5"}}}, "candidates"),
    ({"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"candidates": 10**30}}}, "candidates"),
    ({"query": {"match": {"text": QUESTION}}, "size": -1, "ext": {"chunkrag": {}}}, "size"),
    ({"query": {"match": {"text": QUESTION}}, "size": 1e300, "ext": {"chunkrag": {}}}, "size"),
    (b'{"query": {"match": {"text": "q"}}, "ext": {"chunkrag": {"min_score": 1e999}}}', "number is infinity"),
    (b'{"query": {"match": {"text": "q"}}, "ext": {"chunkrag": {"min_score": NaN}}}', "not valid JSON"),
    (b'{"query": {"match": {"text": "q"}}, "ext": {"chunkrag": {}}, "size": 5', "not valid JSON"),
    (b'{"query": {"match": {"text": "\xff\xfe"}}, "ext": {"chunkrag": {}}}', "not valid JSON"),
    ({"query": {"match": {"text": "\u0000"}}, "ext": {"chunkrag": {}}}, "NUL"),
    ({"query": {"match": {"text": "\U0001f600" * 3000}}, "ext": {"chunkrag": {}}}, "limit is 2000"),
    ({"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": []}}, "must be an object"),
    (
        {"query": {"match": {"text": QUESTION}}, "ext": {"chunkrag": {"scoring": {"reflect_band": [0.9, 0.1]}}}},
        "reflect_band",
    ),
    # aggs with a chunk retrieval mode (without one, such a body is post-searched: routing.decide)
    ({"query": {"match": {"text": QUESTION}}, "aggs": {}, "ext": {"chunkrag": {"mode": "bm25"}}}, "aggs"),
    ({"query": {"term": {"doc_id": "x"}}, "ext": {"chunkrag": {}}}, "no query text"),
]


@pytest.mark.parametrize("body, named", SEARCH_CASES)
def test_bad_search_bodies_get_a_4xx_naming_the_problem(fuzz_gateway, fuzz_index, body, named):
    content = body if isinstance(body, bytes) else json.dumps(body)
    response = httpx.post(
        f"{fuzz_gateway}/{fuzz_index}/_search",
        content=content,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 400, response.text
    assert_answered_cleanly(response.status_code, response.text, "search")
    assert named in response.json()["error"]["reason"]
