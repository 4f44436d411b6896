"""The Cohere reranker through the real `cohere` client against a local
HTTP server speaking Cohere's v2 rerank API (scripted scores: the client,
HTTP and JSON paths are real)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatError
from chunkrag_core.providers.rerank import CohereReranker
from chunkrag_filter.pipeline import FilterOptions, run_filter
from chunkrag_filter.processors.relevance import Judgement

pytestmark = pytest.mark.integration


class RerankServer:
    """Scores each document by how many query words it holds; or answers
    with ``status`` when set."""

    def __init__(self, status: int = 200):
        self.status = status
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if outer.status != 200:
                    payload = {"message": "scripted failure"}
                else:
                    words = set(body["query"].lower().split())
                    scores = [len(words & set(doc.lower().split())) / max(1, len(words)) for doc in body["documents"]]
                    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body.get("top_n") or len(scores)]
                    payload = {
                        "id": "r1",
                        "results": [{"index": i, "relevance_score": scores[i]} for i in order],
                        "meta": {"api_version": {"version": "2"}},
                    }
                data = json.dumps(payload).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()


def test_rerank_orders_by_the_providers_scores():
    server = RerankServer()
    try:
        reranker = CohereReranker(api_key="test-key", base_url=server.base_url)
        order = reranker.rerank(
            "capital of japan", ["violins have strings", "tokyo is the capital of japan", "japan is in asia"]
        )
    finally:
        server.close()
    assert [i for i, _ in order] == [1, 2, 0]
    assert order[0][1] == pytest.approx(1.0)
    request = server.requests[0]
    assert (
        request["path"] == "/v2/rerank"
        and request["model"] == "rerank-english-v3.0"
        and request["auth"] == "Bearer test-key"
    )


def test_rerank_errors_become_chat_errors_with_retryability():
    for status, retryable in ((429, True), (500, True), (400, False)):
        server = RerankServer(status)
        try:
            with pytest.raises(ChatError) as caught:
                CohereReranker(api_key="k", base_url=server.base_url, timeout_s=5).rerank("q", ["a"])
        finally:
            server.close()
        assert caught.value.retryable is retryable, status


def test_the_filter_reorders_kept_chunks_with_cohere():
    chunks = [
        Chunk("d", i, text, 0, len(text))
        for i, text in enumerate(["japan is in asia", "tokyo is the capital of japan"])
    ]

    def judge_many(query, candidates, options):
        return [Judgement(0.9, None, None, 0.9), Judgement(0.9, None, None, 0.9)]  # both pass

    server = RerankServer()
    try:
        result = run_filter(
            "capital of japan",
            chunks,
            model=None,
            options=FilterOptions(
                rerank="cohere",
                lost_in_the_middle=False,
                answer=False,
                redundancy_threshold=None,
                threshold="dynamic",
                calibration=None,
                judge_top=None,
                gate="off",  # the reranking behind it; these chunks carry no cosine for the gate to read
            ),
            judge_many=judge_many,
            reranker=CohereReranker(api_key="k", base_url=server.base_url),
        )
    finally:
        server.close()
    assert [c.position for c in result.kept] == [1, 0]
    assert result.kept[0].stage_scores["rerank"] == pytest.approx(1.0)
