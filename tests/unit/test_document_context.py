"""Document context written by the chat model: semantic sectioning (pure
parts with literal inputs), titles and summaries, the answer cache, and the
header a summary goes into. The model is a scripted double."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunkrag_core.providers.chat import ChatError, ChatResponse
from chunkrag_core.settings import ChunkingSettings, Settings, SettingsError
from ingest_pipeline.chunker import chunk_documents
from ingest_pipeline.context_cache import ContextCache
from ingest_pipeline.document_context import (
    ContextFailure,
    add_context,
    add_document_context,
    clean_summary,
    clean_written_title,
    wants_context,
)
from ingest_pipeline.headers import chunk_header
from ingest_pipeline.pipeline import shaping_of
from ingest_pipeline.sectioning import (
    InvalidSections,
    Line,
    document_lines,
    parse_sections,
    plan_sections,
    section_offsets,
    sections_at_offsets,
    valid_offsets,
    validate_sections,
    window_end,
)
from ingest_pipeline.sources import Section, markdown_document, plain_document
from tests.support.chat_doubles import ScriptedChat

TEXT = "Bees make honey.\nThey live in hives.\n\n  Tokyo is large.\nIt has many trains.\n"


def answers(*texts: str) -> ScriptedChat:
    return ScriptedChat(*(ChatResponse(text=t) for t in texts))


# --- lines and windows --------------------------------------------------------


def test_lines_are_the_non_blank_lines_with_their_offsets():
    lines = document_lines(TEXT)
    assert lines == (Line(0, 16), Line(17, 36), Line(40, 55), Line(56, 75))
    assert [TEXT[line.start : line.end] for line in lines] == [
        "Bees make honey.",
        "They live in hives.",
        "Tokyo is large.",
        "It has many trains.",
    ]


def test_a_line_over_the_limit_becomes_its_sentences():
    text = "One sentence here. Another one there. A third."
    assert document_lines(text, max_line_chars=1000) == (Line(0, 46),)
    assert [text[line.start : line.end] for line in document_lines(text, max_line_chars=20)] == [
        "One sentence here.",
        "Another one there.",
        "A third.",
    ]


def test_a_window_holds_the_lines_that_fit_and_at_least_one():
    lines = [Line(0, 10), Line(11, 21), Line(22, 32), Line(33, 83)]
    assert window_end(lines, 0, max_chars=25) == 2  # 10 + 10 fit, + 10 does not
    assert window_end(lines, 0, max_chars=30) == 3
    assert window_end(lines, 3, max_chars=25) == 4  # one line longer than the window
    assert window_end(lines, 1, max_chars=1000) == 4


# --- the answer ---------------------------------------------------------------


def test_rows_in_the_usual_forms_are_parsed_and_chatter_is_passed_over():
    answer = 'Here are the sections:\n0: Bees\n[2] Tokyo  \n- Line 3 - **Trains**\n2023 was a good year\n4. "Food"\n'
    assert parse_sections(answer) == [(0, "Bees"), (2, "Tokyo"), (3, "Trains"), (4, "Food")]
    assert parse_sections("I cannot split this document.") == []
    assert parse_sections("**0**: Bees\nLines 2-3: `Tokyo`\n3 - Trains") == [(0, "Bees"), (2, "Tokyo"), (3, "Trains")]


def test_validation_names_what_is_wrong():
    validate_sections([(5, "A"), (7, "B")], 5, 10)
    with pytest.raises(InvalidSections, match="no '<line>: <title>' rows"):
        validate_sections([], 5, 10)
    with pytest.raises(InvalidSections, match="line 10 is outside lines 5 to 9"):
        validate_sections([(5, "A"), (10, "B")], 5, 10)
    with pytest.raises(InvalidSections, match=r"must increase, got \[5, 8, 7\]"):
        validate_sections([(5, "A"), (8, "B"), (7, "C")], 5, 10)
    with pytest.raises(InvalidSections, match="must increase"):
        validate_sections([(5, "A"), (5, "B")], 5, 10)
    with pytest.raises(InvalidSections, match="must start at line 5, got 6"):
        validate_sections([(6, "A")], 5, 10)


def test_windows_overlap_at_the_last_section_and_merge():
    lines = [Line(i * 11, i * 11 + 10) for i in range(5)]
    script = {(0, 2): [(0, "A"), (1, "B")], (1, 3): [(1, "B"), (2, "C")], (2, 4): [(2, "C")], (4, 5): [(4, "D")]}
    asked = []

    def propose(first, end):
        asked.append((first, end))
        return script[(first, end)]

    assert plan_sections(lines, propose, max_chars=25) == [(0, "A"), (1, "B"), (2, "C"), (4, "D")]
    # The last section of a window opens the next one; a window that is one
    # section is taken whole.
    assert asked == [(0, 2), (1, 3), (2, 4), (4, 5)]


def test_a_last_section_in_the_first_half_of_a_window_is_not_carried_over():
    lines = [Line(i * 11, i * 11 + 10) for i in range(10)]
    script = {(0, 4): [(0, "A"), (1, "B")], (4, 8): [(4, "C"), (6, "D")], (6, 10): [(6, "D"), (9, "E")]}
    asked = []

    def propose(first, end):
        asked.append((first, end))
        return script[(first, end)]

    # Window 0-3 ends with B at line 1, before its middle (2): taken whole.
    assert plan_sections(lines, propose, max_chars=40) == [(0, "A"), (1, "B"), (4, "C"), (6, "D"), (9, "E")]
    assert asked == [(0, 4), (4, 8), (6, 10)]


def test_sections_tile_the_text_exactly():
    lines = document_lines(TEXT)
    offsets = section_offsets(lines, [(0, "Bees"), (2, "Tokyo")])
    assert offsets == [(0, "Bees"), (40, "Tokyo")]
    sections = sections_at_offsets(TEXT, offsets)
    assert sections == (Section(("Bees",), 0, 40), Section(("Tokyo",), 40, 76))
    assert "".join(TEXT[s.start : s.end] for s in sections) == TEXT
    # Leading whitespace belongs to the first section, which starts at 0.
    assert section_offsets(document_lines("\n\n  Hi.\nYo."), [(0, "A"), (1, "B")]) == [(0, "A"), (8, "B")]


def test_cached_offsets_are_checked():
    assert valid_offsets(TEXT, [[0, "Bees"], [40, "Tokyo"]])
    assert not valid_offsets(TEXT, [])
    assert not valid_offsets(TEXT, [[3, "Bees"]])  # not from 0
    assert not valid_offsets(TEXT, [[0, "A"], [40, "B"], [40, "C"]])
    assert not valid_offsets(TEXT, [[0, "A"], [76, "B"]])  # past the text
    assert not valid_offsets(TEXT, [[0, ""]])
    assert not valid_offsets(TEXT, [["0", "A"]])
    assert not valid_offsets(TEXT, {"0": "A"})


def test_titles_and_summaries_are_cleaned():
    assert clean_written_title('\n**Title:** "Keeping bees"\nIt is about bees.') == "Keeping bees"
    assert clean_written_title("   ") == ""
    assert clean_summary("Summary: This document covers\nbees.  ") == "This document covers bees."
    # Cut at the last sentence that fits in 100 characters.
    assert clean_summary("This document is long. " * 30, max_chars=100) == " ".join(["This document is long."] * 4)
    assert clean_summary("word " * 30, max_chars=22) == "word word word word"


# --- the stage ----------------------------------------------------------------

SECTIONS_AND_SUMMARY = ChunkingSettings(sectioning="llm", summaries=True)


def test_a_document_without_headings_gets_sections_and_a_summary(tmp_path):
    model = answers("This document is about bees and Tokyo.", "0: Bees\n2: Tokyo")
    document = plain_document("d", TEXT, "test", title="notes")
    outcome = add_document_context(
        document, SECTIONS_AND_SUMMARY, model=model, model_name="m", cache=ContextCache(tmp_path)
    )
    assert outcome.calls == 2 and outcome.cache_hits == 0 and outcome.fallbacks == ()
    assert outcome.document.sections == (Section(("Bees",), 0, 40), Section(("Tokyo",), 40, 76))
    assert outcome.document.summary == "This document is about bees and Tokyo."
    assert outcome.document.text == TEXT and outcome.document.title == "notes"
    assert document.sections == (Section((), 0, 76),)  # the input is not changed
    assert "Document title: notes" in model.requests[0].messages[-1].content
    assert "[2] Tokyo is large." in model.requests[1].messages[-1].content


def test_an_unusable_answer_is_retried_once_with_the_reason_then_falls_back():
    model = answers("I think it is about bees.", "1: Bees\n0: Tokyo")
    document = plain_document("d", TEXT, "test", title="notes")
    outcome = add_document_context(
        document, ChunkingSettings(sectioning="llm"), model=model, model_name="m", cache=None
    )
    assert outcome.calls == 2
    assert outcome.document.sections == document.sections
    assert outcome.fallbacks == (
        "sections: line numbers must increase, got [1, 0] (after one retry); kept the document's own",
    )
    retry = model.requests[1].messages
    assert retry[-2].content == "I think it is about bees."
    assert "no '<line>: <title>' rows" in retry[-1].content


def test_a_retried_answer_that_is_valid_is_used():
    model = answers("0: Bees\n9: Tokyo", "0: Bees\n2: Tokyo")
    outcome = add_document_context(
        plain_document("d", TEXT, "test"), ChunkingSettings(sectioning="llm"), model=model, model_name="m", cache=None
    )
    assert outcome.calls == 2 and outcome.fallbacks == ()
    assert "line 9 is outside lines 0 to 3" in model.requests[1].messages[-1].content
    assert [s.path for s in outcome.document.sections] == [("Bees",), ("Tokyo",)]


def test_a_long_document_is_sectioned_in_windows_that_meet_at_a_section():
    text = "\n".join("word " * 99 + f"w{i:03d}" for i in range(20))  # 20 lines of 499 characters
    model = answers("0: First\n10: Second", "10: Second\n15: Third")
    outcome = add_document_context(
        plain_document("d", text, "test"), ChunkingSettings(sectioning="llm"), model=model, model_name="m", cache=None
    )
    prompts = [r.messages[-1].content for r in model.requests]
    assert "(lines 0 to 15)" in prompts[0] and "(lines 10 to 19)" in prompts[1]  # 16 x 499 fit in 8,000
    assert [(s.path, s.start) for s in outcome.document.sections] == [
        (("First",), 0),
        (("Second",), 5000),
        (("Third",), 7500),
    ]
    assert outcome.document.sections[-1].end == len(text)


def test_only_what_is_asked_runs():
    headed = markdown_document(
        "h.md", "# Bees\n\nBees make honey.\n\n## Winter\n\nThey shiver.\n", "test", fallback_title="h"
    )
    untitled = plain_document("u", TEXT, "test", title="")
    titled = plain_document("t", TEXT, "test", title="Given")
    settings = ChunkingSettings(llm_titles=True, sectioning="llm")
    # A document with headings keeps them, one with a title keeps it: no call.
    for document in (headed, titled):
        outcome = add_document_context(
            document, ChunkingSettings(llm_titles=True), model=answers(), model_name="m", cache=None
        )
        assert outcome.calls == 0 and outcome.document == document
    outcome = add_document_context(headed, settings, model=answers(), model_name="m", cache=None)
    assert outcome.calls == 0 and outcome.document == headed
    model = answers("Title: Bees and Tokyo", "0: Bees\n2: Tokyo")
    outcome = add_document_context(untitled, settings, model=model, model_name="m", cache=None)
    assert outcome.calls == 2 and outcome.document.title == "Bees and Tokyo" and outcome.document.summary == ""
    assert not wants_context(ChunkingSettings()) and wants_context(ChunkingSettings(summaries=True))
    # Headers off: nowhere to put a summary, so no call for one.
    assert (
        add_document_context(
            titled, ChunkingSettings(summaries=True, headers="none"), model=answers(), model_name="m", cache=None
        ).calls
        == 0
    )


def test_a_one_line_document_needs_no_sectioning_call():
    outcome = add_document_context(
        plain_document("d", "Just one line.", "test"),
        ChunkingSettings(sectioning="llm"),
        model=answers(),
        model_name="m",
        cache=None,
    )
    assert outcome.calls == 0 and outcome.fallbacks == ()


def test_ingesting_the_same_text_again_makes_no_call(tmp_path):
    cache = ContextCache(tmp_path)
    document = plain_document("d", TEXT, "test", title="notes")
    first = add_document_context(
        document,
        SECTIONS_AND_SUMMARY,
        model=answers("This document is about bees.", "0: Bees\n2: Tokyo"),
        model_name="m",
        cache=cache,
    )
    again = add_document_context(document, SECTIONS_AND_SUMMARY, model=answers(), model_name="m", cache=cache)
    assert again.calls == 0 and again.cache_hits == 2
    assert again.document == first.document
    # Another model, or another text, is another entry.
    other = add_document_context(
        document,
        ChunkingSettings(summaries=True),
        model=answers("This document is other."),
        model_name="other",
        cache=cache,
    )
    assert other.calls == 1 and other.document.summary == "This document is other."


def test_a_fallback_is_cached_too(tmp_path):
    cache = ContextCache(tmp_path)
    document = plain_document("d", TEXT, "test")
    add_document_context(
        document, ChunkingSettings(sectioning="llm"), model=answers("no", "still no"), model_name="m", cache=cache
    )
    again = add_document_context(
        document, ChunkingSettings(sectioning="llm"), model=answers(), model_name="m", cache=cache
    )
    assert again.calls == 0 and again.cache_hits == 1 and len(again.fallbacks) == 1
    assert again.document.sections == document.sections


def test_a_corrupt_cache_entry_is_ignored_and_rewritten(tmp_path):
    cache = ContextCache(tmp_path)
    document = plain_document("d", TEXT, "test")
    add_document_context(
        document, ChunkingSettings(sectioning="llm"), model=answers("0: Bees\n2: Tokyo"), model_name="m", cache=cache
    )
    (path,) = tmp_path.glob("*/*.json")
    for corrupt in ("{not json", json.dumps({"key": path.stem, "value": [[5, "Bees"]], "fallback": ""}), "\xff"):
        path.write_text(corrupt, encoding="latin-1")
        outcome = add_document_context(
            document,
            ChunkingSettings(sectioning="llm"),
            model=answers("0: Bees\n2: Tokyo"),
            model_name="m",
            cache=cache,
        )
        assert outcome.calls == 1 and outcome.cache_hits == 0
        assert [s.start for s in outcome.document.sections] == [0, 40]
        assert json.loads(path.read_text(encoding="utf-8"))["value"] == [[0, "Bees"], [40, "Tokyo"]]


def test_a_provider_failure_costs_only_that_document():
    class FailsOnTokyo:
        def complete(self, request):
            if "Tokyo" in request.messages[-1].content:
                raise ChatError("server answered 503", retryable=True, status=503)
            return ChatResponse(text="This document is about bees.")

    bees = plain_document("b", "Bees make honey.", "test")
    tokyo = plain_document("t", "Tokyo is large.", "test")
    results = add_context(
        [bees, tokyo], ChunkingSettings(summaries=True), model=FailsOnTokyo(), model_name="m", cache=None, parallel=2
    )
    assert results[0].document.summary == "This document is about bees."
    assert isinstance(results[1], ContextFailure) and results[1].document is tokyo and "503" in results[1].reason


# --- headers, chunks, settings ------------------------------------------------


def test_a_summary_puts_the_header_on_three_lines_and_the_modes_stay():
    summary = "This document  is about bees."
    assert (
        chunk_header("Bees", ("Bees", "Winter"), "title+section", summary)
        == "Bees\nThis document is about bees.\nWinter"
    )
    assert chunk_header("Bees", ("Winter",), "title", summary) == "Bees\nThis document is about bees."
    assert chunk_header("Bees", ("Winter",), "section", summary) == "This document is about bees.\nWinter"
    assert chunk_header("Bees", ("Winter",), "none", summary) == ""
    assert chunk_header("", (), "title+section", summary) == "This document is about bees."
    assert chunk_header("Bees", ("Bees", "Winter")) == "Bees > Winter"


class UnitEmbedder:
    def embed(self, texts):
        return np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (len(texts), 1))


def test_chunks_of_a_sectioned_document_carry_the_summary_and_section_and_exact_text():
    sectioned = add_document_context(
        plain_document("d", TEXT, "test", title="notes"),
        SECTIONS_AND_SUMMARY,
        model=answers("This document is about bees.", "0: Bees\n2: Tokyo"),
        model_name="m",
        cache=None,
    ).document
    (chunked,) = chunk_documents([sectioned], UnitEmbedder(), ChunkingSettings(max_chars=20))
    assert [(c.section, c.header) for c in chunked.chunks][:1] == [
        (("Bees",), "notes\nThis document is about bees.\nBees")
    ]
    assert {c.section for c in chunked.chunks} == {("Bees",), ("Tokyo",)}
    for chunk in chunked.chunks:
        assert TEXT[chunk.start : chunk.end] == chunk.text
        assert not (chunk.start < 40 < chunk.end)  # no chunk crosses a section


def test_settings_default_off_keep_fingerprints_and_come_from_the_environment():
    assert str(ChunkingSettings()) == str(ChunkingSettings(llm_titles=True, summaries=True, sectioning="llm"))
    base = Settings()
    assert "context" not in shaping_of(base)
    on = Settings(chunking=ChunkingSettings(summaries=True, sectioning="llm"))
    assert shaping_of(on) == shaping_of(base) + "|context=summaries,sections"
    env = {"CHUNKRAG_CHUNK_SUMMARIES": "true", "CHUNKRAG_CHUNK_LLM_TITLES": "1", "CHUNKRAG_CHUNK_SECTIONING": "llm"}
    chunking = Settings.from_env(env).chunking
    assert (chunking.summaries, chunking.llm_titles, chunking.sectioning) == (True, True, "llm")
    assert Settings.from_env({"CHUNKRAG_CHUNK_SUMMARIES": "off"}).chunking.summaries is False
    with pytest.raises(SettingsError, match="CHUNKRAG_CHUNK_SUMMARIES"):
        Settings.from_env({"CHUNKRAG_CHUNK_SUMMARIES": "maybe"})
    with pytest.raises(SettingsError, match="sectioning"):
        ChunkingSettings(sectioning="paragraphs")


def test_the_ingest_report_prints_the_context_cost():
    import io

    from chunkrag_cli.output import print_ingest_report
    from ingest_pipeline.pipeline import IngestReport

    report = IngestReport(
        "i",
        2,
        0,
        9,
        4,
        0,
        (),
        (),
        1.0,
        context_documents=2,
        context_calls=3,
        context_cache_hits=1,
        context_fallbacks=("d: sections: no rows",),
        context_seconds=3.0,
    )
    out = io.StringIO()
    print_ingest_report(report, out)
    assert (
        "document context: 3 model calls for 2 documents (3.0 s, 1.50 s per document), 1 answers from the cache, "
        "1 fallbacks"
    ) in out.getvalue()
    assert "fallback d: sections: no rows" in out.getvalue()


def test_the_ingest_flags_turn_the_context_on(monkeypatch):
    from chunkrag_cli.main import _settings, build_parser

    for name in ("CHUNKRAG_CHUNK_SUMMARIES", "CHUNKRAG_CHUNK_LLM_TITLES", "CHUNKRAG_CHUNK_SECTIONING"):
        monkeypatch.delenv(name, raising=False)
    plain = _settings(build_parser().parse_args(["ingest", "docs"])).chunking
    assert (plain.llm_titles, plain.summaries, plain.sectioning) == (False, False, "headings")
    chunking = _settings(
        build_parser().parse_args(["ingest", "docs", "--llm-titles", "--summaries", "--semantic-sections"])
    ).chunking
    assert (chunking.llm_titles, chunking.summaries, chunking.sectioning) == (True, True, "llm")
