"""The adapters in the real frameworks against the real nodes: documents
written by each framework's own store, retrieved by its own retriever,
filtered by the adapter (LangChain, LlamaIndex, Haystack; Haystack's
OpenSearch store too); the framework's clients pointed at the gateway
(``es_url=``, writes with CHUNKRAG_GATEWAY_PASSTHROUGH=read,write, the
ElasticsearchRetriever recipe of docs/frameworks.md); and the LLM judge on
the local model through each adapter. The stores that call ``GET /`` first
(Haystack's Elasticsearch store) reach the bundled node through the
gateway, which answers it (chunkrag_gateway/root.py)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from chunkrag_core.settings import GatewaySettings

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, scope="module")
def sentence_passages():
    """The adapters and this module's gateway read their settings from the
    environment: here the paper's θ breakpoints with no minimum, which with
    MiniLM make each sentence a passage, so the tests can name the passages
    the filter keeps or drops. Module-scoped, so it is in place before the
    module's gateway starts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHUNKRAG_CHUNK_BREAKPOINT", "threshold")
        patch.setenv("CHUNKRAG_CHUNK_MIN_CHARS", "0")
        yield


@pytest.fixture(scope="module")
def sentence_settings(settings, sentence_passages):
    """The session's settings with the same sentence passages."""
    chunking = dataclasses.replace(settings.chunking, breakpoint="threshold", min_chars=0)
    return dataclasses.replace(settings, chunking=chunking)


ROTATE = "To rotate an API key, open the console, choose Security, then Keys, and press Rotate."
TEXTS = [
    "Our office moved to a new building last spring. " + ROTATE + " The old key keeps working for 24 hours so that "
    "clients can switch. The cafeteria serves lunch from noon.",
    "Revoking an API key takes effect at once. Every request signed with a revoked key is refused with status 401. "
    "Holidays are listed on the intranet.",
    "Invoices are sent on the first day of each month. You can download past invoices from the billing page.",
]
TITLES = ["Rotating API keys", "Revoking access", "Invoices"]
QUESTION = "how do I rotate an API key"
# Sentences about nothing the question asks: a cut at STRICT drops them (the default cut, the most
# permissive, drops only what is clearly irrelevant: with the titles as headers, only the holidays).
OFF_TOPIC = ("The cafeteria serves lunch from noon.", "Holidays are listed on the intranet.")
STRICT = {"fixed_threshold": 0.05}
JUDGE = {"judge_top": 9}


@pytest.fixture
def index_name(es):
    name = f"test-frameworks-{uuid.uuid4().hex[:10]}"
    yield name
    es.delete_index(name)


