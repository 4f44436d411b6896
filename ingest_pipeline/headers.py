"""Contextual chunk headers (dsRAG's), as pure functions.

A header names where a chunk comes from: the document's title and the path
of section headings above it. It is stored in its own field and prepended
to the chunk only for ranking (embedding, BM25 on its own field); the chunk's
``text`` and offsets stay the document's own.
"""

from __future__ import annotations

from typing import Sequence

# "none": no header; "title": the document title; "section": the heading
# path; "title+section" (default): both, which costs no model call.
HEADER_MODES = ("none", "title", "section", "title+section")
# Between the parts of a header: reads as a breadcrumb to people and models.
SEPARATOR = " > "


def chunk_header(title: str, section: Sequence[str], mode: str = "title+section", summary: str = "") -> str:
    """The header of a chunk under ``section`` of a document titled
    ``title``. A heading that repeats the title (a markdown document's H1 is
    both) is named once; empty parts are left out. With a document
    ``summary`` (written by the chat model, opt-in) the header is three
    lines, as dsRAG lays its context out: the title, the summary, then the
    section path; ``none`` leaves it out too."""
    if mode not in HEADER_MODES:
        raise ValueError(f"unknown header mode {mode!r}; choose one of {', '.join(HEADER_MODES)}")
    title = " ".join(title.split())
    named = [title] if title and mode in ("title", "title+section") else []
    path = []
    if mode in ("section", "title+section"):
        path = [heading for heading in (" ".join(h.split()) for h in section) if heading and heading != title]
    summary = " ".join(summary.split())
    if summary and mode != "none":
        return "\n".join(part for part in (*named, summary, SEPARATOR.join(path)) if part)
    return SEPARATOR.join(named + path)


def embedded_text(header: str, text: str) -> str:
    """What the embedding model sees for a chunk: header, blank line, text."""
    return f"{header}\n\n{text}" if header else text
