"""The companion's candidates rebuilt from the hit's own text: a chunk made
of the field text between its stored offsets, with the lead, header, title
and metadata the chunker gives that field's document, so that the
engine-scored path costs the companion one request; and the second request
(the candidates' ``_source``) still made where a rebuilt chunk could
differ. Literal texts and offsets; a backend double counts the requests
(the real nodes are in tests/integration/test_post_search_companion.py)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from chunkrag_core.engines import schema
from chunkrag_core.settings import ChunkingSettings, Settings
from ingest_pipeline.chunker import chunk_documents, document_fingerprint
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.source_fields import SourceField
from ingest_pipeline.sources import Section
from search_extension.companion import CompanionsFirst
from search_extension.companion_scoring import (
    SIGNAL_FIELDS,
    ChunkSignal,
    engine_scored,
    rebuilt_candidates,
    rebuilt_chunk,
)
from search_extension.post_search import PassageScore

TEXT = "Rotate the key in the console.  Old keys work for a day.\n\nRevoked keys stop at once."
FIELD = SourceField("kb", "7", "body", TEXT, title="API keys")


def _row(position: int, start: int | None, end: int | None, sentences: int | None = 1) -> ChunkSignal:
    doc_id = FIELD.companion_id
    return ChunkSignal(
        f"{doc_id}:{position}", doc_id, position, "fp", 0.75, 1.0, None, start, end, sentences, "kb-chunkrag"
    )


def test_a_chunk_is_the_fields_text_between_its_offsets_with_the_lead_from_the_previous_chunks_end():
    document = FIELD.document()
    chunk = rebuilt_chunk(document, _row(1, 32, 56), 30, "title+section", score=0.5, stage_scores={"knn": 0.75})
    assert chunk is not None
    assert (chunk.text, chunk.lead) == ("Old keys work for a day.", "  ")
    assert (chunk.doc_id, chunk.position, chunk.start, chunk.end, chunk.sentence_count) == (
        "kb\x1f7\x1fbody",
        1,
        32,
        56,
        1,
    )
    assert (chunk.title, chunk.section, chunk.header, chunk.scale, chunk.index) == (
        "API keys",
        (),
        "API keys",
        0,
        "kb-chunkrag",
    )
    assert dict(chunk.metadata) == {"source_index": "kb", "source_id": "7", "source_field": "body"}
    assert (chunk.score, dict(chunk.stage_scores), chunk.vector) == (0.5, {"knn": 0.75}, None)
    first = rebuilt_chunk(document, _row(0, 0, 30), 0, "none", score=0.1, stage_scores={})
    assert first is not None and (first.text, first.lead, first.header) == ("Rotate the key in the console.", "", "")


def test_a_chunk_whose_offsets_are_missing_or_outside_the_text_or_a_section_is_not_rebuilt():
    document = FIELD.document()
    kwargs = {"score": 0.0, "stage_scores": {}}
    assert rebuilt_chunk(document, _row(0, None, 30), 0, "title", **kwargs) is None
    assert rebuilt_chunk(document, _row(0, 0, 30, None), 0, "title", **kwargs) is None
    assert rebuilt_chunk(document, _row(0, 0, len(TEXT) + 1), 0, "title", **kwargs) is None
    assert rebuilt_chunk(document, _row(1, 20, 40), 30, "title", **kwargs) is None  # before the previous end
    two = replace(document, sections=(Section(("A",), 0, 56), Section(("B",), 58, len(TEXT))))
    assert rebuilt_chunk(two, _row(1, 32, 70), 30, "title", **kwargs) is None  # across two sections
    inside = rebuilt_chunk(two, _row(2, 58, len(TEXT)), 56, "title+section", **kwargs)
    assert inside is not None and (inside.section, inside.header, inside.lead) == (("B",), "API keys > B", "\n\n")


class _Words:
    """An embedder double: a fixed vector per text (from its hash)."""

    def embed(self, texts):
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) for t in texts]
        return np.asarray([r.astype(np.float32) / 255.0 + 0.1 for r in rows]).reshape(len(texts), 16)


@pytest.mark.parametrize("headers", ["title+section", "title", "none"])
def test_rebuilt_candidates_are_the_chunkers_chunks_of_the_field_but_for_the_vector_and_the_sync_stamp(headers):
    """The chunker's own chunks of a field's document (with a sync stamp, as
    `chunkrag sync` writes them) against the candidates rebuilt from their
    offsets and sentence counts: every field equal but the vector, and the
    metadata but the stamp."""
    text = " ".join(f"Sentence number {i} says something about keys and locks." for i in range(40))
    field = SourceField("kb", "9", "body", text + "\n\nA closing paragraph. It ends here.", title="Locks")
    settings = ChunkingSettings(headers=headers, max_chars=300)
    document = replace(field.document(), stamp={"source_seq_no": 4, "source_primary_term": 1})
    (made,) = chunk_documents([document], _Words(), settings)
    assert len(made.chunks) > 3
    rows = [
        ChunkSignal(c.chunk_id, c.doc_id, c.position, "fp", 0.5, 0.0, None, c.start, c.end, c.sentence_count, "kb-c")
        for c in made.chunks
    ]
    best = [[(row, PassageScore(0.5, 0.0, 0.5, 0.0)) for row in reversed(rows)]]
    (rebuilt,) = rebuilt_candidates({field.companion_id: field.document()}, {field.companion_id: rows}, best, headers)
    for ours, theirs in zip(rebuilt, reversed(made.chunks)):
        assert ours == theirs  # doc id, position, text, offsets, title, section, sentences, header, scale
        assert ours.lead == theirs.lead
        assert {**ours.metadata, **document.stamp} == dict(theirs.metadata)
        assert ours.vector is None and ours.index == "kb-c"


def test_one_candidate_that_cannot_be_rebuilt_makes_none_be_rebuilt():
    rows = [_row(0, 0, 30), _row(1, None, None)]
    best = [[(rows[1], PassageScore(0.5, 0.0, 0.5, 0.0))]]
    documents = {FIELD.companion_id: FIELD.document()}
    assert rebuilt_candidates(documents, {FIELD.companion_id: rows}, best, "title") is None
    rows = [_row(0, None, None), _row(1, 32, 56)]  # the previous chunk's end is missing: no lead
    assert rebuilt_candidates(documents, {FIELD.companion_id: rows}, best, "title") is None


# --- the requests the companion gets ------------------------------------------------------

FINGERPRINT = document_fingerprint(FIELD.document(), shaping_of(Settings()))


class Companion:
    """A backend double holding the companion's three chunks of FIELD."""

    CHUNKS = ((0, 30, 1), (32, 56, 1), (58, len(TEXT), 1))

    def __init__(self):
        self.requests: list[list[dict]] = []

    def _fields(self, position: int) -> dict:
        start, end, sentences = self.CHUNKS[position]
        return {
            "doc_id": [FIELD.companion_id],
            "position": [position],
            "doc_fingerprint": [FINGERPRINT],
            "start": [start],
            "end": [end],
            "sentence_count": [sentences],
        }

    def msearch(self, searches):
        self.requests.append(searches)
        answers = []
        for body in searches[1::2]:
            if "knn" in body:
                assert body["docvalue_fields"] == list(SIGNAL_FIELDS)
                hits = [{"_index": "kb-chunkrag", "_score": 0.9 - p / 10, "fields": self._fields(p)} for p in range(3)]
            elif "ids" in body.get("query", {}):
                hits = [self._hit(int(i.rsplit(":", 1)[1])) for i in body["query"]["ids"]["values"]]
            else:
                hits = [{"_index": "kb-chunkrag", "_score": 1.0, "fields": self._fields(1)}]
            answers.append({"hits": {"hits": hits}, "status": 200})
        return {"responses": answers}

    def _hit(self, position: int) -> dict:
        start, end, sentences = self.CHUNKS[position]
        source = {
            "doc_id": FIELD.companion_id,
            "position": position,
            "start": start,
            "end": end,
            "sentence_count": sentences,
            "title": FIELD.title,
            "section": [],
            "text": TEXT[start:end],
            "header": FIELD.title,
            "lead": TEXT[self.CHUNKS[position - 1][1] if position else 0 : start],
            "scale": 0,
            "doc_fingerprint": FINGERPRINT,
            "metadata": {**FIELD.document().metadata, "source_seq_no": 3, "source_primary_term": 1},
        }
        vector = {"fields": {schema.VECTOR: [[1.0, 0.0]]}}
        return {"_index": "kb-chunkrag", "_id": f"{FIELD.companion_id}:{position}", "_source": source, **vector}


