"""The work a filtered search asks for, estimated before it starts, and the
bound on it (the gateway's ``max_work``, CHUNKRAG_GATEWAY_MAX_WORK).

The expensive stages read the query beside each passage that goes to the
filter: the relevance model (``relevance: crossencoder``, ``rerank:
local``) reads every pair, and the LLM judge has the query in every
prompt. So the estimate is candidates (the chunks retrieved, or the hits
post-searched) x the passages of each that go to the filter (one per
chunk; at most ``max_passages`` per hit) x the query's tokens, counted as
words and punctuation marks: about the model's word pieces for prose, and
cheap enough to count on the event loop. It is read from the request alone,
before anything is searched, so a request over the bound costs nothing but
its 400. What the estimate does not see (a short query over many long
documents) the request's deadline bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from search_extension.options import OptionError

_TOKEN = re.compile(r"\w+|[^\w\s]")


def query_tokens(text: str) -> int:
    """Words and punctuation marks of ``text`` (at least 1)."""
    return max(1, sum(1 for _ in _TOKEN.finditer(text)))


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    candidates: int
    passages: int  # of each candidate
    tokens: int  # of the query

    @property
    def total(self) -> int:
        return self.candidates * self.passages * self.tokens

    def describe(self) -> str:
        return (
            f"{self.candidates} candidates x {self.passages} passages each x {self.tokens} query tokens "
            f"= {self.total:,}"
        )


def estimate(text: str, candidates: int, passages: int = 1) -> WorkEstimate:
    return WorkEstimate(max(0, candidates), max(1, passages), query_tokens(text))


def check_work(work: WorkEstimate, limit: int | None) -> None:
    """An :class:`OptionError` (400) when ``work`` is over ``limit`` (None: no limit)."""
    if limit is not None and work.total > limit:
        raise OptionError(
            f"this search asks for too much work: {work.describe()}, over the gateway's limit of {limit:,} "
            "(CHUNKRAG_GATEWAY_MAX_WORK); ask for fewer candidates or hits (size), fewer passages per hit "
            "(max_passages), or send a shorter query"
        )
