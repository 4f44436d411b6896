"""BM25 among a handful of texts (pure): the passages of one response, or
the sentences of one field, scored against the query with their own idf."""

from __future__ import annotations

import math
import re
import sys
from array import array
from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

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
    wanted = set(terms(query))
    if not texts or not wanted:
        return [0.0] * len(texts)
    docs = [Counter(terms(t)) for t in texts]
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


@dataclass(frozen=True, slots=True)
class TermIndex:
    """Texts counted once for BM25: for each term the texts holding it, as
    one array of (text number, the term's count there) pairs, and each
    text's length in terms. Arrays of 32-bit integers: a long document's
    index costs a few bytes an occurrence, not a Python object each."""

    postings: Mapping[str, array]
    lengths: array
    # How a text (and the query) is cut into terms.
    analyzer: Callable[[str], list[str]] = terms

    @classmethod
    def of(cls, texts: Sequence[str], analyzer: Callable[[str], list[str]] = terms) -> TermIndex:
        postings: dict[str, array] = {}
        lengths = array("I")
        for number, text in enumerate(texts):
            counted = Counter(analyzer(text))
            lengths.append(sum(counted.values()))
            for term, count in counted.items():
                postings.setdefault(term, array("I")).extend((number, count))
        return cls(MappingProxyType(postings), lengths, analyzer)

    def nbytes(self) -> int:
        """About what the index holds in memory (its terms, arrays and map)."""
        held = sys.getsizeof(self.lengths) + sys.getsizeof(dict(self.postings))
        return held + sum(sys.getsizeof(t) + sys.getsizeof(p) for t, p in self.postings.items())

    def scores(self, query: str, k1: float = BM25_K1, b: float = BM25_B) -> list[float]:
        """``bm25_scores`` of the texts against ``query`` (with the default
        analyzer: the same numbers, each text's terms added in the same
        order), reading only the texts that hold a query term."""
        n = len(self.lengths)
        out = [0.0] * n
        wanted = set(self.analyzer(query))
        if not n or not wanted:
            return out
        average = (sum(self.lengths) / n) or 1.0
        for t in wanted:
            found = self.postings.get(t)
            if not found:
                continue
            df = len(found) // 2
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for at in range(0, len(found), 2):
                number, tf = found[at], found[at + 1]
                out[number] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.lengths[number] / average))
        return out
