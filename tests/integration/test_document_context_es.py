"""Document context through the real ingest pipeline into the real
Elasticsearch: a heading-less document is sectioned and summarised by a
model behind a real OpenAI-compatible HTTP server (scripted answers), the
stored chunks carry the header and sections, and ingesting again costs no
model call."""

from __future__ import annotations

import dataclasses

import pytest

from ingest_pipeline.pipeline import ingest
from local_services.scripted_openai import ScriptedOpenAI, completion

pytestmark = pytest.mark.integration

PARAGRAPHS = [
    "Honey bees collect nectar from flowers. They turn it into honey inside the hive.",
    "A colony keeps one queen, who lays the eggs. Workers feed the larvae.",
    "Tokyo is the capital of Japan. Its rail network carries millions of people a day.",
    "The Yamanote line loops around the centre of the city.",
]
SUMMARY = "This document is about honey bees and about Tokyo's railways."


def scripted_model(request: dict):
    prompt = request["messages"][-1]["content"]
    if "Split it into sections" in prompt:
        return completion("0: Honey bees\n2: Tokyo railways")(request)
    return completion(SUMMARY)(request)


def stored_chunks(es, index):
    body = {"size": 100, "query": {"match_all": {}}, "sort": [{"position": "asc"}], "_source": {"excludes": ["vector"]}}
    return [hit["_source"] for hit in es.search(index, body)["hits"]["hits"]]


def test_sections_and_summary_are_stored_in_headers_and_reingest_costs_no_call(
    es, embedder, settings, fresh_index, tmp_path
):
    text = "\n\n".join(PARAGRAPHS) + "\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text(text, encoding="utf-8")
    chunking = dataclasses.replace(settings.chunking, sectioning="llm", summaries=True)
    cache = tmp_path / "cache"

    with ScriptedOpenAI(default=scripted_model) as server:
        on = dataclasses.replace(
            settings,
            chunking=chunking,
            chat=dataclasses.replace(settings.chat, base_url=server.base_url, model="scripted"),
        )
        first = ingest(
            [tmp_path / "docs"],
            client=es,
            embedder=embedder,
            settings=on,
            index=fresh_index,
            progress=False,
            context_cache=cache,
        )
        calls_after_first = len(server.requests)
        again = ingest(
            [tmp_path / "docs"],
            client=es,
            embedder=embedder,
            settings=on,
            index=fresh_index,
            progress=False,
            context_cache=cache,
        )
        other_index = fresh_index + "-again"
        try:
            # A new index re-chunks the document, but the answers come from the cache.
            cached = ingest(
                [tmp_path / "docs"],
                client=es,
                embedder=embedder,
                settings=on,
                index=other_index,
                progress=False,
                context_cache=cache,
            )
        finally:
            es.delete_index(other_index)

    assert first.ok, first.errors
    assert (first.context_documents, first.context_calls, first.context_cache_hits, first.context_fallbacks) == (
        1,
        2,
        0,
        (),
    )
    assert calls_after_first == 2
    chunks = stored_chunks(es, fresh_index)
    assert len(chunks) == first.chunks >= 2
    bees_end = text.index("Tokyo")
    for chunk in chunks:
        assert text[chunk["start"] : chunk["end"]] == chunk["text"]
        expected = ["Honey bees"] if chunk["end"] <= bees_end else ["Tokyo railways"]
        assert chunk["section"] == expected
        assert chunk["header"] == f"notes\n{SUMMARY}\n{expected[0]}"
        assert chunk["title"] == "notes"
    assert {tuple(c["section"]) for c in chunks} == {("Honey bees",), ("Tokyo railways",)}

    assert again.unchanged == 1 and again.chunks == 0 and again.context_calls == 0 and again.context_documents == 0
    assert cached.chunks == first.chunks and cached.context_calls == 0 and cached.context_cache_hits == 2
    assert len(server.requests) == calls_after_first
