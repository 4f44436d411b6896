"""Semantic sectioning and a summary written by the offline default model
(Qwen2.5-Coder-1.5B on llama.cpp's OpenAI-compatible server) for a short
document without headings. A small model may not section well; what must
hold is that the result is usable: sections that tile the text exactly, or
a recorded fallback that keeps the document's own, and a summary.

`make test` starts the model server; this test fails, rather than skips,
when it is not there.
"""

from __future__ import annotations

import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.document_context import add_document_context
from ingest_pipeline.sectioning import MAX_ANSWER_TOKENS
from ingest_pipeline.sources import plain_document
from tests.support.model_speed import budgeted

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = (
    "Honey bees live in colonies of tens of thousands of workers and one queen. "
    "The workers collect nectar and pollen, and turn the nectar into honey that feeds the colony through winter.\n"
    "The French Revolution began in 1789 with the storming of the Bastille. "
    "It ended the monarchy, and the king was executed in 1793.\n"
    "To bake bread, mix flour, water, salt and yeast into a dough. "
    "Knead it, let it rise for an hour, shape it, and bake it in a hot oven until the crust is brown.\n"
    "Jupiter is the largest planet in the solar system. "
    "It is a gas giant with a great red spot, a storm larger than the Earth.\n"
)


def test_the_local_model_sections_and_summarises_a_document_without_headings(local_model, tmp_path):
    # The sections call is the longest: the text numbered by sentence and
    # the instructions in (under 1,000 tokens), up to MAX_ANSWER_TOKENS out;
    # its timeout from the model's speed now.
    chat = budgeted(local_model, prompt_tokens=1000, completion_tokens=MAX_ANSWER_TOKENS)
    model = OpenAICompatibleChat(model=chat.model, base_url=chat.base_url, timeout_s=chat.timeout_s)
    document = plain_document("mixed", TEXT, "test", title="mixed notes")
    outcome = add_document_context(
        document,
        ChunkingSettings(sectioning="llm", summaries=True),
        model=model,
        model_name=local_model.model,
        cache=None,
    )
    result = outcome.document
    print(
        f"\ncalls {outcome.calls}, {outcome.seconds} s; summary: {result.summary!r}\nsections: "
        f"{[(s.path, s.start, s.end) for s in result.sections]}\nfallbacks: {outcome.fallbacks}"
    )

    assert 2 <= outcome.calls <= 3  # the summary, the sections, perhaps one retry
    assert result.summary.strip()
    sections = result.sections
    assert sections[0].start == 0 and sections[-1].end == len(TEXT)
    assert all(a.end == b.start for a, b in zip(sections, sections[1:]))
    if any(f.startswith("sections:") for f in outcome.fallbacks):
        assert sections == document.sections
    else:
        assert all(len(s.path) == 1 and s.path[0] for s in sections)
