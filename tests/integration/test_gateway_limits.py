"""The gateway's limits over real HTTP, with the real (open) Elasticsearch
behind it: the filtered-query queue, the per-caller rate limit, the body
deadline, and TLS both ways (HTTPS on the gateway with a certificate made
here; a gateway reaching its cluster over HTTPS verified by a CA bundle)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import socket
import ssl
import subprocess
import uuid

import httpx
import pytest
from elasticsearch import Elasticsearch

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, MODEL_STALLS, QUESTION, by_content

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-limits-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def model_server():
    with ScriptedOpenAI(default=by_content) as server:
        server._server.handle_error = lambda request, client_address: None
        yield server


def with_gateway(settings, **gateway):
    # Redis db 10: no cached score may answer for the stalling model.
    return dataclasses.replace(
        settings,
        redis_url=settings.redis_url.rsplit("/", 1)[0] + "/10",
        gateway=dataclasses.replace(settings.gateway, **gateway),
    )


def test_a_full_queue_of_filtered_queries_is_429_with_retry_after(settings, embedder, model_server, index):
    import redis

    redis.Redis.from_url(with_gateway(settings).redis_url).flushdb()
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    app = create_app(
        with_gateway(settings, max_filtered=1, max_queued=0, retry_after_s=3), model=model, embedder=embedder
    )
    # The answer call stalls (a _search writes one only when asked).
    body = {
        "query": {"match": {"text": f"{QUESTION} {MODEL_STALLS}"}},
        "ext": {"chunkrag": {"candidates": 2, "answer": True}},
    }
    with serving(app) as url, concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda _: httpx.post(f"{url}/{index}/_search", json=body, timeout=30), range(3)))
        # Retrieval only holds no place in the queue.
        retrieval_only = httpx.post(
            f"{url}/{index}/_search", json={**body, "ext": {"chunkrag": {"stages": False}}}, timeout=30
        )
    statuses = sorted(r.status_code for r in replies)
    assert statuses[0] == 200 and 429 in statuses, statuses
    refused = next(r for r in replies if r.status_code == 429)
    assert refused.headers["retry-after"] == "3" and "MAX_FILTERED" in refused.json()["error"]["reason"]
    assert retrieval_only.status_code == 200


def test_rate_limit_per_caller(settings, embedder, index):
    with serving(create_app(with_gateway(settings, rate_per_s=0.2, rate_burst=2), embedder=embedder)) as url:
        alice = [
            httpx.get(f"{url}/{index}/_count", headers={"authorization": "Basic YWxpY2U6cA=="}).status_code
            for _ in range(3)
        ]
        bob = httpx.get(f"{url}/{index}/_count", headers={"authorization": "Basic Ym9iOnA="})
    assert alice == [200, 200, 429] and bob.status_code == 200


def test_a_body_that_does_not_arrive_in_time_is_408(settings, embedder, index):
    with serving(create_app(with_gateway(settings, body_timeout_s=0.5), embedder=embedder)) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                (
                    f"POST /{index}/_search HTTP/1.1\r\nhost: x\r\n"
                    "content-type: application/json\r\ncontent-length: 100\r\n\r\n{"
                ).encode()
            )
            reply = sock.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 408") and "did not arrive within 0.5 s" in reply


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, made with openssl."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_https_on_the_gateway_and_tls_to_the_cluster(settings, embedder, index, certificate, caplog):
    cert, key = certificate
    tls = with_gateway(settings, ssl_certfile=str(cert), ssl_keyfile=str(key))
    with serving(create_app(tls, embedder=embedder), gateway=tls.gateway) as front:
        assert front.startswith("https://")
        assert (
            httpx.get(f"{front}/{index}/_count", verify=ssl.create_default_context(cafile=str(cert))).json()["count"]
            == 6
        )
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{front}/{index}/_count")  # not trusted without the CA bundle
        client = Elasticsearch(front, ca_certs=str(cert), max_retries=0)
        assert client.count(index=index)["count"] == 6
        # A second gateway whose "cluster" is the first one, over HTTPS
        # verified by ES_CA_CERTS: the pass-through pool and the search client.
        behind = dataclasses.replace(settings, es_url=front, es_ca_certs=str(cert))
        with serving(create_app(behind, embedder=embedder)) as url:
            assert httpx.get(f"{url}/{index}/_count").json()["count"] == 6
            hits = httpx.post(
                f"{url}/{index}/_search",
                json={"query": {"match": {"text": QUESTION}}, "size": 1, "ext": {"chunkrag": {"stages": False}}},
            ).json()
            assert hits["hits"]["hits"][0]["_id"] == "tokyo:0"
        untrusting = dataclasses.replace(settings, es_url=front)
        with serving(create_app(untrusting, embedder=embedder)) as url:
            refused = httpx.get(f"{url}/{index}/_count")
            # The caller learns the cluster is unreachable, not where it is; the log says why.
            reason = refused.json()["error"]["reason"]
            assert refused.status_code == 503 and "127.0.0.1" not in reason
            assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
        client.close()
