"""Post-search with a companion chunk index (``chunkrag sync``): the hits'
passages come from the companion, read with the caller's client, instead of
being chunked and embedded at query time; a document changed since the sync
is chunked at query time again (its text no longer matches the companion's
fingerprint), so a companion never serves text the caller's hit does not show."""

from __future__ import annotations

import uuid

import pytest

from ingest_pipeline.sync import companion_name, sync_index
from search_extension.options import parse_options
from search_extension.passages import QueryTimePassages
from search_extension.post_searcher import PostSearcher

pytestmark = pytest.mark.integration

MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}, "url": {"type": "keyword"}}}
DOCS = {
    "rotate": {
        "title": "Rotating API keys",
        "body": "To rotate an API key, open the console, choose Security, then Keys, and press Rotate. "
        "The old key keeps working for 24 hours so that clients can switch.",
        "url": "https://example.test/rotate",
    },
    "revoke": {
        "title": "Revoking access",
        "body": "Revoking an API key takes effect at once. Every request signed with a revoked key is refused.",
        "url": "https://example.test/revoke",
    },
}
QUESTION = "how do I rotate an API key"


class CountingQueryTime:
    """The query-time source, counting the fields it had to chunk."""

    def __init__(self, inner):
        self.inner, self.asked = inner, []

    def passages(self, fields):
        self.asked.extend(f.doc_id for f in fields)
        return self.inner.passages(fields)


@pytest.fixture
def synced(engine, embedder, settings):
    name = f"test-kb-companion-{uuid.uuid4().hex[:10]}"
    engine.create_index(name, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": MAPPING})
    actions = ({"_op_type": "index", "_index": name, "_id": doc_id, "_source": doc} for doc_id, doc in DOCS.items())
    assert all(ok for ok, _ in engine.bulk(actions, chunk_size=100, max_retries=0, initial_backoff=1))
    engine.refresh(name)
    report = sync_index(name, client=engine, embedder=embedder, settings=settings)
    assert report.complete and not report.errors
    yield name
    engine.delete_index(name)
    engine.delete_index(companion_name(name))


def _filtered(engine, embedder, settings, index):
    fallback = CountingQueryTime(QueryTimePassages(embedder, settings))
    searcher = PostSearcher(settings, lambda: embedder, query_time=fallback)
    options = parse_options({"answer": False, "include_dropped": True}, max_candidates=50, surface="search")
    response = engine.search(index, {"query": {"match": {"body": QUESTION}}, "size": 10})
    result = searcher.filter(engine, response, QUESTION, options)
    return result, fallback.asked


def test_the_companion_serves_the_passages_and_a_changed_document_is_chunked_at_query_time(
    engine, embedder, settings, synced
):
    result, asked = _filtered(engine, embedder, settings, synced)
    assert asked == []  # every field came from the companion
    kept = [c for hit in result.hits for c in hit.kept]
    assert any("press Rotate" in c.text for c in kept)

    changed = {**DOCS["rotate"], "body": "To rotate an API key now, call the rotate endpoint of the key service."}
    assert all(
        ok
        for ok, _ in engine.bulk(
            [{"_op_type": "index", "_index": synced, "_id": "rotate", "_source": changed}],
            chunk_size=10,
            max_retries=0,
            initial_backoff=1,
        )
    )
    engine.refresh(synced)
    result, asked = _filtered(engine, embedder, settings, synced)
    # The changed document no longer matches the companion: chunked at query
    # time; the unchanged one still comes from the companion.
    assert asked == ["rotate"]
    texts = [c.text for hit in result.hits for c in (*hit.kept, *(chunk for chunk, _ in hit.dropped))]
    assert not any("press Rotate" in text for text in texts)
    assert any("rotate endpoint" in text for text in texts)