@pytest.fixture(scope="module")
def gateway(sentence_settings, embedder):
    """The gateway over the bundled Elasticsearch, forwarding writes too (the stores write through it)."""
    from chunkrag_gateway import create_app
    from chunkrag_gateway.server import serve_in_thread

    chosen = dataclasses.replace(sentence_settings, gateway=GatewaySettings(passthrough="read,write"))
    with serve_in_thread(create_app(chosen, embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def lc_embeddings(embedder):
    from chunkrag_adapters.langchain import ChunkragEmbeddings

    return ChunkragEmbeddings(embedder)


def check_passages(texts, kept_contents, metadata):
    """Every kept passage is a span of its source text, with the filter's view beside it."""
    assert kept_contents
    for content, meta in zip(kept_contents, metadata):
        view = meta["chunkrag"]
        assert view["kept"] is True and view["reason"] in ("above_threshold", "fallback")
        assert view["scores"]["combined"] == view["score"] and view["threshold"] is not None
        assert any(text[view["start"] : view["end"]] == content for text in texts)
    assert ROTATE in kept_contents


def off_topic_dropped(kept_contents):
    return not set(OFF_TOPIC) & set(kept_contents)


# --- LangChain -------------------------------------------------------------------


def langchain_store(index_name, embeddings, **connection):
    from langchain_elasticsearch import ElasticsearchStore

    store = ElasticsearchStore(index_name=index_name, embedding=embeddings, **connection)
    store.add_texts(TEXTS, metadatas=[{"title": t} for t in TITLES])
    store.client.indices.refresh(index=index_name)
    return store


def test_langchain_compression_retriever_over_elasticsearch_store(es, settings, index_name, lc_embeddings):
    from elasticsearch import Elasticsearch
    from langchain_classic.retrievers import ContextualCompressionRetriever

    from chunkrag_adapters.langchain import ChunkragCompressor

    store = langchain_store(index_name, lc_embeddings, client=Elasticsearch(settings.es_url))
    retriever = ContextualCompressionRetriever(
        base_compressor=ChunkragCompressor(), base_retriever=store.as_retriever(search_kwargs={"k": 3})
    )
    kept = retriever.invoke(QUESTION)
    check_passages(TEXTS, [d.page_content for d in kept], [d.metadata for d in kept])
    assert {d.metadata["title"] for d in kept} <= set(TITLES)
    assert "Holidays are listed on the intranet." not in [d.page_content for d in kept]
    retriever.base_compressor = ChunkragCompressor(options=STRICT)
    assert off_topic_dropped([d.page_content for d in retriever.invoke(QUESTION)])
    # Whole documents: each kept or dropped as it came, never cut.
    whole = ChunkragCompressor(split=False).compress_documents(store.similarity_search(QUESTION, k=3), QUESTION)
    assert whole and all(d.page_content in TEXTS for d in whole)
    assert whole[0].metadata["chunkrag"]["start"] == 0


def test_langchain_retriever_over_a_post_search_index_and_a_chunk_index(es, sentence_settings, embedder, index_name):
    settings = sentence_settings
    from chunkrag_adapters.langchain import ChunkragRetriever
    from ingest_pipeline.pipeline import ingest_documents
    from ingest_pipeline.sources import plain_document
    from tests.support.plain_index import plain_index

    # Any index: its documents' text fields post-searched.
    mapping = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}
    docs = {str(i): {"title": title, "body": text} for i, (title, text) in enumerate(zip(TITLES, TEXTS))}
    with plain_index(es, "test-frameworks-plain", mapping, docs) as plain:
        kept = ChunkragRetriever(index=plain, settings=settings, backend=es, embedder=embedder).invoke(QUESTION)
        assert ROTATE in [d.page_content for d in kept]
        assert {d.metadata["_index"] for d in kept} == {plain}
        assert {d.metadata["_id"] for d in kept} <= set(docs)

    # A chunk index (`chunkrag ingest`): its hybrid retrieval, then the filter over its chunks.
    documents = [plain_document(str(i), t, str(i), title=title) for i, (title, t) in enumerate(zip(TITLES, TEXTS))]
    report = ingest_documents(documents, client=es, embedder=embedder, settings=settings, index=index_name, progress=0)
    assert report.ok
    kept = ChunkragRetriever(index=index_name, settings=settings, backend=es, embedder=embedder).invoke(QUESTION)
    assert kept[0].page_content == ROTATE
    assert kept[0].metadata["doc_id"] == "0" and kept[0].metadata["chunkrag"]["kept"] is True


# --- LlamaIndex --------------------------------------------------------------------


def test_llamaindex_postprocessor_over_elasticsearch_store(settings, embedder, index_name):
    from elasticsearch import AsyncElasticsearch
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.vector_stores.elasticsearch import ElasticsearchStore

    from chunkrag_adapters.llamaindex import ChunkragEmbedding, ChunkragPostprocessor

    store = ElasticsearchStore(index_name=index_name, es_client=AsyncElasticsearch(settings.es_url))
    index = VectorStoreIndex.from_documents(
        [Document(text=text, metadata={"title": title}) for title, text in zip(TITLES, TEXTS)],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=ChunkragEmbedding(embedder=embedder),
    )
    nodes = index.as_retriever(similarity_top_k=3).retrieve(QUESTION)
    store.close()
    assert len(nodes) == 3
    kept = ChunkragPostprocessor(options=STRICT).postprocess_nodes(nodes, query_str=QUESTION)
    check_passages(TEXTS, [n.node.text for n in kept], [n.node.metadata for n in kept])
    assert off_topic_dropped([n.node.text for n in kept])
    assert all(n.score == n.node.metadata["chunkrag"]["score"] for n in kept)
    source = {n.node.node_id: n.node for n in nodes}
    for n in kept:
        # The source node is named, and the offsets are in its text.
        parent = source[n.node.source_node.node_id]
        assert parent.text[n.node.start_char_idx : n.node.end_char_idx] == n.node.text
        assert "chunkrag" not in n.node.get_content(metadata_mode="llm")


# --- Haystack ----------------------------------------------------------------------


def haystack_pipeline(store, retriever):
    from haystack import Pipeline

    from chunkrag_adapters.haystack import ChunkragFilter

    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever(document_store=store, top_k=3))
    pipeline.add_component("filter", ChunkragFilter(options=STRICT))
    pipeline.connect("retriever.documents", "filter.documents")
    return pipeline


def run_haystack(pipeline):
    return pipeline.run({"retriever": {"query": QUESTION}, "filter": {"query": QUESTION}})["filter"]["documents"]


def haystack_documents():
    from haystack import Document

    return [Document(content=text, meta={"title": title}) for title, text in zip(TITLES, TEXTS)]


def test_haystack_component_over_elasticsearch_store_through_the_gateway(es, gateway, index_name):
    from haystack import Pipeline
    from haystack_integrations.components.retrievers.elasticsearch import ElasticsearchBM25Retriever
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    # The store checks its connection with GET / first: the gateway answers it, and forwards the writes.
    store = ElasticsearchDocumentStore(hosts=gateway, index=index_name)
    store.write_documents(haystack_documents())
    es.refresh(index_name)
    pipeline = haystack_pipeline(store, ElasticsearchBM25Retriever)
    kept = run_haystack(pipeline)
    check_passages(TEXTS, [d.content for d in kept], [d.meta for d in kept])
    assert off_topic_dropped([d.content for d in kept])
    assert all(d.score == d.meta["chunkrag"]["score"] for d in kept)
    # The component travels with the pipeline (its options and split), and its embedder loads on warm_up.
    again = Pipeline.from_dict(pipeline.to_dict(), allowed_modules=["chunkrag_adapters.haystack"])
    again.warm_up()
    assert [d.content for d in run_haystack(again)] == [d.content for d in kept]


