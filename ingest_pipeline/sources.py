"""Reading .txt, .md and .jsonl inputs into documents.

A file or record that cannot be used is reported as a :class:`Skipped` with a
reason a person can act on, and reading goes on with the rest.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".jsonl")
# Reading a larger file into memory at once would starve the embedder;
# split it first (one JSONL record per document) instead.
MAX_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Section:
    """A span of the document's text under one heading path."""

    path: tuple[str, ...]
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    title: str
    text: str
    sections: tuple[Section, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""  # file (and line) it came from, for messages
    # A short summary written by the chat model (document_context, opt-in);
    # it goes into every chunk's header. Not part of the fingerprint, which
    # is taken of the document as read.
    summary: str = ""
    # Metadata written with every chunk but, unlike ``metadata``, not part
    # of the fingerprint: where the text was read (a source document's
    # version), which may change while the text does not, and must not
    # make an unchanged text be written again.
    stamp: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        object.__setattr__(self, "stamp", MappingProxyType(dict(self.stamp)))


@dataclass(frozen=True, slots=True)
class Skipped:
    origin: str
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.reason}"


def read_sources(paths: Iterable[str | Path]) -> Iterator[Document | Skipped]:
    """Every document under ``paths`` (files or folders, recursively, in a
    stable order), or a :class:`Skipped` for each one that cannot be read."""
    for path in map(Path, paths):
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
                yield from read_file(file, root=path)
        elif path.is_file():
            yield from read_file(path, root=path.parent)
        else:
            yield Skipped(str(path), "no such file or folder")


def read_file(path: Path, root: Path) -> Iterator[Document | Skipped]:
    origin = str(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        yield Skipped(
            origin, f"unsupported file type {suffix or '(none)'!r}; expected one of {', '.join(SUPPORTED_SUFFIXES)}"
        )
        return
    size = path.stat().st_size
    if size == 0:
        yield Skipped(origin, "empty file")
        return
    if size > MAX_FILE_BYTES:
        yield Skipped(origin, f"file is {size:,} bytes, over the {MAX_FILE_BYTES:,} byte limit; split it")
        return
    raw = path.read_bytes()
    text_or_skip = decode_text(raw, origin)
    if isinstance(text_or_skip, Skipped):
        yield text_or_skip
        return
    text = text_or_skip
    doc_id = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    if suffix == ".jsonl":
        yield from parse_jsonl(text, origin)
    elif suffix in (".md", ".markdown"):
        yield markdown_document(doc_id, text, origin, fallback_title=path.stem)
    else:
        yield plain_document(doc_id, text, origin, title=path.stem)


def decode_text(raw: bytes, origin: str) -> str | Skipped:
    if b"\x00" in raw[:8192]:
        return Skipped(origin, "binary file (contains NUL bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Skipped(
            origin, f"not UTF-8 (invalid byte 0x{raw[exc.start]:02x} at offset {exc.start}); convert it to UTF-8"
        )
    if not text.strip():
        return Skipped(origin, "file holds only whitespace")
    return text


def plain_document(
    doc_id: str, text: str, origin: str, title: str = "", metadata: Mapping[str, Any] | None = None
) -> Document:
    return Document(
        doc_id=doc_id,
        title=title,
        text=text,
        sections=(Section((), 0, len(text)),),
        metadata=metadata or {},
        origin=origin,
    )


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def markdown_sections(text: str) -> tuple[Section, ...]:
    """Split markdown at ATX headings; each section's path is the chain of
    headings above it. Heading lines are not part of any section body, and
    headings inside fenced code blocks are ignored."""
    fenced = _fenced_ranges(text)
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    body_start = 0
    for match in _HEADING.finditer(text):
        if any(lo <= match.start() < hi for lo, hi in fenced):
            continue
        if text[body_start : match.start()].strip():
            sections.append(Section(tuple(title for _, title in path), body_start, match.start()))
        level = len(match.group(1))
        path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, match.group(2).strip())]
        body_start = match.end()
    if text[body_start:].strip():
        sections.append(Section(tuple(title for _, title in path), body_start, len(text)))
    return tuple(sections)


def _fenced_ranges(text: str) -> list[tuple[int, int]]:
    marks = [m.start() for m in _FENCE.finditer(text)]
    # An unclosed fence runs to the end, as renderers treat it.
    if len(marks) % 2:
        marks.append(len(text))
    return list(zip(marks[::2], marks[1::2]))


def markdown_document(doc_id: str, text: str, origin: str, fallback_title: str) -> Document:
    h1 = next((m.group(2).strip() for m in _HEADING.finditer(text) if len(m.group(1)) == 1), None)
    return Document(
        doc_id=doc_id, title=h1 or fallback_title, text=text, sections=markdown_sections(text), origin=origin
    )


def parse_jsonl(text: str, origin: str) -> Iterator[Document | Skipped]:
    """One document per line: ``id`` and ``text`` required, ``title`` and
    ``metadata`` optional; other top-level keys are kept as metadata."""
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{origin}:{number}"
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield Skipped(where, f"malformed JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(record, dict):
            yield Skipped(where, f"expected a JSON object, got {type(record).__name__}")
            continue
        doc_id = record.get("id", record.get("_id"))
        body = record.get("text")
        if doc_id is None or str(doc_id).strip() == "":
            yield Skipped(where, "record has no 'id'")
            continue
        if not isinstance(body, str) or not body.strip():
            yield Skipped(where, f"record {doc_id!r} has no non-empty string 'text'")
            continue
        title = record.get("title") or ""
        metadata = dict(record.get("metadata") or {})
        metadata.update({k: v for k, v in record.items() if k not in ("id", "_id", "text", "title", "metadata")})
        yield plain_document(str(doc_id), body, where, title=str(title), metadata=metadata)
