"""Distributed ingest without a cluster: a batch's outcome, a malformed
document skipped alone, refusals that may pass raised for a retry, the
messages between client and worker, the report added up over batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chunkrag_core.engines.errors import EngineUnavailable
from chunkrag_core.settings import ChunkingSettings, Settings
from ingest_pipeline.pipeline import BatchNotWritten, BatchOutcome, ingest_batch, report_of_batches
from ingest_pipeline.sources import Skipped, plain_document
from workers.codec import (
    CodecError,
    decode_chunking,
    decode_document,
    decode_outcome,
    encode_chunking,
    encode_document,
    encode_outcome,
)
from workers.tasks import _decoded


class Embedder:
    """Each text a unit vector of its own; a text holding POISON breaks it
    the way a malformed document breaks a real model (not a service error)."""

    def embed(self, texts):
        if any("POISON" in t for t in texts):
            raise ValueError("cannot embed this text")
        return np.array([np.eye(4)[len(t) % 4] for t in texts], dtype=np.float32)


class Backend:
    """Holds nothing before the run; answers each bulk action with ``status``."""

    def __init__(self, status: int | None = 201, fail_on=None):
        self.actions: list[dict] = []
        self.status = status
        self.fail_on = fail_on

    def search(self, index, body):
        return {"aggregations": {"docs": {"buckets": []}}}

    def bulk(self, actions, **_options):
        for action in actions:
            self.actions.append(action)
            if self.fail_on is not None and self.fail_on(action):
                yield False, {action["_op_type"]: {"_id": action["_id"], "status": self.status, "error": "no"}}
            else:
                yield True, {action["_op_type"]: {"_id": action["_id"], "status": 201}}


SETTINGS = dataclasses.replace(Settings(), chunking=ChunkingSettings(headers="title"))


def docs(*texts: str):
    return [plain_document(f"d{i}", text, origin=f"d{i}", title=f"T{i}") for i, text in enumerate(texts)]


def test_a_batch_is_chunked_written_and_counted():
    backend = Backend()
    outcome = ingest_batch(
        docs("One sentence here. Another one there.", "A third document."),
        client=backend,
        embedder=Embedder(),
        settings=SETTINGS,
        index="i",
    )
    assert outcome.documents == 2 and outcome.unchanged == 0 and not outcome.errors and not outcome.skipped
    assert outcome.sentences == sum(outcome.sentence_counts) == 3
    assert len(outcome.lengths) == len(backend.actions) == 2
    assert {a["_id"].split(":")[0] for a in backend.actions} == {"d0", "d1"}


def test_a_malformed_document_is_skipped_and_its_batch_goes_on():
    backend = Backend()
    outcome = ingest_batch(
        docs("Good text. More good text.", "POISON in here.", "Also fine."),
        client=backend,
        embedder=Embedder(),
        settings=SETTINGS,
        index="i",
        rejected=[Skipped("x.jsonl:3", "not a valid document: text missing")],
    )
    assert outcome.documents == 4
    assert [s.origin for s in outcome.skipped] == ["x.jsonl:3", "d1"]
    assert "could not be chunked: ValueError: cannot embed this text" in outcome.skipped[1].reason
    assert {a["_id"].split(":")[0] for a in backend.actions} == {"d0", "d2"}


def test_a_service_error_is_raised_not_blamed_on_a_document():
    class Down(Embedder):
        def embed(self, texts):
            raise EngineUnavailable("cluster gone", engine="Elasticsearch")

    with pytest.raises(EngineUnavailable):
        ingest_batch(docs("Some text."), client=Backend(), embedder=Down(), settings=SETTINGS, index="i")


@pytest.mark.parametrize("status", [503, 429, None, "N/A"])
def test_refusals_that_may_pass_raise_for_a_retry(status):
    backend = Backend(status=status, fail_on=lambda action: action["_id"] == "d0:0")
    with pytest.raises(BatchNotWritten, match="1 of 2 writes refused"):
        ingest_batch(docs("First.", "Second."), client=backend, embedder=Embedder(), settings=SETTINGS, index="i")


def test_refusals_for_good_are_reported_as_errors():
    backend = Backend(status=400, fail_on=lambda action: action["_id"] == "d0:0")
    outcome = ingest_batch(docs("First.", "Second."), client=backend, embedder=Embedder(), settings=SETTINGS, index="i")
    assert len(outcome.errors) == 1 and "d0:0: 400" in outcome.errors[0]


def test_documents_chunking_and_outcomes_survive_the_message():
    [document] = docs("Hello there. General Kenobi.")
    document = dataclasses.replace(
        document, metadata={"k": [1, 2]}, origin="a.md", summary="S", stamp={"source_seq_no": 3}
    )
    assert decode_document(encode_document(document)) == document
    chunking = ChunkingSettings(scales=(128, 512), headers="none", summaries=True)
    assert decode_chunking(encode_chunking(chunking)) == chunking
    outcome = BatchOutcome(3, 1, 5, (10, 20), (1, 2), 4, 0, (Skipped("o", "r"),), ("e",), {"context_calls": 2})
    assert decode_outcome(encode_outcome(outcome)) == outcome


@pytest.mark.parametrize(
    "data",
    [
        "text",
        {"doc_id": "a", "title": "t"},
        {"doc_id": "a", "title": "t", "text": "abc", "sections": [[[], 0, 9]]},
        {"doc_id": "", "title": "t", "text": "abc", "sections": []},
        {"doc_id": "a", "title": 3, "text": "abc", "sections": []},
    ],
)
def test_a_document_that_cannot_be_decoded_is_refused_with_a_reason(data):
    with pytest.raises(CodecError, match="not a valid document|expected a document"):
        decode_document(data)


def test_undecodable_documents_become_skips_the_rest_decodes():
    good = encode_document(docs("Fine.")[0])
    decoded, rejected = _decoded([good, {"doc_id": "b", "origin": "b.jsonl:2"}, 7])
    assert [d.doc_id for d in decoded] == ["d0"]
    assert [s.origin for s in rejected] == ["b.jsonl:2", "document 3 of its batch"]


def test_bad_chunking_settings_are_a_codec_error():
    with pytest.raises(CodecError):
        decode_chunking({**encode_chunking(ChunkingSettings()), "headers": "everything"})


def test_the_report_adds_the_batches_up():
    first = BatchOutcome(2, 0, 4, (100, 300), (1, 3), 0, 1, (), (), {"context_calls": 1, "context_documents": 1})
    second = BatchOutcome(1, 1, 0, (), (), 2, 0, (Skipped("o", "r"),), ("w",), {})
    report = report_of_batches("i", [first, second], [Skipped("f", "unreadable")], ["lost batch"], 1.23456)
    assert (report.documents, report.unchanged, report.sentences, report.chunks) == (3, 1, 4, 2)
    assert (report.deleted, report.scaled_chunks, report.context_calls, report.seconds) == (1, 2, 1, 1.235)
    assert [str(s) for s in report.skipped] == ["f: unreadable", "o: r"]
    assert report.errors == ("w", "lost batch") and not report.ok
    assert report.chunk_lengths.p50 == 200


def test_scales_and_headers_from_the_message_shape_the_batch():
    backend = Backend()
    chunking = decode_chunking(encode_chunking(ChunkingSettings(headers="title", scales=(128,))))
    text = " ".join(f"Sentence number {n} says something about topic {n % 3}." for n in range(30))
    outcome = ingest_batch(
        docs(text),
        client=backend,
        embedder=Embedder(),
        settings=dataclasses.replace(SETTINGS, chunking=chunking),
        index="i",
    )
    scaled = [a for a in backend.actions if "@128" in a["_id"]]
    assert outcome.scaled_chunks == len(scaled) > 0
    assert all(a["_source"]["header"].startswith("T0") for a in backend.actions)
