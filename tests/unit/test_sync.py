"""The pure parts of a companion index's sync: which fields are text, the
text of a field in a `_source`, the companion documents of a hit, and the
point-in-time page bodies both engines are sent."""

import dataclasses

import numpy as np
import pytest

from chunkrag_core.engines.base import page_body, page_of
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.chunker import chunk_documents, document_fingerprint
from ingest_pipeline.source_fields import PART_CHARS, SourceField, source_doc_id, source_of_doc_id
from ingest_pipeline.sync import (
    MalformedField,
    SyncError,
    companion_name,
    field_documents,
    field_text,
    ingest_groups,
    resolve_fields,
    source_version,
    text_fields,
    title_field_of,
)

MAPPING = {
    "title": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
    "body": {"type": "text", "fields": {"english": {"type": "text"}}},
    "summary": {"type": "match_only_text"},
    "url": {"type": "keyword"},
    "views": {"type": "integer"},
    "author": {"properties": {"bio": {"type": "text"}, "name": {"type": "keyword"}}},
    "comments": {"type": "nested", "properties": {"text": {"type": "text"}}},
}


def test_text_fields_are_the_text_and_match_only_text_paths_not_multi_fields():
    assert text_fields(MAPPING) == ["title", "body", "summary", "author.bio", "comments.text"]


def test_the_title_field_is_the_first_title_like_top_level_field():
    assert title_field_of(MAPPING) == "title"
    assert title_field_of({"headline": {}, "name": {}}) == "name"
    assert title_field_of({"body": {}}) == ""


def test_field_text_reads_strings_arrays_objects_and_dotted_keys():
    source = {
        "body": "One.",
        "tags": ["a", "", "b"],
        "comments": [{"text": "First."}, {"text": None}, {"text": "Second."}],
        "author": {"bio": "Writes."},
        "meta.note": "Flat.",
    }
    assert field_text(source, "body") == "One."
    assert field_text(source, "tags") == "a\n\nb"
    assert field_text(source, "comments.text") == "First.\n\nSecond."
    assert field_text(source, "author.bio") == "Writes."
    assert field_text(source, "meta.note") == "Flat."
    assert field_text(source, "missing") == ""


@pytest.mark.parametrize("value", [3, {"a": "b"}, [True]])
def test_a_field_that_is_not_text_is_malformed(value):
    with pytest.raises(MalformedField, match="'body'"):
        field_text({"body": value}, "body")


def hit(source, **extra):
    return {"_index": "kb", "_id": "7", "_source": source, "_seq_no": 12, "_primary_term": 2, **extra}


def test_each_non_empty_text_field_of_a_hit_is_one_companion_document_stamped_with_its_version():
    documents, errors = field_documents(
        hit({"title": "T", "body": "Text.", "summary": "  "}), ["body", "summary"], "title"
    )
    assert errors == []
    [document] = documents
    assert document.doc_id == SourceField("kb", "7", "body", "Text.", "T").companion_id
    assert document.title == "T" and document.text == "Text."
    assert dict(document.stamp) == {"source_seq_no": 12, "source_primary_term": 2}
    # The stamp is not in the fingerprint: post-search's own document matches.
    plain = SourceField("kb", "7", "body", "Text.", "T").document()
    assert document_fingerprint(document, "s") == document_fingerprint(plain, "s")


def test_without_a_version_the_stamp_is_the_texts_hash():
    stamp = source_version({"_id": "1"}, "Text.")
    assert list(stamp) == ["source_hash"] and len(stamp["source_hash"]) == 32


def test_malformed_fields_are_reported_and_the_others_synced():
    source = {"body": 5, "notes": "Fine."}
    documents, errors = field_documents(hit(source), ["body", "notes"], "")
    assert [d.text for d in documents] == ["Fine."]
    assert [e.split(":")[0] for e in errors] == ["kb/7#body"]
    assert "int, not text" in errors[0]


