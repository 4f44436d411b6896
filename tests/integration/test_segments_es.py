"""Relevant segment extraction on the real Elasticsearch: neighbours come
back in one request and the segment text is the document's own text."""

from __future__ import annotations

import pytest

from chunkrag_core.engines import schema
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import markdown_document
from search_extension.neighbours import fetch_positions, position_fetcher
from search_extension.retriever import HybridRetriever
from search_extension.segments import SegmentSettings, extract_segments
from tests.support.chunking import sentence_chunks

pytestmark = pytest.mark.integration

GUIDE = (
    "# Bees\n\nHoney bees live in colonies. A colony has one queen.\n\n"
    "## Work\n\nWorkers gather nectar from flowers. They turn nectar into honey in the hive. "
    "The honey is stored in wax cells.\n\n"
    "## Winter\n\nIn winter the bees cluster together. They shiver to keep the queen warm.\n"
)


def test_segment_text_is_the_document_text_and_neighbours_come_in_one_request(es, embedder, settings, fresh_index):
    document = markdown_document("bees.md", GUIDE, "test", fallback_title="bees")
    report = ingest_documents(  # sentence chunks: several neighbours to rebuild
        [document], client=es, embedder=embedder, settings=sentence_chunks(settings), index=fresh_index, progress=False
    )
    assert report.ok and report.chunks >= 5

    every = fetch_positions(es, fresh_index, {"bees.md": list(range(report.chunks))})
    assert [c.position for c in every] == list(range(report.chunks))
    for chunk in every:
        assert GUIDE[chunk.start : chunk.end] == chunk.text
        assert chunk.lead is not None

    # Two judged candidates three positions apart: the segment needs the two between.
    first, last = every[0].with_score(1.0, combined=1.0), every[3].with_score(0.9, combined=1.0)
    requests = []

    def counting_fetch(wanted):
        requests.append({k: tuple(v) for k, v in wanted.items()})
        return position_fetcher(es, fresh_index)(wanted)

    (segment,) = extract_segments([first, last], counting_fetch, SegmentSettings())
    assert requests == [{"bees.md": (1, 2)}]
    assert (segment.first, segment.stop) == (0, 4)
    assert segment.text == GUIDE[every[0].start : every[3].end]

    # From a real hybrid search: every segment is the document's own text.
    retriever = HybridRetriever(es, embedder, fresh_index, settings.retrieval)
    candidates = retriever.search("how do bees make honey from nectar", size=3).chunks
    segments = extract_segments(
        candidates,
        position_fetcher(es, fresh_index),
        SegmentSettings(irrelevant_chunk_penalty=0.1, min_segment_value=0.1),
    )
    assert segments
    for found in segments:
        assert found.text == GUIDE[found.start : found.end]
        assert [c.position for c in found.chunks] == list(range(found.first, found.stop))


def test_an_index_from_before_headers_gets_the_new_fields(es, embedder, settings, fresh_index):
    has_english = es.capabilities().has_english_analyzer
    body = schema.index_body(dims=settings.embedder.dims, has_english=has_english, vectors=settings.vector_index)
    old_properties = {k: v for k, v in body["mappings"]["properties"].items() if k not in schema.added_properties()}
    old_mappings = {**body["mappings"], "properties": old_properties}
    es.create_index(fresh_index, {"settings": body["settings"], "mappings": old_mappings})

    document = markdown_document("bees.md", GUIDE, "test", fallback_title="bees")
    report = ingest_documents(
        [document], client=es, embedder=embedder, settings=settings, index=fresh_index, progress=False
    )
    assert report.ok, report.errors
    properties = es.mapping_properties(fresh_index)
    assert {"header", "lead"} <= set(properties)


def test_headers_are_stored_and_bm25_finds_a_chunk_by_its_section_name(es, embedder, settings, fresh_index):
    text = "# Apiary handbook\n\nKeep the hives dry.\n\n## Overwintering\n\nThey shiver to keep the queen warm.\n"
    document = markdown_document("handbook.md", text, "test", fallback_title="handbook")
    report = ingest_documents(
        [document], client=es, embedder=embedder, settings=settings, index=fresh_index, progress=False
    )
    assert report.ok
    chunks = fetch_positions(es, fresh_index, {"handbook.md": list(range(report.chunks))})
    assert [c.header for c in chunks] == ["Apiary handbook", "Apiary handbook > Overwintering"]
    assert [c.text for c in chunks] == ["Keep the hives dry.", "They shiver to keep the queen warm."]
    # "overwintering" is only in the header: BM25 on the header field finds the chunk.
    retriever = HybridRetriever(es, embedder, fresh_index, settings.retrieval)
    (hit,) = retriever.search("overwintering", mode="bm25", size=1).chunks
    assert hit.chunk_id == "handbook.md:1"
