"""A request's cancellation (chunkrag_core.cancellation) and the loops that
check it between batches: the embedder's, the relevance model's, passage
building's and the judge's, each with a slow double whose first batch waits
until the request is gone. Every batch the request did not need is never
started, and the thread that ran it is free at once."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from chunkrag_core import cancellation
from chunkrag_core.cancellation import Cancellation, Cancelled
from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatRequest, ChatResponse, Message, OpenAICompatibleChat
from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder
from chunkrag_core.providers.local_relevance import LocalRelevanceModel
from chunkrag_core.settings import ChunkingSettings
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.processors.relevance import ScoringOptions
from ingest_pipeline.chunker import chunk_documents
from ingest_pipeline.sources import plain_document

# The longest any test here waits for something that should happen at once.
BOUND_S = 10.0


def test_a_token_stops_when_cancelled_or_past_its_deadline_and_keeps_the_first_reason():
    now = [100.0]
    token = Cancellation(deadline=105.0, clock=lambda: now[0])
    token.check()  # before the deadline: nothing
    assert token.remaining() == 5.0 and not token.cancelled
    now[0] = 105.0
    with pytest.raises(Cancelled, match="deadline passed"):
        token.check()
    token.cancel("the client went away")  # later reasons do not replace the first
    assert token.reason == "the request's deadline passed"

    gone = Cancellation()
    gone.cancel("the client went away")
    gone.cancel("the request's deadline passed")
    with pytest.raises(Cancelled, match="client went away"):
        gone.check()


def test_another_processs_flag_is_read_at_each_check():
    flagged = [False]
    token = Cancellation(watch=lambda: flagged[0])
    token.check()
    flagged[0] = True
    with pytest.raises(Cancelled, match="cancelled"):
        token.check()


def test_a_wait_wakes_when_the_work_must_stop_and_not_before():
    token = Cancellation()
    assert token.wait(0.01) is False
    threading.Timer(0.05, token.cancel, args=("the client went away",)).start()
    assert token.wait(BOUND_S) is True
    flagged = [False]
    watched = Cancellation(watch=lambda: flagged[0])
    threading.Timer(0.05, lambda: flagged.__setitem__(0, True)).start()
    assert watched.wait(BOUND_S) is True


def test_outside_a_request_nothing_is_checked_and_the_token_is_bound_only_for_its_block():
    cancellation.check()  # no token: no request to be gone
    token = Cancellation()
    token.cancel("gone")
    with cancellation.bound(token):
        assert cancellation.current() is token
        with pytest.raises(Cancelled):
            cancellation.check()
    assert cancellation.current() is None
    with pytest.raises(Cancelled):
        cancellation.run_bound(token, cancellation.check)


class SlowBatches:
    """Counts the batches a loop starts; the first waits until the request
    is gone (as a batch running when its deadline passes)."""

    def __init__(self):
        self.batches = 0

    def batch(self):
        self.batches += 1
        token = cancellation.current()
        if self.batches == 1 and token is not None:
            assert token.wait(BOUND_S), "the request was never cancelled"


def _cancelled_during_first_batch(run):
    """``run()`` under a token cancelled from another thread once its first
    batch has begun; returns the Cancelled it raised."""
    token = Cancellation()
    threading.Timer(0.05, token.cancel, args=("the client went away",)).start()
    with pytest.raises(Cancelled) as raised:
        cancellation.run_bound(token, run)
    return raised.value


def test_the_relevance_model_stops_between_its_batches():
    slow = SlowBatches()

    class Relevance(LocalRelevanceModel):
        def load(self):
            return self

        def _encode(self, query, texts):
            return [SimpleNamespace(ids=[1] * (5 + i)) for i in range(len(texts))]

        def _run(self, encodings):
            slow.batch()
            return np.zeros(len(encodings), dtype=np.float32)

    model = Relevance(batch_size=2)
    assert len(model.score("q", ["t"] * 10)) == 10 and slow.batches == 5  # no token: every batch
    slow.batches = 0
    assert "client went away" in str(_cancelled_during_first_batch(lambda: model.score("q", ["t"] * 10)))
    assert slow.batches == 1


def test_the_embedder_stops_between_its_batches():
    slow = SlowBatches()

    class Session:
        def run(self, _names, inputs):
            slow.batch()
            rows, width = inputs["input_ids"].shape
            return (np.ones((rows, width, 384), dtype=np.float32),)

    tokenizer = SimpleNamespace(encode_batch=lambda texts: [SimpleNamespace(ids=[1, 2, 3]) for _ in texts])
    embedder = LocalMiniLMEmbedder(batch_size=2)
    embedder._session, embedder._tokenizer = Session(), tokenizer
    _cancelled_during_first_batch(lambda: embedder.embed(["a sentence"] * 8))
    assert slow.batches == 1


def test_passage_building_stops_between_documents_before_embedding():
    embedded = []

    class Embedder:
        def embed(self, texts):
            embedded.append(len(texts))
            return np.ones((len(texts), 384), dtype=np.float32)

    documents = [plain_document(f"d{i}", "One sentence here. Another one there.", "x") for i in range(3)]
    token = Cancellation()
    token.cancel("the request's deadline passed")
    with pytest.raises(Cancelled):
        cancellation.run_bound(token, chunk_documents, documents, Embedder(), ChunkingSettings())
    assert embedded == []
    assert len(chunk_documents(documents, Embedder(), ChunkingSettings())) == 3  # outside a request: all


def test_judging_in_threads_stops_its_batches_and_frees_the_waiting_thread():
    slow = SlowBatches()
    lock = threading.Lock()

    class Model:
        def complete(self, request):
            with lock:
                slow.batch()  # one batch at a time: the later ones would start while the first waits
            return ChatResponse(text="1", prompt_tokens=1, completion_tokens=1)

    chunks = [Chunk(doc_id="d", position=i, text=f"chunk {i}", start=0, end=1) for i in range(8)]
    judge_many = judge_in_threads(Model(), threads=1, budget_s=BOUND_S)
    options = ScoringOptions(method="yes_no")
    error = _cancelled_during_first_batch(lambda: judge_many("q", chunks, options))
    assert "client went away" in str(error)
    assert slow.batches == 1  # the seven other chunks were never sent to the model


def test_a_chat_call_is_not_made_for_a_request_gone_and_waits_no_longer_than_its_deadline():
    chat = OpenAICompatibleChat(model="m", base_url="http://127.0.0.1:9", timeout_s=120)
    token = Cancellation()
    token.cancel("the client went away")
    with pytest.raises(Cancelled):
        cancellation.run_bound(token, chat.complete, ChatRequest((Message("user", "hi"),)))
    assert chat._client is None  # nothing was sent
    now = [0.0]
    soon = Cancellation(deadline=3.0, clock=lambda: now[0])
    assert cancellation.run_bound(soon, chat._wait_s) == 3.0
    assert chat._wait_s() == 120
