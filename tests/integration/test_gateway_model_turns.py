"""Fair turns at the relevance model, through the real gateway, the real
cross-encoder and the real Elasticsearch: four keys each send one search
that has the model read 200 candidates (50 batches of 4), and a quiet key's
default filter (the gate's one batch) is let in and waits behind at most
one batch of each of them; with two model slots or more it begins at once,
in the slot the heavy searches' lower priority leaves. The heavy batches
are held, after they ran, until the quiet key's batch has asked for its
turn, so the order does not depend on the machine's speed."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import threading
import time
import uuid
from contextlib import ExitStack

import httpx
import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.identity import credentials_identity
from chunkrag_gateway.model_turns import current_caller
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document

pytestmark = pytest.mark.integration

# The longest any wait here may last (seconds): the models' loading on a busy machine.
BOUND_S = 240.0
DOCUMENTS = CANDIDATES = 200  # a sentence each: a chunk each
HEAVY_KEYS = ("heavy-a", "heavy-b", "heavy-c", "heavy-d")


def _sentence(doc: int) -> str:
    seasons = ("winter", "spring", "summer", "autumn", "monsoon")
    return (
        f"Survey {doc} in region {doc * 7 % 31} measured {doc * 13} units of the monitored quantity during the "
        f"{seasons[doc % 5]} of {1990 + doc % 30}, with instruments recalibrated at site {doc % 11}."
    )


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-model-turns-{uuid.uuid4().hex[:10]}"
    documents = [plain_document(f"s{d}", _sentence(d), f"s{d}", title=f"survey {d}") for d in range(DOCUMENTS)]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    es.refresh(name)
    assert es.count(name) >= CANDIDATES
    yield name
    es.delete_index(name)


def _basic(user: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:p".encode()).decode()


def _eventually(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_quiet_keys_batch_waits_behind_at_most_one_batch_of_each_heavy_key(settings, embedder, index):
    limits = dataclasses.replace(settings, gateway=dataclasses.replace(settings.gateway, max_candidates=CANDIDATES))
    app = create_app(limits, embedder=embedder)
    edges, queue, turns = app.state.edges, app.state.filtered_queue, app.state.model_turns
    quiet = credentials_identity(_basic("quiet").encode())
    heavy = {credentials_identity(_basic(key).encode()) for key in HEAVY_KEYS}
    released = threading.Event()
    model = edges.local_relevance
    scored = model._run

    def held_after_running(encodings):
        # A heavy batch, once scored, keeps its turn until the quiet key's batch waits.
        scores = scored(encodings)
        if current_caller() in heavy:
            released.wait(BOUND_S)
        return scores

    model._run = held_after_running
    heavy_body = {
        "query": {"match": {"text": "survey region winter instruments"}},
        "size": 5,
        "ext": {"chunkrag": {"candidates": CANDIDATES, "relevance": "crossencoder"}},
    }
    quiet_body = {"query": {"match": {"text": "survey region winter"}}, "ext": {"chunkrag": {"gate": "crossencoder"}}}
    with ExitStack() as stack:
        url = stack.enter_context(serving(app))
        assert edges.wait_for_models(BOUND_S)
        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(len(HEAVY_KEYS) + 1))
        post = httpx.post
        heavies = [
            pool.submit(
                post, f"{url}/{index}/_search", json=heavy_body, headers={"authorization": _basic(key)}, timeout=300
            )
            for key in HEAVY_KEYS
        ]
        # Three hold places (the last is for callers without a heavy search), the fourth waits for one;
        # one heavy batch runs, held, the other two wait for a slot.
        _eventually(lambda: queue.in_use == 3 and queue.waiting == 1, "the heavy searches did not take their places")
        _eventually(lambda: len(turns.begun) == 1 and len(turns.waiting()) == 2, "the heavy batches did not ask")
        searched = pool.submit(
            post, f"{url}/{index}/_search", json=quiet_body, headers={"authorization": _basic("quiet")}, timeout=300
        )
        _eventually(lambda: quiet in turns.waiting() or quiet in turns.begun, "the quiet key's batch never asked")
        released.set()
        answer = searched.result(BOUND_S)
        assert answer.status_code == 200 and answer.json()["hits"]["hits"], answer.text[:300]
        assert [search.result(BOUND_S).status_code for search in heavies] == [200] * len(HEAVY_KEYS)
    begun = list(turns.begun)
    before = begun[: begun.index(quiet)]
    # Behind at most one batch of each heavy key that had a place, not behind the rest of theirs.
    assert len(before) == len(set(before)) <= 3 and set(before) <= heavy
    assert len(before) == 1 or turns.slots == 1
    after = begun[begun.index(quiet) + 1 :]
    batches = -(-CANDIDATES // model.batch_size)
    assert all(after.count(key) >= batches - 1 for key in set(before)) and begun.count(quiet) == 1
