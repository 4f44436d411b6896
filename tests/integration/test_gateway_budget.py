"""budget_s bounds the relevance model's stage, through the real gateway,
with the real cross-encoder, over the passages of many long documents in
the real Elasticsearch (post-search: each hit's passages filtered on their
own). Unbounded, the model reads every passage of every hit (tens of
seconds on two cores); with `budget_s: 1` it stops between two batches
once the budget has passed, and the answer is what it had read, marked
with the stage that ran out. Asserted on what was read, never on timings."""

from __future__ import annotations

import math
import os
import time

import httpx
import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from tests.support.plain_index import plain_index

pytestmark = pytest.mark.integration

DOCUMENTS, PARAGRAPHS = 50, 20
TOPICS = ("river", "glacier", "harbour", "orchard", "quarry", "lighthouse", "vineyard", "observatory")
MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}
QUESTION = "which crews measured the water level at the glacier before the winter storms"
# The relevance model's batch (chunkrag_core.providers.local_relevance.BATCH_SIZE).
BATCH = 16


def _report(doc: int) -> str:
    """About 4,000 characters of paragraphs that all look alike to BM25."""
    return "".join(
        f"Paragraph {p} of report {doc} describes how the {TOPICS[(doc + p) % 8]} near village {doc * 3 + p} was "
        f"surveyed in {1950 + (doc * 7 + p) % 70}, noting that the crews measured the water level, the soil and the "
        f"wind at {p + 2} stations before the winter storms arrived. " + ("\n\n" if p % 3 == 2 else "")
        for p in range(PARAGRAPHS)
    )


@pytest.fixture(scope="module")
def reports(es):
    docs = {f"report-{d}": {"title": f"Report {d}", "body": _report(d)} for d in range(DOCUMENTS)}
    with plain_index(es, "test-gateway-budget", MAPPING, docs) as name:
        yield name


def _read(hit: dict) -> list[dict]:
    marker = hit["_chunkrag"]
    return marker["passages"] + marker.get("dropped", [])


def test_budget_s_stops_the_relevance_model_between_batches_and_says_so(settings, embedder, reports):
    body = {
        "query": {"match": {"body": QUESTION}},
        "size": DOCUMENTS,
        "ext": {"chunkrag": {"relevance": "crossencoder", "budget_s": 1, "answer": False, "include_dropped": True}},
    }
    with serving(create_app(settings, embedder=embedder)) as url:
        # The hits' passages built once (sentence splitting and embedding:
        # not a model stage of the filter, outside the budget) and cached.
        warm = {**body, "ext": {"chunkrag": {"stages": False}}}
        assert httpx.post(f"{url}/{reports}/_search", json=warm, timeout=600).status_code == 200
        started = time.monotonic()
        response = httpx.post(f"{url}/{reports}/_search", json=body, timeout=600)
        took = time.monotonic() - started
    assert response.status_code == 200, response.text[:300]
    answer = response.json()
    section, hits = answer["chunkrag"], answer["hits"]["hits"]
    assert len(hits) == DOCUMENTS and section["relevance_by"] == "gateway"

    # Batches the model ran: a hit's passages are read 16 at a time, best first.
    read = [sum(1 for p in _read(hit) if "relevance" in p["scores"]) for hit in hits]
    passages = sum(len(_read(hit)) for hit in hits)
    batches = sum(math.ceil(n / BATCH) for n in read)
    every_batch = sum(math.ceil(len(_read(hit)) / BATCH) for hit in hits)
    print(
        f"budget_s 1: {sum(read)} of {passages} passages read in {batches} of {every_batch} batches; "
        f"relevance stage {section['timings_ms'].get('filter_relevance')} ms, answered in {took:.1f} s; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    assert passages == section["passages"]["candidates"] > 10 * BATCH
    assert 1 <= batches <= every_batch // 4  # far from every batch: it stopped
    # The passages the model did not read in time are unscored (or, in a
    # hit with none read, the fallback's best by retrieval), never guessed.
    unread = [p for hit in hits for p in _read(hit) if "relevance" not in p["scores"]]
    assert unread and {p.get("reason", "fallback") for p in unread} <= {"unscored", "fallback"}
    assert section["budget_ran_out"] == "relevance"
    assert section["budget_ran_out_reason"].startswith(
        f"the budget_s of 1 s ran out in the relevance stage with {sum(read)} of {passages} read"
    )
