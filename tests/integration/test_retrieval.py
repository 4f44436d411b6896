import pytest

from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from search_extension.retriever import HybridRetriever, RetrievalError

pytestmark = pytest.mark.integration

DOCS = {
    "violin": ("Violin", "The violin has four strings tuned in fifths. It is played with a bow made of horsehair."),
    "plants": (
        "Photosynthesis",
        "Photosynthesis turns light, water and carbon dioxide into sugar. Chlorophyll absorbs red and blue light.",
    ),
    "tokyo": ("Tokyo", "Tokyo is the capital of Japan. Its metropolitan area is home to about 37 million people."),
    "kyoto": (
        "Kyoto",
        "Kyoto was the imperial capital of Japan for over a thousand years. It has many Buddhist temples.",
    ),
}


@pytest.fixture
def small_index(engine, embedder, settings, engine_index):
    """The same four documents on each engine (Elasticsearch, OpenSearch)."""
    documents = [plain_document(doc_id, text, doc_id, title=title) for doc_id, (title, text) in DOCS.items()]
    report = ingest_documents(
        documents, client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False
    )
    assert report.ok and report.documents == 4
    return HybridRetriever(engine, embedder, engine_index, settings.retrieval)


@pytest.mark.parametrize("mode", ["bm25", "knn", "native_sum", "minmax", "rrf"])
def test_every_mode_finds_the_answer_first(small_index, mode):
    result = small_index.search("What is the capital city of Japan?", mode=mode, size=3)
    assert result.mode == mode
    assert result.chunks[0].doc_id == "tokyo"
    assert result.chunks[0].text.startswith("Tokyo is the capital of Japan.")
    scores = [c.score for c in result.chunks]
    assert scores == sorted(scores, reverse=True)


def test_native_sum_is_the_sum_of_half_weighted_sides(small_index):
    query = "capital of Japan"
    bm25 = {c.chunk_id: c.score for c in small_index.search(query, mode="bm25", size=20).chunks}
    knn = {c.chunk_id: c.score for c in small_index.search(query, mode="knn", size=20).chunks}
    for chunk in small_index.search(query, mode="native_sum", size=5).chunks:
        expected = 0.5 * bm25.get(chunk.chunk_id, 0.0) + 0.5 * knn.get(chunk.chunk_id, 0.0)
        assert chunk.score == pytest.approx(expected, rel=1e-3)


def test_filters_pass_through_to_both_sides(small_index):
    only_kyoto = [{"term": {"doc_id": "kyoto"}}]
    for mode in ("bm25", "knn", "native_sum", "minmax"):
        result = small_index.search("capital of Japan", mode=mode, size=5, filters=only_kyoto)
        assert result.chunks and {c.doc_id for c in result.chunks} == {"kyoto"}, mode


@pytest.mark.parametrize("mode", ["bm25", "knn", "native_sum", "minmax", "rrf"])
def test_collapse_gives_one_chunk_per_document(small_index, mode):
    result = small_index.search("Japan capital temples strings light", mode=mode, size=10, collapse_field="doc_id")
    doc_ids = [c.doc_id for c in result.chunks]
    assert len(doc_ids) == len(set(doc_ids)) == (4 if mode != "bm25" else len(doc_ids))


def test_vectors_come_only_on_request(small_index):
    result = small_index.search("Japan", mode="native_sum", size=10, include_vectors=True)
    assert all(c.vector is not None and c.vector.shape == (384,) for c in result.chunks)
    assert all(c.vector is None for c in small_index.search("Japan", size=3).chunks)


def test_fusion_modes_report_how_they_ran(small_index, engine):
    capabilities = engine.capabilities()
    assert small_index.search("violin", mode="minmax").fusion == (
        "native" if capabilities.has_hybrid_query else "client"
    )
    assert small_index.search("violin", mode="rrf").fusion == (
        "retriever" if capabilities.has_rrf_retriever else "client"
    )
    if capabilities.has_linear_retriever:
        assert small_index.search("violin", mode="linear").fusion == "retriever"
    else:
        with pytest.raises(RetrievalError, match="no `linear` retriever"):
            small_index.search("violin", mode="linear")


def test_bad_requests_are_refused_clearly(small_index):
    with pytest.raises(RetrievalError, match="unknown retrieval mode 'fuzzy'"):
        small_index.search("violin", mode="fuzzy")
    with pytest.raises(RetrievalError, match="empty"):
        small_index.search("   ")
