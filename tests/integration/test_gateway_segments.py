"""ext.chunkrag.segments through the gateway over real HTTP, on the real
Elasticsearch: segments come back as hits holding the document's own text."""

from __future__ import annotations

import uuid

import httpx
import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document

pytestmark = pytest.mark.integration

BEES = (
    "Honey bees live in colonies with one queen. Worker bees gather nectar from flowers. "
    "Back in the hive they turn the nectar into honey. The honey is stored in wax cells.\n\n"
    "Bees also collect pollen. In winter the colony clusters together to stay warm."
)


@pytest.fixture(scope="module")
def index(es, embedder, settings):
    name = f"test-gateway-segments-{uuid.uuid4().hex[:10]}"
    documents = [
        plain_document("bees", BEES, "bees", title="Honey bees"),
        plain_document("violin", "The violin has four strings. It is played with a bow.", "violin", title="Violin"),
    ]
    ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield name
    es.delete_index(name)


def test_segments_are_hits_with_chunk_ids_and_span(settings, embedder, index):
    body = {
        "query": {"match": {"text": "how do bees make honey from nectar"}},
        "size": 3,
        "ext": {"chunkrag": {"stages": False, "candidates": 6, "segments": {"max_total_chars": 400}}},
    }
    with serving(create_app(settings, embedder=embedder)) as url, httpx.Client() as http:
        response = http.post(f"{url}/{index}/_search", json=body)
        bad = http.post(
            f"{url}/{index}/_search", json={**body, "ext": {"chunkrag": {"stages": False, "segments": {"budget": 3}}}}
        )
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]["hits"]
    assert hits and sum(h["_source"]["end"] - h["_source"]["start"] for h in hits) <= 400
    for hit in hits:
        source, info = hit["_source"], hit["_chunkrag"]
        text = BEES if source["doc_id"] == "bees" else None
        if text is not None:
            assert source["text"] == text[source["start"] : source["end"]]
        assert info["chunk_ids"] == [
            f"{source['doc_id']}:{p}" for p in range(source["first_position"], source["last_position"] + 1)
        ]
        assert info["span"] == {"start": source["start"], "end": source["end"]}
        assert hit["_id"] == f"{source['doc_id']}:{source['first_position']}-{source['last_position']}"
    assert hits[0]["_source"]["doc_id"] == "bees" and "nectar into honey" in hits[0]["_source"]["text"]
    assert (
        bad.status_code == 400 and "unknown option [budget] in ext.chunkrag.segments" in bad.json()["error"]["reason"]
    )
