"""One text field of one document of someone else's index, as a document of
this project's chunk index.

Post-search splits the text fields of the hits a caller's own search
returned; a companion chunk index (``chunkrag sync``) holds the same
passages ahead of time. Both name a source field's passages the same way,
so a companion's chunks are found for a hit by id alone, and both take the
same fingerprint, so they are used only where the caller's hit shows the
very text they were made from (a changed document, or a field the caller
cannot read, never matches).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chunkrag_core.chunk import MAX_DOC_ID_BYTES
from ingest_pipeline.context_cache import cache_key
from ingest_pipeline.sources import Document, Section

# Separates index, _id and field in a companion doc_id. A control character:
# index names cannot hold it, and ids and field names that do are hashed.
SEPARATOR = "\x1f"
# A field's text is chunked in parts of at most this many characters (a
# million characters is ~200k words): each part is a section of the field's
# document, so no sentence or chunk runs across parts, while offsets still
# count within the whole field. A field no longer than this is one section,
# as it always was (its fingerprint is unchanged).
PART_CHARS = 1_000_000
# Where a part may end, best first: a paragraph break (which no sentence
# crosses anyway, so the chunks are those of the whole text), a line
# break, a sentence end, any whitespace; else exactly at PART_CHARS.
# Each with how many characters of the match the part keeps (its sentence mark).
_PART_BREAKS = (
    (0, re.compile(r"\n[ \t]*\n")),
    (0, re.compile(r"\n")),
    (1, re.compile(r"[.!?。！？]\s")),
    (0, re.compile(r"\s")),
)


@dataclass(frozen=True, slots=True)
class SourceField:
    """The text of ``field`` in the hit ``index``/``doc_id`` as the caller's
    search returned it (``title`` is the hit's title-like field, if any)."""

    index: str
    doc_id: str
    field: str
    text: str
    title: str = ""

    @property
    def companion_id(self) -> str:
        return source_doc_id(self.index, self.doc_id, self.field)

    def document(self) -> Document:
        """The chunk-index document of this field: its passages are this
        document's chunks (offsets count within the field's text); a field
        longer than PART_CHARS is chunked in parts (`field_parts`)."""
        return Document(
            doc_id=self.companion_id,
            title=self.title,
            text=self.text,
            sections=field_parts(self.text),
            metadata={"source_index": self.index, "source_id": self.doc_id, "source_field": self.field},
            origin=f"{self.index}/{self.doc_id}#{self.field}",
        )


def field_parts(text: str, limit: int = PART_CHARS) -> tuple[Section, ...]:
    """The sections a field's text is chunked in: the whole text when it
    is at most ``limit`` characters, else consecutive parts of at most
    ``limit``, each ending at the best break (`_PART_BREAKS`) in its last
    quarter, the whitespace between parts left out."""
    if len(text) <= limit:
        return (Section((), 0, len(text)),)
    parts: list[Section] = []
    start = 0
    while len(text) - start > limit:
        end = cut = start + limit
        for keep, pattern in _PART_BREAKS:
            match = None
            for match in pattern.finditer(text, end - limit // 4, end):
                pass
            if match is not None:
                cut = match.start() + keep
                break
        parts.append(Section((), start, cut))
        start = cut
        while start < len(text) and text[start].isspace():
            start += 1
    if start < len(text):
        parts.append(Section((), start, len(text)))
    return tuple(parts)


def title_value(text: str) -> str:
    """A title field's text as the passages' header: a field with several
    values (joined by a blank line) reads as its first one. Post-search and
    ``chunkrag sync`` both take the header this way, so their fingerprints
    of the same hit agree."""
    return text.split("\n\n", 1)[0]


def source_doc_id(index: str, doc_id: str, field: str) -> str:
    """The deterministic doc_id of one source field in a chunk index; a
    name too long for a chunk id (or holding the separator) is replaced by
    its hash, which stays deterministic."""
    plain = SEPARATOR.join((index, doc_id, field))
    if plain.count(SEPARATOR) == 2 and len(plain.encode("utf-8")) <= MAX_DOC_ID_BYTES:
        return plain
    return "sha256" + SEPARATOR + cache_key(index, doc_id, field)


def source_of_doc_id(doc_id: str) -> tuple[str, str, str] | None:
    """(index, _id, field) that :func:`source_doc_id` made ``doc_id`` of;
    None for a hashed one, or one it did not make."""
    parts = tuple(doc_id.split(SEPARATOR))
    if len(parts) != 3 or source_doc_id(*parts) != doc_id:
        return None
    return parts