# One query over FIELD's chunks, as both ways of scoring take it.
SCORING = {
    "query": "rotate the key",
    "query_vector": np.array([1.0, 0.0], dtype=np.float32),
    "weights": (0.5, 0.5),
    "max_passages": 2,
}


def _scored(cluster, *, with_vectors=False, settings=Settings()):
    return CompanionsFirst(cluster, None, settings=settings).scored([[FIELD]], with_vectors=with_vectors, **SCORING)


def test_the_candidates_come_from_one_request_and_equal_the_fetched_ones_but_for_the_stamp():
    one, two = Companion(), Companion()
    rebuilt = _scored(one)
    fetched = engine_scored(
        two, [[FIELD]], {"kb": "kb-chunkrag"}, {FIELD.companion_id: FINGERPRINT}, with_vectors=False, **SCORING
    ).scored
    assert (len(one.requests), len(two.requests)) == (1, 2)
    assert rebuilt is not None and rebuilt.capped == fetched.capped == (1,)
    assert [c.chunk_id for c in rebuilt.best[0]] == [c.chunk_id for c in fetched.best[0]]
    for ours, theirs in zip(rebuilt.best[0], fetched.best[0]):
        assert ours == theirs and ours.lead == theirs.lead and ours.index == theirs.index
        assert (ours.score, dict(ours.stage_scores)) == (theirs.score, dict(theirs.stage_scores))
        # The stored chunk also carries the version the sync read (not shown in any response).
        assert dict(ours.metadata) == dict(FIELD.document().metadata)
        assert {**ours.metadata, "source_seq_no": 3, "source_primary_term": 1} == dict(theirs.metadata)


def test_the_candidates_are_fetched_when_their_vectors_are_needed_or_the_model_wrote_context():
    cluster = Companion()
    scored = _scored(cluster, with_vectors=True)
    assert len(cluster.requests) == 2 and "ids" in cluster.requests[1][1]["query"]
    assert scored is not None and all(c.vector is not None for c in scored.best[0])
    for context in ({"summaries": True}, {"llm_titles": True}, {"sectioning": "llm"}):
        settings = Settings()
        settings = replace(settings, chunking=replace(settings.chunking, **context))
        cluster = Companion()
        # The context changes the fingerprint too; what matters here is the request count.
        fingerprint = document_fingerprint(FIELD.document(), shaping_of(settings))
        cluster._fields = lambda p, f=cluster._fields, fp=fingerprint: {**f(p), "doc_fingerprint": [fp]}
        cluster._hit = lambda p, h=cluster._hit, fp=fingerprint: _with_fingerprint(h(p), fp)
        assert _scored(cluster, settings=settings) is not None
        assert len(cluster.requests) == 2, context


def _with_fingerprint(hit: dict, fingerprint: str) -> dict:
    return {**hit, "_source": {**hit["_source"], "doc_fingerprint": fingerprint}}
