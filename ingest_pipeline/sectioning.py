"""Semantic sectioning (dsRAG's), as pure functions.

A document without headings is shown to the chat model as numbered lines, a
window at a time; the model names the line where each coherent section
starts and its title. Its answer is parsed and checked (lines in the window,
strictly increasing, the first at the window's first line) before it is
used, and the sections it names tile the document's text exactly, so no
character is lost and chunk offsets stay the document's own. The model call
itself is injected (``document_context`` makes it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from chunkrag_core.providers.chat import ChatRequest, Message
from ingest_pipeline.sentences import bounded_sentence_spans, resolved_language
from ingest_pipeline.sources import Section

# A line longer than this is shown as its sentences (a paragraph written on
# one line would otherwise be one unit the model cannot split, and a
# document with no line breaks would be a single line).
MAX_LINE_CHARS = 1000
# Characters of numbered lines per window: about 2,000 tokens, which leaves
# room in the local model's 4,096-token slot for the instructions and the
# answer. dsRAG uses 20,000 with larger models.
WINDOW_CHARS = 8000
# A section title longer than this is cut at a word: a header names a
# section, it does not summarise it.
MAX_TITLE_CHARS = 100
# Room for about twenty "<line>: <title>" rows per window.
MAX_ANSWER_TOKENS = 400


@dataclass(frozen=True, slots=True)
class Line:
    """A numbered unit of the document: ``text[start:end]``, never blank."""

    start: int
    end: int


class InvalidSections(ValueError):
    """The model's answer cannot be used; the message says why."""


def document_lines(text: str, language: str = "english", max_line_chars: int = MAX_LINE_CHARS) -> tuple[Line, ...]:
    """The non-blank lines of ``text`` with their offsets (a line's own
    leading and trailing whitespace left out); a line over
    ``max_line_chars`` becomes its sentences."""
    lines: list[Line] = []
    offset = 0
    language = resolved_language(text, language)
    for raw in text.splitlines(keepends=True):
        start = offset + len(raw) - len(raw.lstrip())
        end = offset + len(raw.rstrip())
        offset += len(raw)
        if start >= end:
            continue
        if end - start <= max_line_chars:
            lines.append(Line(start, end))
        else:
            lines.extend(Line(s, e) for s, e in bounded_sentence_spans(text, start, end, max_line_chars, language))
    return tuple(lines)


def window_end(lines: Sequence[Line], first: int, max_chars: int = WINDOW_CHARS) -> int:
    """The end (exclusive) of the window starting at line ``first``: as many
    lines as fit in ``max_chars``, and at least one."""
    used, end = 0, first
    while end < len(lines):
        used += lines[end].end - lines[end].start
        if used > max_chars and end > first:
            break
        end += 1
    return end


def sectioning_prompt(text: str, lines: Sequence[Line], first: int, end: int) -> str:
    numbered = "\n".join(f"[{i}] {text[lines[i].start : lines[i].end]}" for i in range(first, end))
    return (
        f"Below is part of a document, one numbered line per row (lines {first} to {end - 1}).\n"
        "Split it into sections: each section is a run of consecutive lines about one topic. "
        "For every section write the number of its first line and a short title of a few words, "
        "one section per row, in order, like this:\n"
        f"{first}: <title of the first section>\n"
        "<first line of the next section>: <its title>\n"
        f"The first section starts at line {first}. Write nothing else.\n\n"
        f"{numbered}"
    )


def sectioning_request(text: str, lines: Sequence[Line], first: int, end: int) -> ChatRequest:
    return ChatRequest(
        messages=(
            Message("system", "You divide documents into sections and name them."),
            Message("user", sectioning_prompt(text, lines, first, end)),
        ),
        max_tokens=MAX_ANSWER_TOKENS,
    )


def retry_request(request: ChatRequest, answer: str, reason: str) -> ChatRequest:
    """The same request with the invalid answer and what was wrong with it,
    so a deterministic model does not repeat itself."""
    return ChatRequest(
        messages=(
            *request.messages,
            Message("assistant", answer),
            Message(
                "user",
                f"That answer cannot be used: {reason}. "
                "Answer again in the same format, one '<line>: <title>' row per section.",
            ),
        ),
        max_tokens=request.max_tokens,
    )


