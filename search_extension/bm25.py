"""BM25 among a handful of texts (pure): the passages of one response, or
the sentences of one field, scored against the query with their own idf."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Mapping, Sequence

from chunkrag_filter.processors.features import STOPWORDS

# BM25's parameters (Lucene's defaults) for scoring passages among themselves.
BM25_K1 = 1.2
BM25_B = 0.75

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def terms(text: str) -> list[str]:
    """Lower-cased words of two characters or more, stopwords left out."""
    return [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS]


def bm25_scores(query: str, texts: Sequence[str], k1: float = BM25_K1, b: float = BM25_B) -> list[float]:
    """Okapi BM25 of ``query`` against each text, the texts being the whole
    collection (idf counted over them)."""
    if not texts or not terms(query):
        return [0.0] * len(texts)
    return bm25_of_counts(query, [Counter(terms(t)) for t in texts], k1, b)


def bm25_of_counts(
    query: str, docs: Sequence[Mapping[str, int]], k1: float = BM25_K1, b: float = BM25_B
) -> list[float]:
    """``bm25_scores`` of texts already counted (each text's ``terms``, counted)."""
    wanted = set(terms(query))
    if not docs or not wanted:
        return [0.0] * len(docs)
    lengths = [sum(d.values()) for d in docs]
    average = (sum(lengths) / len(lengths)) or 1.0
    n = len(docs)
    idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t in wanted for df in [sum(1 for d in docs if t in d)]}
    out = []
    for doc, length in zip(docs, lengths):
        score = 0.0
        for t in wanted:
            tf = doc.get(t, 0)
            if tf:
                score += idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
        out.append(score)
    return out
