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

from dataclasses import dataclass

from chunkrag_core.chunk import MAX_DOC_ID_BYTES
from ingest_pipeline.context_cache import cache_key
from ingest_pipeline.sources import Document, plain_document

# Separates index, _id and field in a companion doc_id. A control character:
# index names cannot hold it, and ids and field names that do are hashed.
SEPARATOR = "\x1f"


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
        document's chunks (offsets count within the field's text)."""
        return plain_document(
            self.companion_id,
            self.text,
            f"{self.index}/{self.doc_id}#{self.field}",
            title=self.title,
            metadata={"source_index": self.index, "source_id": self.doc_id, "source_field": self.field},
        )


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
