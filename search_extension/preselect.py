"""Which sentences of a field are chunked at query time (pure).

Embedding every sentence of every hit is what a cold post-search spends its
time on, while only a hit's best passages (``max_passages``) ever reach the
filter. A field is therefore narrowed before it is chunked: its sentences
(split as the chunker splits them) are scored with BM25 against the query,
the best ``budget`` are kept, and each run of consecutive kept sentences
within a section becomes a section of the narrowed document. The chunker
then makes its usual chunks (semantic split points, vectors) of those runs
only; offsets still count within the field's text.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ingest_pipeline.sentences import bounded_sentence_spans, resolved_language
from ingest_pipeline.sources import Document, Section
from search_extension.bm25 import bm25_scores


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


def preselected(document: Document, query: str, budget: int, max_chars: int, language: str = "english") -> Document:
    """``document`` narrowed to the runs of its ``budget`` sentences best
    by BM25 against ``query`` (idf over its own sentences); the document
    itself when they all fit, when ``budget`` is 0 or the query is blank."""
    if budget <= 0 or not query.strip():
        return document
    spans, section_of = [], []
    language = resolved_language(document.text, language)  # as the chunker will
    for number, section in enumerate(document.sections):
        found = bounded_sentence_spans(document.text, section.start, section.end, max_chars, language)
        spans.extend(found)
        section_of.extend([number] * len(found))
    if len(spans) <= budget:
        return document
    kept = best_sentences(bm25_scores(query, [document.text[s:e] for s, e in spans]), budget)
    sections = tuple(
        Section(document.sections[section_of[first]].path, spans[first][0], spans[last][1])
        for first, last in runs(kept, section_of)
    )
    return dataclasses.replace(document, sections=sections)
