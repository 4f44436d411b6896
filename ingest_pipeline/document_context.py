"""Document context written by the chat model, before chunking: a title for
a document that has none, a short summary, and semantic sections for a
document without headings (dsRAG's contextual headers and sectioning).

A stage from a document to a new document: each part runs only when the
chunking settings ask for it, every answer is cleaned or validated before
use, an unusable one leaves the document as it was (recorded as a
fallback), and every answer is cached by what produced it, so ingesting the
same text again costs no call. The chat model is injected.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from chunkrag_core.providers.chat import ChatError, ChatModel, ChatRequest, ChatResponse, Message
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.context_cache import ContextCache, cache_key
from ingest_pipeline.sectioning import (
    MAX_LINE_CHARS,
    WINDOW_CHARS,
    InvalidSections,
    clean_title,
    document_lines,
    parse_sections,
    plan_sections,
    retry_request,
    section_offsets,
    sectioning_request,
    sections_at_offsets,
    valid_offsets,
    validate_sections,
)
from ingest_pipeline.sources import Document

# Bump when a prompt or the cleaning of an answer changes: cached answers of
# the old prompts are then not reused.
PROMPT_VERSION = 1
# The document's start a title is written from (a title names what the
# opening says the document is).
TITLE_CONTEXT_CHARS = 2000
TITLE_TOKENS = 32
# The document's start a summary is written from: about 1,500 tokens, within
# the local model's 4,096-token slot.
SUMMARY_CONTEXT_CHARS = 6000
SUMMARY_TOKENS = 120
# A summary longer than this is cut at a sentence (or word): it goes into
# every chunk's header, so it is embedded with every chunk.
MAX_SUMMARY_CHARS = 400
# Fewer numbered lines than this: nothing to divide, so no call.
MIN_LINES_TO_SECTION = 2


def wants_context(settings: ChunkingSettings) -> bool:
    return settings.llm_titles or settings.summaries or settings.sectioning == "llm"


def has_no_headings(document: Document) -> bool:
    return len(document.sections) == 1 and document.sections[0].path == ()


@dataclass(frozen=True, slots=True)
class ContextOutcome:
    document: Document
    calls: int = 0
    cache_hits: int = 0
    # "<part>: <why>" for each part whose answer could not be used.
    fallbacks: tuple[str, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ContextFailure:
    """The provider failed for this document: it is not ingested this run
    (so a later run, with the model back, does it)."""

    document: Document
    reason: str


def title_request(text: str) -> ChatRequest:
    return ChatRequest(
        messages=(
            Message("system", "You name documents."),
            Message(
                "user",
                "Write a short, descriptive title (at most ten words) for the document that starts below. "
                "Write only the title.\n\n" + text[:TITLE_CONTEXT_CHARS],
            ),
        ),
        max_tokens=TITLE_TOKENS,
    )


def summary_request(title: str, text: str) -> ChatRequest:
    named = f"Document title: {title}\n\n" if title else ""
    return ChatRequest(
        messages=(
            Message("system", "You write short, factual summaries of documents."),
            Message(
                "user",
                f"{named}Document start:\n{text[:SUMMARY_CONTEXT_CHARS]}\n\n"
                "In one or two sentences, say what this document is about: its subject and what it covers. "
                "Start with 'This document'. Write only the summary.",
            ),
        ),
        max_tokens=SUMMARY_TOKENS,
    )


def _without_label(text: str, label: str) -> str:
    return re.sub(rf"^\s*\**{label}\**\s*:\s*", "", text, flags=re.IGNORECASE)


def clean_written_title(answer: str) -> str:
    first = next((row for row in answer.splitlines() if row.strip()), "")
    return clean_title(_without_label(first, "title"))


def clean_summary(answer: str, max_chars: int = MAX_SUMMARY_CHARS) -> str:
    summary = " ".join(_without_label(answer, "summary").split())
    if len(summary) <= max_chars:
        return summary
    cut = summary[:max_chars]
    sentence_end = cut.rfind(". ")
    return cut[: sentence_end + 1] if sentence_end > max_chars // 2 else cut.rsplit(" ", 1)[0]


class _CountingModel:
    """The injected model, counting the calls made through it."""

    def __init__(self, model: ChatModel):
        self._model = model
        self.calls = 0

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        return self._model.complete(request)


@dataclass(frozen=True, slots=True)
class _Part:
    value: Any
    hit: bool
    fallback: str  # "" when the answer was used


def _through_cache(
    cache: ContextCache | None, key: str, valid: Callable[[Any], bool], compute: Callable[[], tuple[Any, str]]
) -> _Part:
    entry = cache.get(key) if cache is not None else None
    if entry is not None and isinstance(entry.get("fallback"), str) and valid(entry.get("value")):
        return _Part(entry["value"], True, entry["fallback"])
    value, fallback = compute()
    if cache is not None:
        cache.put(key, {"value": value, "fallback": fallback})
    return _Part(value, False, fallback)


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _written_title(model: ChatModel, text: str) -> tuple[str, str]:
    title = clean_written_title(model.complete(title_request(text)).text)
    return title, "" if title else "title: empty answer"


def _written_summary(model: ChatModel, title: str, text: str) -> tuple[str, str]:
    summary = clean_summary(model.complete(summary_request(title, text)).text)
    return summary, "" if summary else "summary: empty answer"


def _semantic_offsets(model: ChatModel, text: str, language: str) -> tuple[list[tuple[int, str]] | None, str]:
    """(start offset, title) of each section, or None and why not."""
    lines = document_lines(text, language)
    if len(lines) < MIN_LINES_TO_SECTION:
        return None, ""

    def propose(first: int, end: int) -> list[tuple[int, str]]:
        request = sectioning_request(text, lines, first, end)
        answer = model.complete(request).text
        try:
            pairs = parse_sections(answer)
            validate_sections(pairs, first, end)
            return pairs
        except InvalidSections as problem:
            pairs = parse_sections(model.complete(retry_request(request, answer, str(problem))).text)
            validate_sections(pairs, first, end)
            return pairs

    try:
        starts = plan_sections(lines, propose)
    except InvalidSections as problem:
        return None, f"sections: {problem} (after one retry); kept the document's own"
    return section_offsets(lines, starts), ""


def add_document_context(
    document: Document, settings: ChunkingSettings, *, model: ChatModel, model_name: str, cache: ContextCache | None
) -> ContextOutcome:
    """``document`` with what ``settings`` ask for added; raises
    :class:`ChatError` when the provider fails."""
    began = time.perf_counter()
    counted = _CountingModel(model)
    text, parts = document.text, []
    title, summary, sections = document.title, document.summary, document.sections
    if settings.llm_titles and not title.strip():
        key = cache_key(PROMPT_VERSION, "title", model_name, text[:TITLE_CONTEXT_CHARS])
        parts.append(_through_cache(cache, key, _is_text, lambda: _written_title(counted, text)))
        title = parts[-1].value or title
    # A summary lives only in the header: with headers off it would be a wasted call.
    if settings.summaries and settings.headers != "none":
        key = cache_key(PROMPT_VERSION, "summary", model_name, title, text[:SUMMARY_CONTEXT_CHARS])
        parts.append(_through_cache(cache, key, _is_text, lambda: _written_summary(counted, title, text)))
        summary = parts[-1].value or summary
    if settings.sectioning == "llm" and has_no_headings(document):
        key = cache_key(PROMPT_VERSION, "sections", model_name, settings.language, WINDOW_CHARS, MAX_LINE_CHARS, text)
        parts.append(
            _through_cache(
                cache,
                key,
                lambda v: v is None or valid_offsets(text, v),
                lambda: _semantic_offsets(counted, text, settings.language),
            )
        )
        if parts[-1].value:
            sections = sections_at_offsets(text, [(start, section_title) for start, section_title in parts[-1].value])
    changed = (title, summary, sections) != (document.title, document.summary, document.sections)
    return ContextOutcome(
        document=replace(document, title=title, summary=summary, sections=sections) if changed else document,
        calls=counted.calls,
        cache_hits=sum(part.hit for part in parts),
        fallbacks=tuple(part.fallback for part in parts if part.fallback),
        seconds=round(time.perf_counter() - began, 3),
    )


def add_context(
    documents: Sequence[Document],
    settings: ChunkingSettings,
    *,
    model: ChatModel,
    model_name: str,
    cache: ContextCache | None,
    parallel: int = 1,
) -> list[ContextOutcome | ContextFailure]:
    """:func:`add_document_context` for each document, ``parallel`` at a
    time (the provider's slots), in order; a provider failure costs only
    that document."""

    def one(document: Document) -> ContextOutcome | ContextFailure:
        try:
            return add_document_context(document, settings, model=model, model_name=model_name, cache=cache)
        except ChatError as exc:
            return ContextFailure(document, str(exc))

    if parallel <= 1 or len(documents) <= 1:
        return [one(document) for document in documents]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="document-context") as pool:
        return list(pool.map(one, documents))
