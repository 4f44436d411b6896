import dataclasses
import json

import pytest

from ingest_pipeline.pipeline import ingest

pytestmark = pytest.mark.integration

# The paper's θ, the default until 2026-11-28: an index made with it must
# come out whole when it is ingested again with today's default chunker.
PAPER_THETA = {"breakpoint": "threshold", "similarity_threshold": 0.8, "min_chars": 0}


def write_corpus(folder):
    (folder / "guide.md").write_text(
        "# Guide\nElasticsearch stores documents in indices. Each index has shards.\n\n"
        "## Vectors\nA dense_vector field holds embeddings. HNSW graphs make kNN search fast.\n"
        "### Quantisation\nInt8 quantisation shrinks vectors fourfold.\n",
        encoding="utf-8",
    )
    (folder / "notes.txt").write_text("Redis is an in-memory store. Celery uses it as a broker.\n", encoding="utf-8")
    records = [
        {
            "id": "r1",
            "title": "Punkt",
            "text": "Punkt splits sentences without supervision. It learns abbreviations.",
            "metadata": {"year": 2006},
        },
        {"id": "r2", "title": "BM25", "text": "BM25 ranks documents by term frequency and inverse document frequency."},
    ]
    (folder / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{broken\n", encoding="utf-8")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))


def all_chunks(engine, index):
    body = {
        "size": 1000,
        "query": {"match_all": {}},
        "sort": [{"doc_id": "asc"}, {"position": "asc"}],
        "_source": {"excludes": ["vector"]},
    }
    hits = engine.search(index, body)["hits"]["hits"]
    return [hit["_source"] | {"_id": hit["_id"]} for hit in hits]


def test_ingest_writes_chunks_with_offsets_sections_and_vectors(engine, embedder, settings, engine_index, tmp_path):
    write_corpus(tmp_path)
    report = ingest([tmp_path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)

    assert report.ok, report.errors
    assert report.documents == 4  # guide.md, notes.txt, r1, r2
    assert sorted(s.origin.rsplit("/", 1)[-1] for s in report.skipped) == ["latin1.txt", "records.jsonl:3"]
    chunks = all_chunks(engine, engine_index)
    assert len(chunks) == report.chunks >= 4
    guide = (tmp_path / "guide.md").read_text(encoding="utf-8")
    for chunk in (c for c in chunks if c["doc_id"] == "guide.md"):
        assert guide[chunk["start"] : chunk["end"]] == chunk["text"]
        assert len(chunk["text"]) <= settings.chunking.max_chars
    sections = {tuple(c["section"]) for c in chunks if c["doc_id"] == "guide.md"}
    assert sections == {("Guide",), ("Guide", "Vectors"), ("Guide", "Vectors", "Quantisation")}
    positions = [c["position"] for c in chunks if c["doc_id"] == "guide.md"]
    assert positions == list(range(len(positions)))
    assert all(c["_id"] == f"{c['doc_id']}:{c['position']}" for c in chunks)
    r1 = next(c for c in chunks if c["doc_id"] == "r1")
    assert r1["title"] == "Punkt" and r1["metadata"] == {"year": 2006}


def test_reingest_is_idempotent_and_removes_stale_chunks(engine, embedder, settings, engine_index, tmp_path):
    doc = tmp_path / "doc.txt"
    sentences = [
        "The violin has four strings.",
        "Photosynthesis turns light into sugar.",
        "Tokyo is the capital of Japan.",
        "Glaciers carve valleys over millennia.",
    ]
    doc.write_text(" ".join(sentences), encoding="utf-8")
    # unrelated short sentences: at θ each is its own chunk (the default would hold all four in one)
    theta = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, **PAPER_THETA))
    first = ingest([doc], client=engine, embedder=embedder, settings=theta, index=engine_index, progress=False)
    before = all_chunks(engine, engine_index)
    assert first.chunks == len(before) >= 2

    again = ingest([doc], client=engine, embedder=embedder, settings=theta, index=engine_index, progress=False)
    assert again.unchanged == 1 and again.chunks == 0
    assert all_chunks(engine, engine_index) == before

    doc.write_text(sentences[0], encoding="utf-8")
    shorter = ingest([doc], client=engine, embedder=embedder, settings=theta, index=engine_index, progress=False)
    after = all_chunks(engine, engine_index)
    assert shorter.unchanged == 0 and shorter.deleted == len(before) - 1
    assert [c["text"] for c in after] == [sentences[0]]


def test_changing_chunk_settings_rechunks(engine, embedder, settings, engine_index, tmp_path):
    import dataclasses

    doc = tmp_path / "doc.txt"
    doc.write_text("Cats purr when content. Cats also purr when stressed. Dogs bark at strangers.", encoding="utf-8")
    theta = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, **PAPER_THETA))
    ingest([doc], client=engine, embedder=embedder, settings=theta, index=engine_index, progress=False)
    assert len(all_chunks(engine, engine_index)) > 1
    loose = dataclasses.replace(theta, chunking=dataclasses.replace(theta.chunking, similarity_threshold=-1.0))
    report = ingest([doc], client=engine, embedder=embedder, settings=loose, index=engine_index, progress=False)
    assert report.unchanged == 0
    # With θ = -1 nothing is dissimilar enough to split: one chunk holds all three sentences.
    chunks = all_chunks(engine, engine_index)
    assert len(chunks) == 1 and chunks[0]["sentence_count"] == 3


