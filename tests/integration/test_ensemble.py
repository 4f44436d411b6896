"""Multi-scale ensembling on the real engines (Elasticsearch and OpenSearch):
scales in one index, idempotent re-ingest with stale scales deleted, base
searches that see only the base scale, and one-_msearch ensemble retrieval
de-duplicated by span."""

from __future__ import annotations

import dataclasses

import pytest

from chunkrag_core.engines import schema
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from search_extension.ask import ask
from search_extension.retriever import HybridRetriever
from search_extension.segments import SegmentSettings

pytestmark = pytest.mark.integration

DOCUMENTS = {
    "bees": "Honey bees live in colonies. A colony has one queen and many workers. "
    "Workers gather nectar from flowers. They turn the nectar into honey inside the hive. "
    "The honey is stored in wax cells. In winter the bees cluster together. "
    "They shiver to keep the queen warm until spring.",
    "rivers": "The Nile flows north through eleven countries. It ends in a delta on the Mediterranean Sea. "
    "Farmers along its banks depend on the yearly flood. The Aswan dam now controls that flood. "
    "Fish and birds live in the wetlands of the delta.",
    "clocks": "A pendulum clock keeps time with a swinging weight. Christiaan Huygens built the first one in 1656. "
    "Its period depends on the length of the pendulum. Quartz clocks later replaced most pendulum clocks.",
}
# Small scales so these short documents get several chunks at each:
# 16 tokens ~ 64 characters, 48 tokens ~ 192 characters.
SCALES = (16, 48)


class CountingBackend:
    """The real backend, counting the requests made through it."""

    def __init__(self, backend):
        self.backend, self.calls = backend, []

    def __getattr__(self, name):
        attribute = getattr(self.backend, name)
        if name in ("search", "msearch", "hybrid_search"):

            def counted(*args, **kwargs):
                self.calls.append(name)
                return attribute(*args, **kwargs)

            return counted
        return attribute


def scaled(settings, scales):
    return dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=scales))


def documents():
    return [plain_document(doc_id, text, "test") for doc_id, text in DOCUMENTS.items()]


def held(engine, index):
    """(doc_id, scale, position) of every chunk stored."""
    hits = engine.search(index, {"size": 500, "_source": [schema.DOC_ID, schema.SCALE, schema.POSITION]})["hits"][
        "hits"
    ]
    return {(h["_source"]["doc_id"], h["_source"].get("scale", 0), h["_source"]["position"]) for h in hits}


def test_scales_share_the_index_reingest_is_idempotent_and_stale_scales_go(engine, engine_index, embedder, settings):
    report = ingest_documents(
        documents(),
        client=engine,
        embedder=embedder,
        settings=scaled(settings, SCALES),
        index=engine_index,
        progress=False,
    )
    assert report.ok and report.scaled_chunks > 0
    stored = held(engine, engine_index)
    assert {scale for _, scale, _ in stored} == {0, 16, 48}
    assert len(stored) == report.chunks + report.scaled_chunks
    by_id = engine.fetch(engine_index, ["bees:0@48", "bees:0"])
    assert [d["_source"]["scale"] for d in by_id] == [48, 0]

    again = ingest_documents(
        documents(),
        client=engine,
        embedder=embedder,
        settings=scaled(settings, SCALES),
        index=engine_index,
        progress=False,
    )
    assert again.unchanged == 3 and again.chunks == 0 and held(engine, engine_index) == stored

    # Dropping scale 16 re-ingests (the fingerprint changed) and deletes its chunks.
    fewer = ingest_documents(
        documents(),
        client=engine,
        embedder=embedder,
        settings=scaled(settings, (48,)),
        index=engine_index,
        progress=False,
    )
    assert fewer.unchanged == 0 and fewer.deleted == sum(1 for _, scale, _ in stored if scale == 16)
    assert held(engine, engine_index) == {key for key in stored if key[1] != 16}


