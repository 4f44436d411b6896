import numpy as np

from chunkrag_core.chunk import Chunk
from ingest_pipeline.chunker import ChunkedDocument, document_fingerprint
from ingest_pipeline.sources import plain_document
from ingest_pipeline.writer import StoredDocument, document_actions


def chunked(n_chunks: int) -> ChunkedDocument:
    document = plain_document("doc", "x" * (10 * n_chunks), "test")
    chunks = tuple(
        Chunk(doc_id="doc", position=i, text="x" * 10, start=10 * i, end=10 * i + 10, vector=np.ones(2))
        for i in range(n_chunks)
    )
    return ChunkedDocument(document, chunks, n_chunks, "fp-new")


def ops(actions):
    return [(a["_op_type"], a["_id"]) for a in actions]


def test_new_document_is_only_indexed():
    assert ops(document_actions("i", chunked(2), None)) == [("index", "doc:0"), ("index", "doc:1")]


def test_shorter_version_deletes_the_positions_it_lost():
    stored = StoredDocument(fingerprints=("fp-old",), chunk_count=5, max_position=4, declared_count=5)
    assert ops(document_actions("i", chunked(2), stored)) == [
        ("index", "doc:0"),
        ("index", "doc:1"),
        ("delete", "doc:2"),
        ("delete", "doc:3"),
        ("delete", "doc:4"),
    ]


def test_indexed_source_carries_fingerprint_and_count():
    source = next(document_actions("i", chunked(3), None))["_source"]
    assert source["doc_fingerprint"] == "fp-new" and source["doc_chunk_count"] == 3 and source["vector"] == [1.0, 1.0]


def test_only_a_complete_single_version_counts_as_unchanged():
    assert StoredDocument(("a",), 3, 2, 3).is_complete("a")
    assert not StoredDocument(("a",), 3, 2, 3).is_complete("b")
    assert not StoredDocument(("a", "b"), 3, 2, 3).is_complete("a")  # half-rewritten
    assert not StoredDocument(("a",), 2, 2, 3).is_complete("a")  # a chunk is missing


def test_fingerprint_changes_with_text_and_with_shaping():
    document = plain_document("d", "Some text.", "test")
    other = plain_document("d", "Other text.", "test")
    assert document_fingerprint(document, "theta=0.8") == document_fingerprint(document, "theta=0.8")
    assert document_fingerprint(document, "theta=0.8") != document_fingerprint(other, "theta=0.8")
    assert document_fingerprint(document, "theta=0.8") != document_fingerprint(document, "theta=0.6")


def test_fingerprint_values_are_pinned():
    # Literal values: an index stores these; a change of the hashing would
    # re-ingest every document of every existing index.
    from datetime import date

    from ingest_pipeline.sources import Document, Section

    document = Document(
        "d1",
        "Überblick",
        "Élan vital. Second sentence — with a dash.",
        (Section(("Intro", "Teil 1"), 0, 11), Section(("Rest",), 12, 43)),
        {"lang": "de", "year": 2024, "when": date(2024, 5, 1), "tags": ["a", "b"]},
    )
    assert document_fingerprint(document, "theta=0.8") == "3070dfc053c7c97bf58f7d4ac46fe64c"
    assert document_fingerprint(Document("d2", "", "x", ()), "") == "c4a36c7934ecd9ff2afbf828a734b902"
