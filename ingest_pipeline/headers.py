"""Contextual chunk headers (dsRAG's), as pure functions.

A header names where a chunk comes from: the document's title and the path
of section headings above it. It is stored in its own field and prepended
to the chunk only for ranking (embedding, BM25 on its own field); the chunk's
``text`` and offsets stay the document's own.

Two ways to put the header into a chunk's vector: embed ``embedded_text``
(header and text as one text: a second model pass over every chunk), or
``mixed_vector`` (the chunk's sentence vectors, already embedded for
chunking, averaged, plus the header's own vector embedded once per header).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

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


def mixed_vector(
    sentence_vectors: np.ndarray, header_vector: np.ndarray | None, weight: float, words: Sequence[int] | None = None
) -> np.ndarray:
    """A chunk's vector from vectors already at hand: the mean of its
    sentences' vectors, made unit length, plus ``weight`` times its header's
    unit vector, the sum made unit length again. Without a header (or at
    weight 0) it is the normalised mean, so a one-sentence chunk keeps its
    sentence's direction. Normalising the mean first makes ``weight`` the
    header's share whatever the chunk's length or the sentences' spread.
    With ``words`` (each sentence's word count) the mean is weighted by
    them, as mean-pooling over the chunk's text counts every word piece."""
    rows = np.asarray(sentence_vectors, dtype=np.float32)
    if rows.ndim != 2 or len(rows) == 0:
        raise ValueError(f"need a non-empty (sentences, dims) array, got shape {rows.shape}")
    if words is None:
        mixed = _unit(rows.mean(axis=0))
    else:
        counts = np.asarray(words, dtype=np.float32)
        if counts.shape != (len(rows),) or (counts <= 0).any():
            raise ValueError(f"need one positive word count per sentence, got {list(words)} for {len(rows)}")
        mixed = _unit((rows * counts[:, None]).sum(axis=0))
    if header_vector is not None and weight > 0.0:
        mixed = _unit(mixed + np.float32(weight) * _unit(np.asarray(header_vector, dtype=np.float32)))
    return mixed


def word_count(text: str) -> int:
    """Whitespace words, at least 1 (the ``length`` pooling's weight)."""
    return max(1, len(text.split()))


def _unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` scaled to length 1; a zero vector (opposite sentences that
    cancel out) is returned as it is rather than divided by zero."""
    norm = float(np.linalg.norm(vector))
    return vector / np.float32(norm) if norm > 0.0 else vector
