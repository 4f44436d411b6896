"""A filtered search past its deadline, or whose client goes away, is
stopped where its work is: the gateway in process (its edges replaced by
doubles, the relevance model a slow double whose first batch waits until
the request is gone), the 504 at the deadline, no batch after it, and the
model-stage place held until the thread is free, then given back."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from chunkrag_core import cancellation
from chunkrag_core.cancellation import Cancellation
from chunkrag_core.providers.local_relevance import LocalRelevanceModel
from chunkrag_core.settings import ChatSettings, GatewaySettings, Settings
from chunkrag_gateway import create_app
from chunkrag_gateway.deadline import DeadlinePassed, finish_or_stop
from chunkrag_gateway.filter_threads import FilterThreads
from chunkrag_gateway.server import serve_in_thread
from tests.unit.test_gateway_app import FakeElasticsearch, FakeEmbedder, FakeModel, RecordingTransport, es_reply

BOUND_S = 10.0
# Crossencoder scoring and a judging budget of its own: the deadline is
# the search's timeout + budget_s + the model's timeout, 0.6 s here.
SLOW_SEARCH = {
    "query": {"match": {"text": "what does a say"}},
    "ext": {"chunkrag": {"relevance": "crossencoder", "budget_s": 0.2}},
}


class SlowRelevance(LocalRelevanceModel):
    """The relevance model's own batch loop over a double: one text per
    batch, the first waiting until its request is gone (and noting why)."""

    def __init__(self):
        super().__init__(batch_size=1)
        self.batches, self.reasons = 0, []

    def load(self):
        return self

    def _encode(self, query, texts):
        return [SimpleNamespace(ids=[1, 2, 3]) for _ in texts]

    def _run(self, encodings):
        self.batches += 1
        token = cancellation.current()
        if self.batches == 1 and token is not None and token.wait(BOUND_S):
            self.reasons.append(token.reason)
        return np.zeros(len(encodings), dtype=np.float32)


def _app(relevance):
    settings = dataclasses.replace(
        Settings(es_url="http://es.internal:9200", gateway=GatewaySettings()),
        es_request_timeout_s=0.2,
        chat=dataclasses.replace(ChatSettings(), timeout_s=0.2),
    )
    return create_app(
        settings,
        es=FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=FakeModel(),
        relevance_model=relevance,
        http_transport=RecordingTransport(es_reply),
    )


def _eventually(condition) -> bool:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_past_its_deadline_a_search_is_504_and_its_work_stops_after_the_batch_running():
    relevance = SlowRelevance()
    app = _app(relevance)
    with TestClient(app) as client:
        answer = client.post("/idx/_search", json=SLOW_SEARCH)
        assert answer.status_code == 504 and "did not finish within 0.6 s" in answer.json()["error"]["reason"]
        queue = app.state.filtered_queue
        assert _eventually(lambda: queue.in_use == 0), "the place was never given back"
    # Stopped by its own deadline, or by the gateway at it: whichever looked first.
    assert len(relevance.reasons) == 1 and relevance.reasons[0].startswith("the request's deadline")
    assert relevance.batches == 1  # three candidates: the two others were never scored


def test_a_search_whose_client_goes_away_is_stopped_and_its_place_given_back():
    relevance = SlowRelevance()
    app = _app(relevance)
    body = orjson.dumps({**SLOW_SEARCH, "ext": {"chunkrag": {"relevance": "crossencoder", "budget_s": 60}}})
    with serve_in_thread(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=BOUND_S) as sock:
            sock.sendall(
                f"POST /idx/_search HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert _eventually(lambda: relevance.batches == 1), "the search never began"
        # The connection is closed: the search stops at once, long before its 60 s deadline.
        assert _eventually(lambda: relevance.reasons == ["the client went away"])
        queue = app.state.filtered_queue
        assert _eventually(lambda: queue.in_use == 0)
    assert relevance.batches == 1


def test_the_work_is_answered_or_stopped_whichever_comes_first():
    async def scenario():
        token = Cancellation()
        assert await finish_or_stop(asyncio.sleep(0, result="done"), token, 5) == "done"
        assert not token.cancelled
        started = asyncio.Event()

        async def forever():
            started.set()
            await asyncio.sleep(3600)

        token = Cancellation()
        with pytest.raises(DeadlinePassed):
            await finish_or_stop(forever(), token, 0.05)
        assert token.reason == "the request's deadline of 0.05 s passed"

        messages = asyncio.Queue()

        async def receive():
            return await messages.get()

        token = Cancellation()
        waiting = asyncio.ensure_future(finish_or_stop(forever(), token, 3600, receive))
        await messages.put({"type": "http.request", "body": b"", "more_body": False})
        await messages.put({"type": "http.disconnect"})
        with pytest.raises(Exception) as gone:
            await waiting
        assert getattr(gone.value, "status", None) == 499 and token.reason == "the client went away"

    asyncio.run(scenario())


def test_a_cancelled_awaiting_ends_only_when_its_thread_is_free():
    threads = FilterThreads(nice=0, max_threads=1)
    release = threading.Event()
    ended = []

    async def scenario():
        awaiting = asyncio.ensure_future(threads.run(lambda: release.wait(BOUND_S)))
        await asyncio.sleep(0.05)
        awaiting.cancel()
        await asyncio.sleep(0.05)
        ended.append(awaiting.done())  # the thread still runs: so does the awaiting
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await awaiting

    try:
        asyncio.run(scenario())
    finally:
        threads.close()
    assert ended == [False]
