import json

from ingest_pipeline.sources import Document, Section, Skipped, markdown_sections, read_sources


def by_kind(items):
    items = list(items)
    return [i for i in items if isinstance(i, Document)], [i for i in items if isinstance(i, Skipped)]


def test_bad_files_are_reported_and_the_rest_goes_on(tmp_path):
    (tmp_path / "good.txt").write_text("A fine sentence. Another one.\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    docs, skipped = by_kind(read_sources([tmp_path]))
    assert [d.doc_id for d in docs] == ["good.txt"]
    reasons = {s.origin.rsplit("/", 1)[-1]: s.reason for s in skipped}
    assert reasons["empty.txt"] == "empty file"
    assert "binary" in reasons["blob.txt"]
    assert "not UTF-8" in reasons["latin.txt"] and "0xe9 at offset 3" in reasons["latin.txt"]
    assert "unsupported file type '.csv'" in reasons["table.csv"]


def test_jsonl_bad_lines_are_skipped_with_their_line_number(tmp_path):
    lines = [
        json.dumps({"id": "a", "title": "T", "text": "Alpha text.", "metadata": {"year": 2020}, "lang": "en"}),
        "{not json",
        json.dumps({"title": "no id", "text": "x"}),
        json.dumps({"id": "c", "text": ""}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({"id": 7, "text": "Numeric id."}),
    ]
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    docs, skipped = by_kind(read_sources([path]))
    assert [(d.doc_id, d.title) for d in docs] == [("a", "T"), ("7", "")]
    assert dict(docs[0].metadata) == {"year": 2020, "lang": "en"}
    assert [s.origin.rsplit(":", 1)[-1] for s in skipped] == ["2", "3", "4", "5"]
    assert "malformed JSON" in skipped[0].reason
    assert "no 'id'" in skipped[1].reason


def test_markdown_headings_become_section_paths():
    text = (
        "# Guide\nIntro text.\n## Install\nRun it.\n### Linux\nUse apt.\n## Use\nCall it.\n```\n# not a heading\n```\n"
    )
    sections = markdown_sections(text)
    assert [s.path for s in sections] == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "Linux"),
        ("Guide", "Use"),
    ]
    assert text[sections[0].start : sections[0].end].strip() == "Intro text."
    assert "# not a heading" in text[sections[3].start : sections[3].end]


def test_missing_path_is_reported(tmp_path):
    _, skipped = by_kind(read_sources([tmp_path / "nope"]))
    assert skipped == [Skipped(str(tmp_path / "nope"), "no such file or folder")]


def test_plain_text_is_one_section_covering_everything(tmp_path):
    (tmp_path / "a.txt").write_text("One. Two.", encoding="utf-8")
    docs, _ = by_kind(read_sources([tmp_path / "a.txt"]))
    assert docs[0].sections == (Section((), 0, 9),) and docs[0].title == "a"
