"""Which sentences of a field are chunked at query time (pure).

Embedding every sentence of every hit is what a cold post-search spends its
time on, while only a hit's best passages (``max_passages``) ever reach the
filter. A field is therefore narrowed before it is chunked: its sentences
(split as the chunker splits them) are scored with BM25 against the query
(words cut to their first letters, accents folded, so "hosts" finds
"host", "brained" finds "brain" and "Ogedei" finds "Ögedei"), each sentence's score raised by a
share of its neighbours' (the answer often follows the sentence that
names the question's words: "They killed many..." after "...the Battle of
Jumonville Glen."), the best ``budget`` are kept, and each run of
consecutive kept sentences within a section becomes a section of the
narrowed document. The chunker
then makes its usual chunks (semantic split points, vectors) of those runs
only; offsets still count within the field's text. A document's split is
kept (:class:`SentenceCache`), so a document seen before is not split again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Sequence

from cachetools import LRUCache

from ingest_pipeline.sentences import bounded_sentence_spans, length_caps, resolved_language
from ingest_pipeline.sources import Document, Section
from search_extension.bm25 import TermIndex, terms

# What the query-time source keeps of documents' splits, in bytes (about:
# FieldSentences.nbytes, within 3% of what tracemalloc counted): 1.5 kB a
# sentence of a 2,000-word document (its vocabulary), 0.3 kB of a 5 MB one.
CACHED_BYTES = 64 << 20
# A word's first this many letters are its term when sentences are
# preselected (after a plural's "s"): a stemmer for the price of a slice
# ("key" and "keys", "rotate" and "rotated", "brain" and "brained" meet).
# On 600 SQuAD questions held apart from the measured ones it finds the
# answer's sentence as often as Porter's stemmer, more often than whole
# words (16 sentences: 596 against 590, with the neighbours' share).
PREFIX_LETTERS = 5
# The share of each neighbouring sentence's BM25 score added to a
# sentence's own: a sentence right before or after one that matches the
# query is kept before a weaker match elsewhere. 0.35 each side found the
# answer's sentence most often on the same 600, against none, 0.25 or 0.5
# of the sentence before only, and 0.5 before with 0.25 after.
NEIGHBOUR_SHARE = 0.35
# Scripts written without spaces between words (Chinese, Japanese, Thai;
# Korean's hangul too): a "word" there is a whole run of a clause, whose
# first letters say nothing of its meaning, so it is kept whole.
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def preselect_terms(text: str) -> list[str]:
    """The terms a sentence (or the query) is preselected by: BM25's words
    (`bm25.terms`) with their accents folded, a final "s" left out (not of
    "ss", nor of a word of three letters), cut to their first
    ``PREFIX_LETTERS`` letters; a word of a script written without spaces
    is kept whole."""
    out = []
    for word in terms(text):
        if not word.isascii():
            if _UNSPACED.search(word):
                out.append(word)
                continue
            word = folded(word)
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word[:PREFIX_LETTERS])
    return out


def folded(word: str) -> str:
    """``word`` without its accents ("ögedei": "ogedei")."""
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


def with_neighbours(scores: Sequence[float], share: float = NEIGHBOUR_SHARE) -> list[float]:
    """Each score plus ``share`` of the scores just before and after it."""
    n = len(scores)
    return [
        scores[i] + share * ((scores[i - 1] if i > 0 else 0.0) + (scores[i + 1] if i + 1 < n else 0.0))
        for i in range(n)
    ]


def best_sentences(scores: Sequence[float], budget: int) -> list[int]:
    """The positions of the ``budget`` best scores (ties: the earlier
    first), in position order; all of them when ``budget`` is 0 or covers them."""
    if budget <= 0 or budget >= len(scores):
        return list(range(len(scores)))
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return sorted(ranked[:budget])


def runs(positions: Sequence[int], section_of: Sequence[int]) -> list[tuple[int, int]]:
    """Runs ``[first, last]`` of consecutive ``positions`` (ascending) that lie
    in one section (``section_of[i]``: sentence i's section number)."""
    out: list[tuple[int, int]] = []
    for i in positions:
        if out and out[-1][1] == i - 1 and section_of[i] == section_of[i - 1]:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


@dataclass(frozen=True, slots=True)
class FieldSentences:
    """A document's sentences as the chunker splits them: their spans, the
    number of the section each lies in, and their terms (`preselect_terms`),
    counted for BM25."""

    spans: tuple[tuple[int, int], ...]
    section_of: tuple[int, ...]
    terms: TermIndex

    @property
    def nbytes(self) -> int:
        """About what it holds in memory: its spans (a tuple of two ints
        each) and its term index."""
        return 128 * len(self.spans) + self.terms.nbytes() + 64


def split_sentences(document: Document, max_chars: int, language: str) -> FieldSentences:
    spans, section_of = [], []
    language = resolved_language(document.text, language)  # as the chunker will
    longest = length_caps(language, max_chars, 0)[0]
    for number, section in enumerate(document.sections):
        found = bounded_sentence_spans(document.text, section.start, section.end, longest, language)
        spans.extend(found)
        section_of.extend([number] * len(found))
    counted = TermIndex.of([document.text[s:e] for s, e in spans], preselect_terms)
    return FieldSentences(tuple(spans), tuple(section_of), counted)


class SentenceCache:
    """The split of the documents last narrowed, by the sha256 of their text
    and sections (and the cap and language that split them), up to
    ``max_bytes`` in all: splitting is most of what narrowing a
    document costs (a 5 MB field takes seconds), and the same document comes
    back with every query that finds it."""

    def __init__(self, max_bytes: int = CACHED_BYTES):
        self._entries: LRUCache[str, FieldSentences] = LRUCache(
            maxsize=max(1, max_bytes), getsizeof=lambda entry: entry.nbytes
        )
        self._lock = threading.Lock()

    def split(self, document: Document, max_chars: int, language: str) -> FieldSentences:
        parts = [document.text, [(s.start, s.end) for s in document.sections], max_chars, language]
        key = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()
        with self._lock:
            found = self._entries.get(key)
        if found is None:
            found = split_sentences(document, max_chars, language)
            with self._lock:
                try:
                    self._entries[key] = found
                except ValueError:  # one document larger than the whole cache: not kept
                    pass
        return found


def preselected(
    document: Document,
    query: str,
    budget: int,
    max_chars: int,
    language: str = "english",
    sentences: SentenceCache | None = None,
) -> Document:
    """``document`` narrowed to the runs of its ``budget`` sentences best
    by BM25 against ``query`` (`preselect_terms`, idf over its own
    sentences) with a share of their neighbours' (`with_neighbours`); the document
    itself when they all fit, when ``budget`` is 0 or the query is blank.
    ``sentences``: where the document's split is kept between queries."""
    if budget <= 0 or not query.strip():
        return document
    split = (
        sentences.split(document, max_chars, language)
        if sentences is not None
        else split_sentences(document, max_chars, language)
    )
    spans, section_of = split.spans, split.section_of
    if len(spans) <= budget:
        return document
    kept = best_sentences(with_neighbours(split.terms.scores(query)), budget)
    sections = tuple(
        Section(document.sections[section_of[first]].path, spans[first][0], spans[last][1])
        for first, last in runs(kept, section_of)
    )
    return dataclasses.replace(document, sections=sections)