def test_base_search_sees_only_base_chunks_and_ensembling_is_one_msearch_and_one_fetch_of_disjoint_spans(
    engine, engine_index, embedder, settings
):
    ingest_documents(
        documents(),
        client=engine,
        embedder=embedder,
        settings=scaled(settings, SCALES),
        index=engine_index,
        progress=False,
    )
    counting = CountingBackend(engine)
    retriever = HybridRetriever(counting, embedder, engine_index, settings.retrieval)

    base = retriever.search("how do bees make honey", size=20).chunks
    assert base and {c.scale for c in base} == {0}

    counting.calls.clear()
    result = retriever.search_ensemble("how do bees make honey from nectar", scales=SCALES, size=8)
    # Every scale's two sides in one _msearch (ids and scores), then one
    # search fetching the chunks fusion kept.
    assert counting.calls == ["msearch", "search"] and result.fusion == "ensemble"
    chunks = result.chunks
    assert chunks and any(c.scale > 0 for c in chunks)
    assert [c.score for c in chunks] == sorted((c.score for c in chunks), reverse=True)
    for chunk in chunks:
        assert DOCUMENTS[chunk.doc_id][chunk.start : chunk.end] == chunk.text
    # No span is longer than the largest scale's chunks (in characters), or
    # than the longest base chunk where the base chunker's are longer.
    every_base = retriever.search("how do bees make honey", size=500).chunks
    cap = max(max(SCALES) * 4, max(c.end - c.start for c in every_base))
    assert all(c.end - c.start <= cap for c in chunks)
    for doc_id in {c.doc_id for c in chunks}:
        spans = sorted((c.start, c.end) for c in chunks if c.doc_id == doc_id)
        # Disjoint: no text twice (spans that touch stay apart past the cap,
        # or when the later one is of a larger scale than the kept one).
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_retrieval_only_ask_runs_rse_over_the_ensemble(engine, engine_index, embedder, settings):
    ingest_documents(
        documents(),
        client=engine,
        embedder=embedder,
        settings=scaled(settings, SCALES),
        index=engine_index,
        progress=False,
    )
    retriever = HybridRetriever(engine, embedder, engine_index, settings.retrieval)
    result = ask(
        "when did Huygens build the pendulum clock",
        retriever=retriever,
        model=None,
        stages=False,
        candidates=6,
        ensemble=SCALES,
        segments=SegmentSettings(irrelevant_chunk_penalty=0.1, min_segment_value=0.1),
    )
    assert result.retrieval.fusion == "ensemble" and result.segments
    for segment in result.segments:
        assert segment.text == DOCUMENTS[segment.doc_id][segment.start : segment.end]
        assert {c.scale for c in segment.chunks} == {segment.scale}


def test_an_index_without_scales_answers_ensembling_with_its_base_chunks(engine, engine_index, embedder, settings):
    ingest_documents(
        documents(), client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False
    )
    retriever = HybridRetriever(engine, embedder, engine_index, settings.retrieval)
    result = retriever.search_ensemble("river delta flood", scales=SCALES, size=4)
    assert result.chunks and {c.scale for c in result.chunks} == {0}


def test_the_gateway_ensembles_with_ext_chunkrag_ensemble(es, embedder, settings, fresh_index):
    import httpx

    from chunkrag_gateway import create_app
    from chunkrag_gateway.server import serve_in_thread

    ingest_documents(
        documents(), client=es, embedder=embedder, settings=scaled(settings, SCALES), index=fresh_index, progress=False
    )
    body = {
        "query": {"match": {"text": "how do bees make honey"}},
        "size": 5,
        "ext": {"chunkrag": {"stages": False, "candidates": 6, "ensemble": list(SCALES)}},
    }
    with serve_in_thread(create_app(settings, embedder=embedder)) as url, httpx.Client() as http:
        response = http.post(f"{url}/{fresh_index}/_search", json=body)
        plain = http.post(
            f"{url}/{fresh_index}/_search", json={**body, "ext": {"chunkrag": {"stages": False, "candidates": 6}}}
        )
        bad = http.post(
            f"{url}/{fresh_index}/_search", json={**body, "ext": {"chunkrag": {"stages": False, "ensemble": "yes"}}}
        )
    assert response.status_code == 200, response.text
    assert response.json()["chunkrag"]["retrieval"]["fusion"] == "ensemble"
    hits = response.json()["hits"]["hits"]
    assert hits and any(hit["_source"]["scale"] > 0 for hit in hits)
    for hit in hits:
        source = hit["_source"]
        assert DOCUMENTS[source["doc_id"]][source["start"] : source["end"]] == source["text"]
    assert {hit["_source"]["scale"] for hit in plain.json()["hits"]["hits"]} == {0}
    assert bad.status_code == 400 and "ext.chunkrag.ensemble" in bad.text


def test_eval_retrieves_the_ensemble_of_the_pools_it_indexes_at_the_scales(
    es, embedder, settings, shared_eval, fresh_index
):
    from chunkrag_core.providers.chat import OpenAICompatibleChat
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.runner import evaluate
    from chunkrag_filter.judging import judge_in_threads
    from chunkrag_filter.pipeline import FilterOptions
    from local_services.scripted_openai import ScriptedOpenAI, listwise_choice

    _, items, _ = read_items(shared_eval / "popqa" / "dev.jsonl", "popqa", limit=2)
    with ScriptedOpenAI(default=listwise_choice("\x00")) as server:
        model = OpenAICompatibleChat(model="scripted", base_url=server.base_url, timeout_s=10)
        report = evaluate(
            items,
            "popqa",
            client=es,
            embedder=embedder,
            settings=scaled(settings, SCALES),
            model=model,
            options=FilterOptions(answer=False),
            judge_many=judge_in_threads(model, threads=2),
            index=fresh_index,
            ensemble=SCALES,
        )
    assert len(report.questions) == 2 and all(q.candidates > 0 for q in report.questions)
    assert {scale for _, scale, _ in held(es, fresh_index)} == {0, 16, 48}
    # Spans, not repeated chunks: the candidates' characters are at most the pool's.
    assert all(q.chars_before <= len(item.pool) for q, item in zip(report.questions, items))
