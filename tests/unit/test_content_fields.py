"""Which text fields hold prose: by path (framework metadata, ids, URLs) and
by value (JSON, a URL, an id, a short label), with literal values."""

from ingest_pipeline.content_fields import left_out_by_path, not_prose


def test_framework_metadata_paths_are_left_out():
    # LangChain's and LlamaIndex's "metadata", Haystack's "meta", at any depth.
    assert left_out_by_path("metadata.source") == "metadata"
    assert left_out_by_path("metadata._node_content") == "metadata"
    assert left_out_by_path("meta.abstract") == "metadata"
    assert left_out_by_path("doc.metadata.summary") == "metadata"
    assert left_out_by_path("_node_content") == "internal"
    for name in ("doc_id", "ref_doc_id", "document_id", "url", "source_url", "parent_id", "file_path"):
        assert left_out_by_path(name) == "id", name
    for name in ("body", "content", "text", "summary", "comments.text", "metadata"):
        assert left_out_by_path(name) is None, name


def test_prose_is_told_from_json_urls_ids_and_labels():
    assert not_prose("To rotate an API key, open the console and press Rotate.") is None
    assert not_prose("Rotate keys every month.") is None  # short, but a sentence
    assert not_prose("今天天气很好，我们去公园散步吧。") is None  # no spaces, counted in characters
    assert not_prose('{"id_": "a08c83c0", "text": "To rotate an API key, open the console."}') == "json"
    assert not_prose('  ["rotate", "keys"] ') == "json"
    assert not_prose("https://example.test/rotate?key=1") == "url"
    assert not_prose("a08c83c0-4e78-4491-ab2e-5921a993a6f7") == "id"
    assert not_prose("kb/keys.md") == "id"
    assert not_prose("security") == "short"
    assert not_prose("API keys and rotation") == "short"
    assert not_prose("security\n\nbilling") == "short"  # several labels of one field
    assert not_prose("   ") == "short"


def test_a_long_value_is_judged_by_its_ends_only():
    long = "Word " * 2_000_000 + "end."
    assert not_prose(long) is None
    assert not_prose("{" + "x " * 1_000_000 + "}") == "json"