def test_per_item_bulk_errors_are_reported_and_the_rest_is_written(engine, embedder, settings, engine_index, tmp_path):
    # metadata.year is a number in the first record and an object in the
    # second: Elasticsearch rejects the second document's chunks only.
    records = [
        {"id": "ok", "text": "A valid record about rivers.", "metadata": {"year": 1999}},
        {"id": "bad", "text": "An invalid record about lakes.", "metadata": {"year": {"from": 1, "to": 2}}},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    report = ingest([path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    assert not report.ok
    assert len(report.errors) == 1 and report.errors[0].startswith("index bad:0: 400")
    assert [c["doc_id"] for c in all_chunks(engine, engine_index)] == ["ok"]


def test_index_uses_the_best_analyzer_the_cluster_has(engine, embedder, settings, engine_index, tmp_path):
    (tmp_path / "a.txt").write_text("Running dogs.", encoding="utf-8")
    ingest([tmp_path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    analyzer = engine.client.indices.get_settings(index=engine_index)[engine_index]["settings"]["index"]["analysis"][
        "analyzer"
    ]["chunk_text"]
    has_english = engine.capabilities().has_english_analyzer
    assert analyzer["type"] == ("english" if has_english else "standard")
    request = {"analyzer": "chunk_text", "text": "The Running dogs"}
    analyzed = (
        engine.client.indices.analyze(index=engine_index, body=request)
        if engine.engine == "opensearch"
        else engine.client.indices.analyze(index=engine_index, **request)
    )
    tokens = [t["token"] for t in analyzed["tokens"]]
    assert tokens == (["run", "dog"] if has_english else ["running", "dogs"])


def test_refresh_is_restored_after_ingest_even_if_a_killed_run_left_it_paused(
    engine, embedder, settings, engine_index, tmp_path
):
    (tmp_path / "a.txt").write_text("First document.", encoding="utf-8")
    ingest([tmp_path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    engine.set_refresh_interval(engine_index, "-1")  # as a killed run leaves it
    (tmp_path / "b.txt").write_text("Second document.", encoding="utf-8")
    ingest([tmp_path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    assert engine.refresh_interval(engine_index) is None
    assert engine.count(engine_index) == 2


def test_changing_how_chunk_vectors_are_made_reingests_with_the_new_vectors(
    engine, embedder, settings, engine_index, tmp_path
):
    import dataclasses

    import numpy as np

    from ingest_pipeline.headers import embedded_text, mixed_vector

    doc = tmp_path / "records.jsonl"
    doc.write_text(json.dumps({"id": "h1", "title": "Honey bees", "text": "They shiver to keep warm."}), "utf-8")

    def stored_vector():
        # Elasticsearch 9 leaves vectors out of _source unless asked (the engine drops the flag for OpenSearch)
        body = {"size": 10, "query": {"match_all": {}}, "_source": {"excludes": [], "exclude_vectors": False}}
        hits = engine.search(engine_index, body)["hits"]["hits"]
        assert len(hits) == 1 and hits[0]["_source"]["header"] == "Honey bees"
        return np.array(hits[0]["_source"]["vector"], dtype=np.float32)

    def with_vectors(vectors, weight):
        chunking = dataclasses.replace(settings.chunking, headers="title", vectors=vectors, header_weight=weight)
        return dataclasses.replace(settings, chunking=chunking)

    mixed = ingest(
        [doc], client=engine, embedder=embedder, settings=with_vectors("mix", 0.5), index=engine_index, progress=False
    )
    assert mixed.ok and mixed.chunks == 1
    sentence, header = embedder.embed(["They shiver to keep warm.", "Honey bees"])
    np.testing.assert_allclose(stored_vector(), mixed_vector(sentence[None, :], header, 0.5), atol=1e-3)

    # another weight, then reembed: each is a change of fingerprint, so the document is rewritten
    for vectors, weight in (("mix", 1.0), ("reembed", 1.0)):
        report = ingest(
            [doc],
            client=engine,
            embedder=embedder,
            settings=with_vectors(vectors, weight),
            index=engine_index,
            progress=False,
        )
        assert report.unchanged == 0 and report.chunks == 1
    (joint,) = embedder.embed([embedded_text("Honey bees", "They shiver to keep warm.")])
    np.testing.assert_allclose(stored_vector(), joint, atol=1e-3)
    same = ingest(
        [doc],
        client=engine,
        embedder=embedder,
        settings=with_vectors("reembed", 1.0),
        index=engine_index,
        progress=False,
    )
    assert same.unchanged == 1 and same.chunks == 0


def test_each_document_is_split_in_its_own_language_and_the_splitter_is_in_the_fingerprint(
    engine, embedder, settings, engine_index, tmp_path
):
    import dataclasses

    german = ["Die Frist läuft bis zum 31. März 2026.", "Danach gilt die neue Regel für alle Kunden."]
    chinese = ["今天天气很好。", "我们去公园吧！", "你来吗？"]
    (tmp_path / "de.txt").write_text(" ".join(german), encoding="utf-8")
    (tmp_path / "zh.txt").write_text("".join(chinese), encoding="utf-8")
    # θ = 1: every sentence is a chunk of its own, so the chunks show the sentences.
    split = dataclasses.replace(
        settings,
        chunking=dataclasses.replace(
            settings.chunking, breakpoint="threshold", similarity_threshold=1.0, min_chars=0, language="auto"
        ),
    )
    report = ingest([tmp_path], client=engine, embedder=embedder, settings=split, index=engine_index, progress=False)
    assert report.ok, report.errors

    def texts(doc_id):
        return [c["text"] for c in all_chunks(engine, engine_index) if c["doc_id"] == doc_id]

    assert texts("de.txt") == german
    assert texts("zh.txt") == chinese
    # Pinned to English, the same files are chunked again (another splitter,
    # another fingerprint), and the English model splits at "31.".
    english = dataclasses.replace(split, chunking=dataclasses.replace(split.chunking, language="english"))
    again = ingest([tmp_path], client=engine, embedder=embedder, settings=english, index=engine_index, progress=False)
    assert again.unchanged == 0
    assert texts("de.txt")[0] == "Die Frist läuft bis zum 31."


LONG_TEXT = (
    "Bjørn Wirkola was a Norwegian ski jumper and footballer. He was born at Alta in Finnmark. "
    "He won the Four Hills Tournament three times in a row, from 1967 to 1969. "
    "At the 1966 World Championships he took gold on both the normal and the large hill. "
    "As a footballer he played for Rosenborg and won the Norwegian league with them. "
    "Glaciers carve deep valleys over millennia. The ice moves slowly downhill under its own weight. "
    "Meltwater runs beneath it and wears the bedrock away. "
    "Tokyo is the capital of Japan and its largest city. Its railways carry millions of people each day."
)


def test_an_index_chunked_with_the_paper_theta_is_rechunked_whole_by_the_default(
    engine, embedder, settings, engine_index
):
    import dataclasses

    from chunkrag_core.settings import ChunkingSettings
    from ingest_pipeline.chunker import chunk_documents, document_fingerprint
    from ingest_pipeline.pipeline import ingest_documents, shaping_of
    from ingest_pipeline.sources import plain_document

    settings = dataclasses.replace(settings, chunking=ChunkingSettings())  # the shipped default, by name
    document = plain_document("wirkola", LONG_TEXT, "test")
    old = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, **PAPER_THETA))
    assert shaping_of(old) != shaping_of(settings)  # a changed chunker is a changed fingerprint

    first = ingest_documents([document], client=engine, embedder=embedder, settings=old, index=engine_index)
    before = all_chunks(engine, engine_index)
    assert first.ok and first.chunks == len(before)

    again = ingest_documents([document], client=engine, embedder=embedder, settings=settings, index=engine_index)
    after = all_chunks(engine, engine_index)
    (expected,) = chunk_documents([document], embedder, settings.chunking)
    assert again.ok and again.unchanged == 0 and again.chunks == len(after) == len(expected.chunks)
    # the default makes fewer, longer chunks; those past the new count are deleted, none is left twice
    assert len(after) < len(before) and again.deleted == len(before) - len(after)
    assert [c["text"] for c in after] == [c.text for c in expected.chunks]
    assert [c["_id"] for c in after] == [f"wirkola:{n}" for n in range(len(after))]
    assert "".join(c["lead"] + c["text"] for c in after) == LONG_TEXT
    fingerprint = document_fingerprint(document, shaping_of(settings))
    assert {(c["doc_fingerprint"], c["doc_chunk_count"]) for c in after} == {(fingerprint, len(after))}

    same = ingest_documents([document], client=engine, embedder=embedder, settings=settings, index=engine_index)
    assert same.unchanged == 1 and same.chunks == 0 and all_chunks(engine, engine_index) == after


def test_chinese_is_chunked_within_its_shorter_caps_and_english_as_before(
    engine, embedder, settings, engine_index, tmp_path
):
    from chunkrag_core.settings import Settings
    from tests.support.languages import ENGLISH, SEVEN_TOPICS

    # The default chunking (these tests' settings make each sentence a chunk).
    settings = dataclasses.replace(settings, chunking=Settings().chunking)
    (tmp_path / "zh.txt").write_text(SEVEN_TOPICS, encoding="utf-8")
    (tmp_path / "en.txt").write_text(ENGLISH, encoding="utf-8")
    report = ingest([tmp_path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    assert report.ok, report.errors
    chunks = all_chunks(engine, engine_index)
    chinese = [c["text"] for c in chunks if c["doc_id"] == "zh.txt"]
    english = [c["text"] for c in chunks if c["doc_id"] == "en.txt"]
    assert len(chinese) >= 2 and all(len(text) <= 125 for text in chinese)
    assert "".join(chinese) == SEVEN_TOPICS
    assert any(len(text) > 125 for text in english), english  # the settings' own caps
    # Unchanged, both are left as they are: the fingerprint stored is the one computed.
    again = ingest([tmp_path], client=engine, embedder=embedder, settings=settings, index=engine_index, progress=False)
    assert again.unchanged == 2 and again.chunks == 0
