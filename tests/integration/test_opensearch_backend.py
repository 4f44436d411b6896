"""What is particular to OpenSearch behind the backend seam, on the real
node `make test` starts: the index it gets, segments from neighbours, an
index from before the header fields, header views, fetch and delete by id.
(Ingest, every retrieval mode, ask and eval run on both engines through the
`engine` fixture in their own test files.)"""

import dataclasses

import pytest

from chunkrag_core.engines import make_backend, schema
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import markdown_document
from search_extension.neighbours import fetch_positions, position_fetcher
from search_extension.retriever import HybridRetriever
from search_extension.segments import SegmentSettings, extract_segments

pytestmark = pytest.mark.integration

GUIDE = (
    "# Bees\n\nHoney bees live in colonies. A colony has one queen.\n\n"
    "## Honey\n\nBees make honey from nectar. They store it in wax cells. Honey keeps for years.\n\n"
    "## Winter\n\nIn winter the bees cluster together. They shiver to keep the queen warm.\n"
)


@pytest.fixture(scope="module")
def opensearch(settings):
    backend = make_backend(dataclasses.replace(settings, search_backend="opensearch"))
    backend.health()
    yield backend
    backend.close()


@pytest.fixture
def os_index(opensearch):
    import uuid

    name = f"test-chunkrag-os-{uuid.uuid4().hex[:10]}"
    yield name
    opensearch.delete_index(name)


@pytest.fixture
def bees(opensearch, embedder, settings, os_index):
    report = ingest_documents(
        [markdown_document("bees.md", GUIDE, "test", fallback_title="bees")],
        client=opensearch,
        embedder=embedder,
        settings=settings,
        index=os_index,
        progress=False,
    )
    assert report.ok and report.chunks >= 5, report.errors
    return report


def test_the_chunk_index_is_a_lucene_hnsw_knn_vector_index(opensearch, bees, os_index):
    properties = opensearch.mapping_properties(os_index)
    vector = properties[schema.VECTOR]
    assert vector["type"] == "knn_vector" and vector["dimension"] == 384
    assert vector["method"]["engine"] == "lucene" and vector["method"]["space_type"] == "cosinesimil"
    assert opensearch.client.indices.get_settings(index=os_index)[os_index]["settings"]["index"]["knn"] == "true"
    assert {"header", "lead", schema.DOC_FINGERPRINT} <= set(properties)


def test_segments_are_the_document_text_with_neighbours_in_one_request(opensearch, embedder, settings, bees, os_index):
    every = fetch_positions(opensearch, os_index, {"bees.md": list(range(bees.chunks))})
    assert [c.position for c in every] == list(range(bees.chunks))
    assert all(GUIDE[c.start : c.end] == c.text for c in every)
    retriever = HybridRetriever(opensearch, embedder, os_index, settings.retrieval)
    candidates = retriever.search("how do bees make honey from nectar", size=3).chunks
    segments = extract_segments(
        candidates,
        position_fetcher(opensearch, os_index),
        SegmentSettings(irrelevant_chunk_penalty=0.1, min_segment_value=0.1),
    )
    assert segments and all(found.text == GUIDE[found.start : found.end] for found in segments)


def test_an_index_from_before_headers_gets_the_new_fields(opensearch, embedder, settings, os_index):
    body = schema.index_body(
        dims=settings.embedder.dims,
        has_english=opensearch.capabilities().has_english_analyzer,
        vectors=settings.vector_index,
    )
    old = {
        **body,
        "mappings": {
            **body["mappings"],
            "properties": {
                k: v for k, v in body["mappings"]["properties"].items() if k not in schema.added_properties()
            },
        },
    }
    opensearch.create_index(os_index, old)
    report = ingest_documents(
        [markdown_document("bees.md", GUIDE, "test", fallback_title="bees")],
        client=opensearch,
        embedder=embedder,
        settings=settings,
        index=os_index,
        progress=False,
    )
    assert report.ok, report.errors
    assert {"header", "lead"} <= set(opensearch.mapping_properties(os_index))


def test_fetch_and_delete_by_id_and_header_views(opensearch, bees, os_index):
    found = opensearch.fetch(os_index, ["bees.md:0", "bees.md:1", "nope:0"])
    assert [doc["_id"] for doc in found] == ["bees.md:0", "bees.md:1"]
    # A view with the caller's headers reaches the same cluster (no security
    # plugin here, so any Authorization is accepted) and shares the probe.
    view = opensearch.with_headers({"Authorization": "Basic dXNlcjpwYXNz", "X-Opaque-Id": "chunkrag-test"})
    assert view.count(os_index) == bees.chunks
    assert view.capabilities() is opensearch.capabilities()
    assert opensearch.delete_ids(os_index, ["bees.md:0", "nope:0"]) == 1
    opensearch.refresh(os_index)
    assert opensearch.count(os_index) == bees.chunks - 1
