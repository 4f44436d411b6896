from chunkrag_core.chunk import MAX_DOC_ID_BYTES, Chunk
from ingest_pipeline.source_fields import SEPARATOR, SourceField, source_doc_id


def test_a_source_field_is_named_by_index_id_and_field():
    assert source_doc_id("kb", "42", "body") == "kb\x1f42\x1fbody"
    assert source_doc_id("kb", "42", "title") != source_doc_id("kb", "42", "body")
    assert source_doc_id("kb-1", "42", "body") != source_doc_id("kb", "1\x1f42", "body")


def test_a_long_or_ambiguous_name_is_hashed_deterministically():
    long_id = "x" * 600
    hashed = source_doc_id("kb", long_id, "body")
    assert hashed == source_doc_id("kb", long_id, "body")
    assert hashed.startswith("sha256" + SEPARATOR)
    assert len(hashed.encode("utf-8")) <= MAX_DOC_ID_BYTES
    # an id holding the separator cannot be confused with another split
    assert source_doc_id("kb", "a\x1fb", "c").startswith("sha256")
    # and the hashed name is a valid chunk doc_id
    Chunk(doc_id=hashed, position=0, text="t", start=0, end=1)


def test_the_document_of_a_field_keeps_offsets_within_the_field_text():
    field = SourceField("kb", "7", "body", "One sentence. Two.", title="Keys")
    document = field.document()
    assert document.doc_id == field.companion_id
    assert document.text == "One sentence. Two."
    assert document.title == "Keys"
    assert dict(document.metadata) == {"source_index": "kb", "source_id": "7", "source_field": "body"}


def test_a_long_field_is_cut_in_parts_at_the_best_break_in_each_parts_last_quarter():
    from ingest_pipeline.source_fields import field_parts
    from ingest_pipeline.sources import Section

    # At most the limit: one section, as every field always was.
    assert field_parts("Short text.", 100) == (Section((), 0, 11),)
    # No paragraph or line break: a sentence end, its mark kept in the part.
    text = "One two three four. " * 10  # 200 characters
    assert field_parts(text.strip(), 100)[0] == Section((), 0, 99)
    # No sentence end: a space; no space at all: exactly at the limit.
    words = "word " * 60
    assert field_parts(words.strip(), 100)[0] == Section((), 0, 99)
    assert field_parts("x" * 250, 100) == (Section((), 0, 100), Section((), 100, 200), Section((), 200, 250))
