"""Post-search over indices the frameworks' own vector stores wrote: LangChain's
``ElasticsearchStore`` (``text``, ``metadata.*``), LlamaIndex's
(``content``, ``metadata._node_content`` JSON, ``metadata._node_type``,
``doc_id``, ``ref_doc_id``...) and Haystack's (``content``, its ``meta``
flattened to keywords) on Elasticsearch, and Haystack's OpenSearch store on
OpenSearch. The real packages write the indices (with their own fake,
deterministic embeddings: what is searched here is the text); the gateway
reads them through the official client. Every kept passage must be prose
from the content field, never the frameworks' metadata.

The bundled Elasticsearch answers 405 to ``GET /``, which the stores call to
check the connection, so each is handed a ready client where it takes one
(Haystack's store takes none: its client is set before its first use)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving

pytestmark = pytest.mark.integration

TEXTS = [
    "Our office moved to a new building last spring. To rotate an API key, open the console, choose "
    "Security, then Keys, and press Rotate. The old key keeps working for 24 hours so that clients can switch.",
    "Revoking an API key takes effect at once. Every request signed with a revoked key is refused with "
    "status 401. Holidays are listed on the intranet.",
    "Invoices are sent on the first day of each month. You can download past invoices from the billing page.",
]
# Metadata as people give it to the stores: strings dynamic mapping makes text fields.
METADATA = [
    {"source": "kb/keys.md", "author": "Security team", "summary": "How to rotate an API key in the console"},
    {"source": "kb/revoke.md", "author": "Security team", "summary": "Revoking API keys and status 401"},
    {"source": "kb/billing.md", "author": "Finance", "summary": "Monthly invoices"},
]
QUESTION = "how do I rotate an API key"
DIMS = 16


def _name(framework: str) -> str:
    return f"test-fw-{framework}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def langchain_index(es):
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_elasticsearch import ElasticsearchStore

    name = _name("langchain")
    store = ElasticsearchStore(name, embedding=DeterministicFakeEmbedding(size=DIMS), client=es.client)
    store.add_texts(TEXTS, metadatas=METADATA, refresh_indices=True)
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def llamaindex_index(es, settings):
    from elasticsearch import AsyncElasticsearch
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.vector_stores.elasticsearch import ElasticsearchStore

    name = _name("llamaindex")
    client = AsyncElasticsearch(settings.es_url)
    store = ElasticsearchStore(index_name=name, es_client=client)
    documents = [Document(text=text, metadata=meta) for text, meta in zip(TEXTS, METADATA)]
    VectorStoreIndex.from_documents(
        documents, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=MockEmbedding(DIMS)
    )
    asyncio.run(client.close())
    es.refresh(name)
    yield name
    es.delete_index(name)


def _haystack_documents():
    from haystack import Document

    return [
        Document(content=text, meta=meta, embedding=[0.1 * (i + 1)] * DIMS)
        for i, (text, meta) in enumerate(zip(TEXTS, METADATA))
    ]


@pytest.fixture(scope="module")
def haystack_index(es, settings):
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    name = _name("haystack")
    store = ElasticsearchDocumentStore(hosts=settings.es_url, index=name)
    # Its own first use would call GET / (405 here): give it the client, and
    # make the index with the store's own mapping, as that first use would.
    store._client = es.client
    es.client.indices.create(index=name, mappings=store._default_mappings)
    store.write_documents(_haystack_documents())
    es.refresh(name)
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def gateway(settings, embedder):
    with serving(create_app(dataclasses.replace(settings, search_backend="elasticsearch"), embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway):
    from elasticsearch import Elasticsearch

    made = Elasticsearch(gateway, max_retries=0, request_timeout=60)
    yield made
    made.close()


def post_search(client, index: str, field: str, **chunkrag) -> dict:
    body = {"query": {"match": {field: QUESTION}}, "size": 3, "ext": {"chunkrag": {"answer": False, **chunkrag}}}
    return dict(client.search(index=index, body=body))


def assert_prose_only(response: dict, field: str) -> None:
    hits = response["hits"]["hits"]
    assert hits, response
    kept = [p for hit in hits for p in hit["_chunkrag"]["passages"]]
    assert kept, "no passage kept"
    for hit in hits:
        for passage in hit["_chunkrag"]["passages"] + hit["_chunkrag"].get("dropped", []):
            assert passage["field"] == field
            assert any(passage["text"] in text for text in TEXTS), passage
            assert not passage["text"].lstrip().startswith(("{", "["))
    assert any("press Rotate" in p["text"] for p in kept)


def test_langchain_metadata_is_not_read_as_content(client, langchain_index):
    response = post_search(client, langchain_index, "text", include_dropped=True)
    chosen = response["chunkrag"]["fields"][langchain_index]
    assert chosen["read"] == ["text"] and chosen["chosen_by"] == "detected"
    assert chosen["left_out"] == {
        "metadata.author": "metadata",
        "metadata.source": "metadata",
        "metadata.summary": "metadata",
    }
    assert_prose_only(response, "text")
    assert all(hit["_chunkrag"]["fields"] == ["text"] for hit in response["hits"]["hits"])


def test_the_request_still_names_a_metadata_field_to_read(client, langchain_index):
    response = post_search(client, langchain_index, "text", fields=["metadata.summary"])
    chosen = response["chunkrag"]["fields"][langchain_index]
    assert chosen["read"] == ["metadata.summary"] and chosen["chosen_by"] == "request"
    kept = [p for hit in response["hits"]["hits"] for p in hit["_chunkrag"]["passages"]]
    assert kept and {p["field"] for p in kept} == {"metadata.summary"}


def test_llamaindex_node_json_and_ids_are_not_read_as_content(client, llamaindex_index):
    response = post_search(client, llamaindex_index, "content", include_dropped=True)
    chosen = response["chunkrag"]["fields"][llamaindex_index]
    assert chosen["read"] == ["content"]
    left_out = chosen["left_out"]
    assert left_out["metadata._node_content"] == "metadata" and left_out["metadata._node_type"] == "metadata"
    assert {"metadata.source", "metadata.summary", "metadata.author"} <= set(left_out)
    assert_prose_only(response, "content")


def test_haystack_meta_is_not_read_as_content(client, haystack_index):
    response = post_search(client, haystack_index, "content", include_dropped=True)
    chosen = response["chunkrag"]["fields"][haystack_index]
    # Haystack maps its meta to keywords: only the content is text.
    assert chosen["read"] == ["content"]
    assert_prose_only(response, "content")


def test_haystack_opensearch_meta_is_not_read_as_content(settings, embedder):
    from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore

    from chunkrag_core.engines import make_backend

    backend = make_backend(dataclasses.replace(settings, search_backend="opensearch"))
    name = _name("haystack-os")
    # The Lucene engine: the store's default mapping loads the k-NN plugin's
    # faiss library, which the bundled OpenSearch does not ship (the node exits).
    method = {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"}
    store = OpenSearchDocumentStore(hosts=settings.opensearch_url, index=name, embedding_dim=DIMS, method=method)
    try:
        store.write_documents(_haystack_documents())
        backend.refresh(name)
        chosen_settings = dataclasses.replace(settings, search_backend="opensearch")
        with serving(create_app(chosen_settings, embedder=embedder)) as url:
            from opensearchpy import OpenSearch

            client = OpenSearch([url], max_retries=0, timeout=60)
            try:
                response = post_search(client, name, "content", include_dropped=True)
            finally:
                client.close()
        fields = response["chunkrag"]["fields"][name]
        assert fields["read"] == ["content"]
        assert_prose_only(response, "content")
    finally:
        backend.delete_index(name)
        backend.close()