def test_a_field_over_a_million_characters_is_synced_in_parts_each_ingested_alone():
    paragraph = "A sentence of the long report. " * 30 + "\n\n"  # 932 characters
    huge = paragraph * (PART_CHARS // len(paragraph) + 40)
    assert len(huge) > PART_CHARS
    documents, errors = field_documents(hit({"body": huge, "notes": "Fine."}), ["body", "notes"], "")
    assert errors == [] and [d.text for d in documents] == [huge, "Fine."]
    parts = documents[0].sections
    assert len(parts) == 2 and all(s.end - s.start <= PART_CHARS for s in parts)
    # Cut at the last paragraph break before a million characters; offsets
    # still count within the whole field.
    assert (parts[0].start, parts[0].end) == (0, (PART_CHARS // len(paragraph)) * len(paragraph) - 2)
    assert huge[parts[0].end : parts[1].start] == "\n\n" and parts[1].end == len(huge)
    # Only the large field is ingested on its own.
    assert [[d.text[:5] for d in group] for group in ingest_groups(documents)] == [["Fine."], [huge[:5]]]


def test_a_malformed_title_skips_the_document_with_its_reason():
    documents, errors = field_documents(hit({"title": {"x": 1}, "body": "A."}), ["body"], "title")
    assert documents == [] and "title" in errors[0]


class Embedder:
    def embed(self, texts):
        return np.eye(len(texts), 8, dtype=np.float32) + 0.01


def test_the_stamp_reaches_every_chunks_metadata():
    [document], _ = field_documents(hit({"body": "One. Two."}), ["body"], "")
    [chunked] = chunk_documents([document], Embedder(), ChunkingSettings(headers="none"))
    assert all(c.metadata["source_seq_no"] == 12 and c.metadata["source_id"] == "7" for c in chunked.chunks)
    assert chunked.fingerprint == document_fingerprint(dataclasses.replace(document, stamp={}), "")


def test_page_bodies_read_in_index_order_with_versions_and_pages_end_short():
    body = page_body("P", keep_alive="1m", size=2, search_after=(4,), source=["body"])
    assert body == {
        "size": 2,
        "pit": {"id": "P", "keep_alive": "1m"},
        "sort": [{"_shard_doc": "asc"}],
        "seq_no_primary_term": True,
        "track_total_hits": False,
        "_source": ["body"],
        "search_after": [4],
    }
    assert "search_after" not in page_body("P", keep_alive="1m", size=2, search_after=None, source=True)
    full = page_of({"pit_id": "Q", "hits": {"hits": [{"sort": [1]}, {"sort": [2]}]}}, "P", 2)
    assert (full.pit_id, full.search_after) == ("Q", (2,))
    last = page_of({"hits": {"hits": [{"sort": [3]}]}}, "P", 2)
    assert (last.pit_id, last.search_after, len(last.hits)) == ("P", None, 1)


def test_the_default_companion_name():
    assert companion_name("kb-existing") == "kb-existing-chunkrag"


def test_sync_every_reports_a_failed_pass_and_tries_the_next(monkeypatch, capsys):
    import chunkrag_cli.main as cli
    import chunkrag_core.providers
    import ingest_pipeline.sync as sync
    from chunkrag_core.engines.errors import EngineUnavailable
    from ingest_pipeline.sync import SyncReport

    passes = iter([EngineUnavailable("node away", engine="Elasticsearch"), "report", KeyboardInterrupt()])
    report = SyncReport("kb", "kb-chunkrag", 2, 2, 1, 1, 0, (), 0.1, True, text_fields=("body",))

    def one_pass(*args, **kwargs):
        outcome = next(passes)
        if isinstance(outcome, BaseException):
            raise outcome
        return report

    monkeypatch.setattr(cli, "_backend", lambda settings: object())
    monkeypatch.setattr(chunkrag_core.providers, "make_embedder", lambda settings: object())
    monkeypatch.setattr(sync, "sync_index", one_pass)
    monkeypatch.setattr(cli.time, "sleep", lambda seconds: None)
    assert cli.main(["sync", "kb", "--every", "5"]) == 130
    out, err = capsys.readouterr()
    assert "this pass failed: node away; next one in 5 s" in err
    assert "2 documents read, 2 text fields: 1 unchanged, 1 chunked again" in out


def test_sync_shows_the_documents_read_page_by_page_unless_told_not_to(monkeypatch, capsys):
    import chunkrag_cli.main as cli
    import chunkrag_core.providers
    import ingest_pipeline.sync as sync
    from ingest_pipeline.sync import SyncReport

    def report(read: int) -> SyncReport:
        return SyncReport("kb", "kb-chunkrag", read, read, read, 0, 0, (), 0.1, read == 730, text_fields=("body",))

    def one_pass(*args, on_page, **kwargs):
        on_page(report(500))
        on_page(report(730))
        return report(730)

    monkeypatch.setattr(cli, "_backend", lambda settings: object())
    monkeypatch.setattr(chunkrag_core.providers, "make_embedder", lambda settings: object())
    monkeypatch.setattr(sync, "sync_index", one_pass)
    assert cli._with_progress(lambda on_page: one_pass(on_page=on_page), True, "sync kb") == report(730)
    drawn = capsys.readouterr().err
    assert "sync kb" in drawn and "730doc" in drawn.replace(" ", "")
    assert cli.main(["sync", "kb", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "730 documents read" in out and err == ""


@pytest.mark.parametrize(
    ("index", "doc_id", "name"),
    [("kb", "7", "body"), ("kb", "a/b c", "author.bio"), ("sha256", "x", "y"), ("kb", "", "body")],
)
def test_a_companion_doc_id_names_its_source_field(index, doc_id, name):
    assert source_of_doc_id(source_doc_id(index, doc_id, name)) == (index, doc_id, name)


@pytest.mark.parametrize(
    "companion_id",
    [source_doc_id("kb", "x" * 600, "body"), source_doc_id("kb", "a\x1fb", "body"), "notes/readme.md", "a\x1fb"],
)
def test_a_hashed_or_foreign_doc_id_names_nothing(companion_id):
    assert source_of_doc_id(companion_id) is None


class MappingOnly:
    """resolve_fields' two questions, answered from a literal mapping."""

    def __init__(self, properties):
        self.properties = properties

    def index_exists(self, index):
        return True

    def mapping_properties(self, index):
        return self.properties


def test_sync_leaves_out_framework_metadata_unless_named():
    llamaindex = {
        "content": {"type": "text"},
        "metadata": {
            "properties": {
                "_node_content": {"type": "text"},
                "source": {"type": "text"},
                "doc_id": {"type": "keyword"},
            }
        },
        "url": {"type": "text"},
    }
    assert resolve_fields(MappingOnly(llamaindex), "kb", None, None) == (("content",), "")
    assert resolve_fields(MappingOnly(llamaindex), "kb", ["metadata.source"], None) == (("metadata.source",), "")
    with pytest.raises(SyncError, match="passed over as metadata, ids or URLs: metadata._node_content"):
        resolve_fields(MappingOnly({"metadata": llamaindex["metadata"]}), "kb", None, None)
