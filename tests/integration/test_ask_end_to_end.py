"""Ask end to end: real Elasticsearch and real OpenSearch (each in turn), the
real OpenAI-compatible client over HTTP, a scripted model server that judges
by content."""

import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_filter.pipeline import FilterOptions
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI, completion, is_listwise, listwise_choice
from search_extension.ask import ask
from search_extension.retriever import HybridRetriever

pytestmark = pytest.mark.integration

DOCS = {
    "tokyo": "Tokyo is the capital of Japan. Its metropolitan area is home to about 37 million people.",
    "kyoto": "Kyoto was the imperial capital of Japan for over a thousand years. It has many Buddhist temples.",
    "violin": "The violin has four strings tuned in fifths. It is played with a bow.",
}


def judge_by_content(request):
    prompt = request["messages"][-1]["content"]
    if is_listwise(request):
        return listwise_choice("Tokyo is the capital")(request)
    if "Passages:" in prompt:
        return completion("Tokyo is the capital of Japan [1].")(request)
    chunk = prompt.split("Chunk:", 1)[1]
    return completion("Yes", yes_probability=0.95 if "Tokyo is the capital" in chunk else 0.05)(request)


def test_ask_keeps_the_answering_chunk_and_cites_it(engine, embedder, settings, engine_index):
    documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in DOCS.items()]
    ingest_documents(documents, client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    retriever = HybridRetriever(engine, embedder, engine_index, settings.retrieval)
    with ScriptedOpenAI(default=judge_by_content) as server:
        model = OpenAICompatibleChat(model="scripted", base_url=server.base_url)
        result = ask(
            "What is the capital of Japan?",
            retriever=retriever,
            model=model,
            options=FilterOptions(judge_top=9),
            candidates=5,
        )

    filtered = result.filtered
    assert [c.chunk_id for c in filtered.kept] == ["tokyo:0"]
    assert filtered.kept[0].stage_scores["base"] == pytest.approx(0.95)
    assert result.answer.found and result.answer.citations == ("tokyo:0",)
    dropped = {d.chunk.chunk_id for d in filtered.decisions if not d.kept}
    assert dropped == {c.chunk_id for c in result.retrieval.chunks} - {"tokyo:0"}
    # The judge turned on: one listwise batch judges every candidate (at most
    # nine), in as many orders as the default asks; one call writes the answer.
    assert filtered.model_calls + result.answer.calls == FilterOptions().scoring.orders + 1 == len(server.requests)
    assert result.usage.model_calls == len(server.requests)