# "12: Title", "[12] Title", "- Line 12 - Title", "12. Title", "Lines 12-15: Title"
# (case-insensitive, after bold and code marks are dropped); a bare number
# needs a separator, so a sentence that opens with a year is not a row.
_ROW = re.compile(
    r"^\s*(?:[-•]\s*)?(?:lines?\s*)?(?:\[(\d+)\]|(\d+)(?:\s*(?:-|–|to)\s*\d+)?\s*[:.)\-–—])\s*[:.\-–—]?\s*(\S.*?)\s*$",
    re.IGNORECASE,
)


def parse_sections(answer: str) -> list[tuple[int, str]]:
    """(start line, title) pairs from the model's rows, in the order
    written; rows that are not '<line>: <title>' are passed over."""
    pairs = []
    for row in answer.splitlines():
        match = _ROW.match(row.replace("*", "").replace("`", ""))
        if match:
            title = clean_title(match.group(3))
            if title:
                pairs.append((int(match.group(1) or match.group(2)), title))
    return pairs


def clean_title(raw: str, max_chars: int = MAX_TITLE_CHARS) -> str:
    """One line, without the quotes, bold marks and '#' a model adds."""
    title = " ".join(raw.split()).strip(" \"'*#`“”")
    if len(title) > max_chars:
        title = title[:max_chars].rsplit(" ", 1)[0]
    return title


def validate_sections(pairs: Sequence[tuple[int, str]], first: int, end: int) -> None:
    """Raise :class:`InvalidSections` unless the pairs name lines of the
    window ``first..end-1`` in strictly increasing order, starting at
    ``first`` (so the sections cover the window)."""
    if not pairs:
        raise InvalidSections("no '<line>: <title>' rows")
    lines = [line for line, _ in pairs]
    outside = [line for line in lines if not first <= line < end]
    if outside:
        raise InvalidSections(f"line {outside[0]} is outside lines {first} to {end - 1}")
    if any(b <= a for a, b in zip(lines, lines[1:])):
        raise InvalidSections(f"line numbers must increase, got {lines}")
    if lines[0] != first:
        raise InvalidSections(f"the first section must start at line {first}, got {lines[0]}")


# (first, end) of a window -> its validated (start line, title) pairs; raises
# InvalidSections when the model's answers cannot be used.
Propose = Callable[[int, int], list[tuple[int, str]]]


def plan_sections(lines: Sequence[Line], propose: Propose, max_chars: int = WINDOW_CHARS) -> list[tuple[int, str]]:
    """(start line, title) of every section of the document, window by
    window. A window's last section may run on past it, so the next window
    starts at that section's first line (dsRAG's way) and the model sees it
    whole. Only a last section that starts in the window's second half is
    carried over, so every call moves on by at least half a window (calls
    stay under twice the windows); otherwise, as for a window that is one
    section, the window is taken whole and the next starts after it."""
    sections: list[tuple[int, str]] = []
    first = 0
    while first < len(lines):
        end = window_end(lines, first, max_chars)
        found = propose(first, end)
        last = found[-1][0]
        if end < len(lines) and last >= first + (end - first) // 2 and last > first:
            sections.extend(found[:-1])
            first = last
        else:
            sections.extend(found)
            first = end
    return sections


def section_offsets(lines: Sequence[Line], starts: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """(start offset, title) of each section named by its first line; the
    first section starts at offset 0, so leading whitespace is not lost."""
    return [(0 if i == 0 else lines[line].start, title) for i, (line, title) in enumerate(starts)]


def sections_at_offsets(text: str, starts: Sequence[tuple[int, str]]) -> tuple[Section, ...]:
    """Sections from (start offset, title) pairs, the first at 0,
    increasing, each running to the next (the last to the end of ``text``)."""
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return tuple(Section((title,), start, end) for (start, title), end in zip(starts, ends))


def valid_offsets(text: str, starts: Any) -> bool:
    """Whether ``starts`` (read from a cache file) are (offset, title)
    pairs from 0, strictly increasing, inside ``text``, each titled."""
    if not isinstance(starts, list) or not starts:
        return False
    if not all(
        isinstance(p, (list, tuple)) and len(p) == 2 and type(p[0]) is int and isinstance(p[1], str) and p[1]
        for p in starts
    ):
        return False
    offsets = [start for start, _ in starts]
    return offsets[0] == 0 and all(a < b for a, b in zip(offsets, offsets[1:])) and offsets[-1] < len(text)