def test_haystack_component_over_opensearch_store(settings):
    from haystack_integrations.components.retrievers.opensearch import OpenSearchBM25Retriever
    from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore

    name = f"test-frameworks-{uuid.uuid4().hex[:10]}"
    from opensearchpy import OpenSearch

    # The Lucene engine: the store's default mapping loads the k-NN plugin's
    # faiss library, which the bundled OpenSearch does not ship (the node exits).
    method = {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"}
    store = OpenSearchDocumentStore(hosts=settings.opensearch_url, index=name, embedding_dim=384, method=method)
    client = OpenSearch([settings.opensearch_url])
    try:
        store.write_documents(haystack_documents())  # refreshed before it returns
        kept = run_haystack(haystack_pipeline(store, OpenSearchBM25Retriever))
        check_passages(TEXTS, [d.content for d in kept], [d.meta for d in kept])
        assert off_topic_dropped([d.content for d in kept])
    finally:
        client.indices.delete(index=name, ignore_unavailable=True)
        client.close()


# --- the gateway path, without the adapters ----------------------------------------


def test_langchain_store_with_es_url_writes_and_reads_through_the_gateway(es, gateway, index_name, lc_embeddings):
    from elasticsearch import Elasticsearch
    from langchain_elasticsearch import ElasticsearchRetriever

    store = langchain_store(index_name, lc_embeddings, es_url=gateway)
    assert es.count(index_name) == len(TEXTS)
    assert store.similarity_search(QUESTION, k=1)[0].page_content == TEXTS[0]

    # The recipe of docs/frameworks.md: ext.chunkrag in the body, the kept passages out of each hit.
    def body_func(query: str) -> dict:
        return {
            "query": {"match": {"text": query}},
            "size": 3,
            "ext": {"chunkrag": {"empty_hits": "drop", "fixed_threshold": 0.05}},
        }

    def kept_passages(hit: dict):
        from langchain_core.documents import Document

        passages = hit["_chunkrag"]["passages"]
        return Document(
            page_content="\n\n".join(p["text"] for p in passages),
            metadata={"_index": hit["_index"], "_id": hit["_id"], "passages": passages},
        )

    recipe = ElasticsearchRetriever(
        index_name=index_name,
        body_func=body_func,
        document_mapper=kept_passages,
        client=Elasticsearch(gateway),
    )
    found = recipe.invoke(QUESTION)
    assert found and ROTATE in found[0].page_content
    assert not any(sentence in d.page_content for d in found for sentence in OFF_TOPIC)
    assert all(p["kept"] for d in found for p in d.metadata["passages"])


def test_llamaindex_store_with_es_url_through_the_gateway(es, gateway, embedder, index_name):
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.vector_stores.elasticsearch import ElasticsearchStore

    from chunkrag_adapters.llamaindex import ChunkragEmbedding

    store = ElasticsearchStore(index_name=index_name, es_url=gateway)
    index = VectorStoreIndex.from_documents(
        [Document(text=text) for text in TEXTS],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=ChunkragEmbedding(embedder=embedder),
    )
    es.refresh(index_name)
    assert es.count(index_name) == len(TEXTS)
    assert index.as_retriever(similarity_top_k=1).retrieve(QUESTION)[0].node.text == TEXTS[0]
    store.close()


# --- the LLM judge on the local model ------------------------------------------------


def judged(metadata) -> bool:
    """Whether the judge scored the passage (its share beside the retrieval signals)."""
    return "base" in metadata["chunkrag"]["scores"]


def test_every_adapter_runs_the_llm_judge_on_the_local_model(local_model, es, sentence_settings, embedder, index_name):
    from haystack import Document as HaystackDocument
    from langchain_core.documents import Document as LangChainDocument
    from llama_index.core.schema import NodeWithScore, TextNode

    from chunkrag_adapters.haystack import ChunkragFilter
    from chunkrag_adapters.langchain import ChunkragCompressor
    from chunkrag_adapters.llamaindex import ChunkragPostprocessor

    kept = ChunkragCompressor(options=JUDGE, embedder=embedder).compress_documents(
        [LangChainDocument(page_content=t) for t in TEXTS], QUESTION
    )
    assert ROTATE in [d.page_content for d in kept] and all(judged(d.metadata) for d in kept[:1])
    nodes = ChunkragPostprocessor(options=JUDGE, embedder=embedder).postprocess_nodes(
        [NodeWithScore(node=TextNode(text=t), score=1.0) for t in TEXTS], query_str=QUESTION
    )
    assert ROTATE in [n.node.text for n in nodes] and any(judged(n.node.metadata) for n in nodes)
    documents = ChunkragFilter(options=JUDGE).run(QUESTION, [HaystackDocument(content=t) for t in TEXTS])["documents"]
    assert ROTATE in [d.content for d in documents] and any(judged(d.meta) for d in documents)
