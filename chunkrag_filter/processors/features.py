"""Signals around a candidate chunk, computed from the candidate set alone.

The calibrated filter first read each chunk on its own (cosine, BM25, rank,
length). A chunk's surroundings say more: an answer sentence often sits in
a passage whose other sentences also match the question, and a question
that names an entity is answered by text that names it too. Everything here
is computed from what the hybrid search already returned (text, header,
document id, position, the ``lead`` between a chunk and the one before it,
and the stage scores): no extra round trip to the engine, no model call.

Neighbours and passages are seen only among the candidates: a chunk whose
neighbour was not retrieved has no neighbour here (a gap ends a passage),
so the same function serves the evaluation (whole pools) and the gateway
(the best N of an index).
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

# Each feature, per candidate:
#   term_overlap    share of the query's content words found in the chunk
#   entity_overlap  share of the query's names and numbers (capitalised
#                   words past the first, tokens with digits) in the chunk;
#                   0 when the query names none
#   header_overlap  share of the query's content words in the chunk's header
#                   (title and section path)
#   inv_position    1 / (1 + the chunk's position in its document)
#   nb_cosine       the best cosine of the chunk's immediate neighbours
#                   (position +-1, same document) among the candidates; the
#                   chunk's own cosine when none was retrieved
#   passage_cosine_max / passage_cosine_mean
#                   best and mean cosine over the chunk's passage: the run of
#                   candidates of the same document at consecutive positions,
#                   broken at a blank line (a paragraph) or a missing position
#   passage_bm25_max  best normalised BM25 over the same passage
#   passage_gap     passage_cosine_max minus the best cosine of the query's
#                   candidates (<= 0)
CONTEXT_FEATURES = (
    "term_overlap",
    "entity_overlap",
    "header_overlap",
    "inv_position",
    "nb_cosine",
    "passage_cosine_max",
    "passage_cosine_mean",
    "passage_bm25_max",
    "passage_gap",
)

# Words that carry no topic: a question's "what", "is", "the" match any text.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    also many much one ones two get got made make name named known called whose""".split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def content_terms(text: str) -> set[str]:
    """Lower-cased words of at least two characters, stopwords left out."""
    return {w for w in (m.group().lower() for m in _WORD.finditer(text)) if len(w) > 1 and w not in STOPWORDS}


def entity_terms(query: str) -> set[str]:
    """The query's names and numbers: capitalised words after the first
    word, and any token holding a digit (lower-cased)."""
    words = [m.group() for m in _WORD.finditer(query)]
    out = set()
    for i, word in enumerate(words):
        if any(ch.isdigit() for ch in word) or (i > 0 and word[:1].isupper() and word.lower() not in STOPWORDS):
            out.add(word.lower())
    return out


def _share(wanted: set[str], found: set[str]) -> float:
    return len(wanted & found) / len(wanted) if wanted else 0.0


def passage_ids(doc_ids: Sequence[str], positions: Sequence[int], leads: Sequence[str | None]) -> list[int]:
    """A passage number per candidate: candidates of one document at
    consecutive positions share a passage unless the later one's ``lead``
    holds a blank line (a new paragraph)."""
    order = sorted(range(len(doc_ids)), key=lambda i: (doc_ids[i], positions[i]))
    out = [0] * len(doc_ids)
    passage, previous = -1, None
    for i in order:
        lead = leads[i] or ""
        continues = (
            previous is not None
            and doc_ids[previous] == doc_ids[i]
            and positions[i] == positions[previous] + 1
            and not _PARAGRAPH_BREAK.search(lead)
        )
        if not continues:
            passage += 1
        out[i] = passage
        previous = i
    return out


def context_features(
    query: str,
    texts: Sequence[str],
    headers: Sequence[str],
    doc_ids: Sequence[str],
    positions: Sequence[int],
    leads: Sequence[str | None],
    stage_scores: Sequence[Mapping[str, float]],
) -> list[dict[str, float]]:
    """The context features (:data:`CONTEXT_FEATURES`) of each candidate of
    one query, in the candidates' order."""
    terms, entities = content_terms(query), entity_terms(query)
    cosines = [float(s.get("cosine", 0.0)) for s in stage_scores]
    bm25 = [float(s.get("bm25", 0.0)) for s in stage_scores]
    best = max(cosines, default=0.0)
    at = {(d, p): i for i, (d, p) in enumerate(zip(doc_ids, positions))}
    passages = passage_ids(doc_ids, positions, leads)
    members: dict[int, list[int]] = {}
    for i, passage in enumerate(passages):
        members.setdefault(passage, []).append(i)
    rows = []
    for i, text in enumerate(texts):
        words = content_terms(text)
        neighbours = [at[k] for k in ((doc_ids[i], positions[i] - 1), (doc_ids[i], positions[i] + 1)) if k in at]
        group = members[passages[i]]
        passage_max = max(cosines[j] for j in group)
        rows.append(
            {
                "term_overlap": _share(terms, words),
                "entity_overlap": _share(entities, words),
                "header_overlap": _share(terms, content_terms(headers[i])),
                "inv_position": 1.0 / (1.0 + max(positions[i], 0)),
                "nb_cosine": max((cosines[j] for j in neighbours), default=cosines[i]),
                "passage_cosine_max": passage_max,
                "passage_cosine_mean": math.fsum(cosines[j] for j in group) / len(group),
                "passage_bm25_max": max(bm25[j] for j in group),
                "passage_gap": passage_max - best,
            }
        )
    return rows
