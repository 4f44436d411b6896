"""Relevant segment extraction (dsRAG's RSE), as pure functions.

Per query, the candidate chunks are grouped by document. Every chunk of a
document gets a value: a retrieved chunk ``exp(-rank / decay_rate) *
relevance - penalty``, every other chunk ``-penalty``. A segment's value is
the sum of its chunks' values, so the best segments are maximum-sum
contiguous runs (a bounded maximum-subarray search), taken greedily while
they fit the budgets and are worth at least ``min_segment_value``.

A segment always starts and ends on a retrieved chunk of positive value
(trimming a negative end only raises the sum), so its character span is
known from the candidates alone, before any neighbour is fetched; the
neighbours in between come later (``missing_positions``), and the text is
rebuilt from the chunks' offsets (``join_chunks``).

Nothing here calls a cluster or a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Iterable, Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE, Chunk

# The judge's stage score that means "P(this chunk is relevant)".
JUDGED_SCORE = "combined"


class SegmentError(ValueError):
    """Segments asked of inputs that cannot make them."""


@dataclass(frozen=True, slots=True)
class SegmentSettings:
    """dsRAG's "balanced" preset by default."""

    # Longest segment, in chunks: bounds how much one document can take.
    max_segment_chunks: int = 15
    # All segments of one query together, in chunks.
    max_total_chunks: int = 30
    # All segments of one query together, in characters of document text
    # (None: only the chunk budget applies). Chunk counts mean little when
    # chunk lengths vary, so callers with a prompt budget set this.
    max_total_chars: int | None = None
    # A segment worth less than this is not returned; with the penalty below
    # a lone retrieved chunk needs relevance >= 0.68 at rank 0 to reach it.
    min_segment_value: float = 0.5
    # Subtracted from every chunk's value: the price of one more chunk of
    # text. Larger gives shorter segments (dsRAG: 0.1 -> 10-20 chunks,
    # 0.2 -> 4-10, 0.3 -> 2-6).
    irrelevant_chunk_penalty: float = 0.18
    # Rank decay: a chunk at rank r counts exp(-r / decay_rate) of its
    # relevance, so the search's order still matters when relevances tie.
    decay_rate: float = 30.0

    def __post_init__(self) -> None:
        if self.max_segment_chunks < 1 or self.max_total_chunks < 1:
            raise SegmentError("max_segment_chunks and max_total_chunks must be at least 1")
        if self.max_total_chars is not None and self.max_total_chars < 1:
            raise SegmentError(f"max_total_chars must be at least 1, got {self.max_total_chars}")
        if self.irrelevant_chunk_penalty < 0:
            raise SegmentError("irrelevant_chunk_penalty must not be negative")
        if self.decay_rate <= 0:
            raise SegmentError(f"decay_rate must be positive, got {self.decay_rate}")


def chunk_value(rank: int, relevance: float, settings: SegmentSettings = SegmentSettings()) -> float:
    """dsRAG's value of a retrieved chunk at ``rank`` (0 = best)."""
    return math.exp(-rank / settings.decay_rate) * relevance - settings.irrelevant_chunk_penalty


def relevances(chunks: Sequence[Chunk]) -> list[float]:
    """Each candidate's relevance in 0..1: the judge's probability when it
    was judged, else its retrieval score min-max normalised over the
    candidates (the best 1, the worst 0; all 1 when they tie)."""
    scores = [c.score for c in chunks if c.score is not None]
    low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
    out = []
    for chunk in chunks:
        judged = chunk.stage_scores.get(JUDGED_SCORE)
        if judged is not None:
            out.append(min(max(float(judged), 0.0), 1.0))
        elif chunk.score is None:
            out.append(0.0)
        elif high == low:
            out.append(1.0)
        else:
            out.append((chunk.score - low) / (high - low))
    return out


@dataclass(frozen=True, slots=True)
class DocumentValues:
    """The values of one document's chunks at positions 0..len(values)-1,
    and the character spans of the retrieved ones."""

    doc_id: str
    values: tuple[float, ...]
    spans: Mapping[int, tuple[int, int]]
    # Positions count within one scale (ensembling): a segment is a run of
    # one document's chunks at one scale.
    scale: int = BASE_SCALE

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        object.__setattr__(self, "spans", MappingProxyType(dict(self.spans)))


def document_values(
    chunks: Sequence[Chunk], settings: SegmentSettings = SegmentSettings(), relevance: Sequence[float] | None = None
) -> list[DocumentValues]:
    """Chunk values per document, from candidates in rank order.

    ``relevance`` defaults to :func:`relevances`. Positions past the last
    retrieved chunk of a document are left out: a segment never ends on an
    unretrieved chunk, so they can never be part of one. A chunk retrieved
    twice keeps its best rank. Documents come in order of their best chunk;
    with chunks of several scales (ensembling), each scale of a document is
    valued on its own, as if it were a document of its own.
    """
    relevance = relevances(chunks) if relevance is None else list(relevance)
    if len(relevance) != len(chunks):
        raise SegmentError(f"{len(chunks)} chunks need {len(chunks)} relevances, got {len(relevance)}")
    per_doc: dict[tuple[str, int], dict[int, tuple[float, tuple[int, int]]]] = {}
    for rank, (chunk, rel) in enumerate(zip(chunks, relevance)):
        known = per_doc.setdefault((chunk.doc_id, chunk.scale), {})
        if chunk.position not in known:
            known[chunk.position] = (chunk_value(rank, rel, settings), (chunk.start, chunk.end))
    out = []
    for (doc_id, scale), known in per_doc.items():
        length = max(known) + 1
        values = [known[p][0] if p in known else -settings.irrelevant_chunk_penalty for p in range(length)]
        out.append(DocumentValues(doc_id, tuple(values), {p: span for p, (_, span) in known.items()}, scale))
    return out


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """Chunks ``first .. stop-1`` of ``doc_id``, covering document text
    ``start .. end``."""

    doc_id: str
    first: int
    stop: int
    value: float
    start: int
    end: int
    scale: int = BASE_SCALE

    @property
    def positions(self) -> range:
        return range(self.first, self.stop)

    @property
    def chars(self) -> int:
        return self.end - self.start


def best_segments(
    documents: Sequence[DocumentValues], settings: SegmentSettings = SegmentSettings()
) -> list[SegmentPlan]:
    """The greedy RSE search: repeatedly take the highest-value segment that
    overlaps none already taken and fits what is left of the budgets, until
    the best one left is worth less than ``min_segment_value``. Segments come
    back best first. Ties go to the shorter segment, then the earlier
    document and position, so the outcome is deterministic."""
    chosen: list[SegmentPlan] = []
    used_chunks = used_chars = 0
    prefix = [_prefix_sums(d.values) for d in documents]
    while True:
        best: tuple[tuple[float, int, int, int], SegmentPlan] | None = None
        for d_index, doc in enumerate(documents):
            taken = [(s.first, s.stop) for s in chosen if s.doc_id == doc.doc_id and s.scale == doc.scale]
            ends = sorted(p for p, v in enumerate(doc.values) if v > 0 and p in doc.spans)
            for first in ends:
                for last in ends:
                    if last < first or last - first + 1 > settings.max_segment_chunks:
                        continue
                    stop = last + 1
                    if any(first < t_stop and t_first < stop for t_first, t_stop in taken):
                        continue
                    start, end = doc.spans[first][0], doc.spans[last][1]
                    if used_chunks + (stop - first) > settings.max_total_chunks:
                        continue
                    if settings.max_total_chars is not None and used_chars + (end - start) > settings.max_total_chars:
                        continue
                    value = prefix[d_index][stop] - prefix[d_index][first]
                    key = (-value, stop - first, d_index, first)
                    if best is None or key < best[0]:
                        best = (key, SegmentPlan(doc.doc_id, first, stop, value, start, end, doc.scale))
        if best is None or best[1].value < settings.min_segment_value:
            return chosen
        plan = best[1]
        chosen.append(plan)
        used_chunks += plan.stop - plan.first
        used_chars += plan.chars


def _prefix_sums(values: Sequence[float]) -> list[float]:
    sums = [0.0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums


def missing_positions(
    plans: Iterable[SegmentPlan], have: Iterable[Chunk], scale: int = BASE_SCALE
) -> dict[str, tuple[int, ...]]:
    """Per document, the positions at ``scale`` the plans need that ``have`` lacks."""
    held = {(c.doc_id, c.position) for c in have if c.scale == scale}
    missing: dict[str, set[int]] = {}
    for plan in plans:
        if plan.scale != scale:
            continue
        for position in plan.positions:
            if (plan.doc_id, position) not in held:
                missing.setdefault(plan.doc_id, set()).add(position)
    return {doc_id: tuple(sorted(positions)) for doc_id, positions in missing.items()}


def join_chunks(chunks: Sequence[Chunk]) -> str:
    """The document text a run of chunks covers, rebuilt from their offsets.

    Chunks are placed in offset order; where two overlap, the overlapping
    characters are written once; where text lies between two chunks, the
    later chunk's ``lead`` (the document text since the chunk before it at
    its scale) fills it when it is at least that long (its end is the gap:
    chunks of different scales merged by ensembling), else spaces of the
    same length, so every chunk's text still sits at its own offset.
    """
    if not chunks:
        return ""
    ordered = sorted(chunks, key=lambda c: (c.start, c.end))
    pieces: list[str] = []
    cursor = ordered[0].start
    for chunk in ordered:
        if len(chunk.text) != chunk.end - chunk.start:
            raise SegmentError(
                f"chunk {chunk.chunk_id} holds {len(chunk.text)} characters but spans {chunk.start}..{chunk.end}"
            )
        if chunk.start > cursor:
            gap = chunk.start - cursor
            lead = chunk.lead
            pieces.append(lead[len(lead) - gap :] if lead is not None and len(lead) >= gap else " " * gap)
            cursor = chunk.start
        if chunk.end > cursor:
            pieces.append(chunk.text[cursor - chunk.start :])
            cursor = chunk.end
    return "".join(pieces)


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous run of one document's chunks and the text they cover."""

    doc_id: str
    first: int
    stop: int
    value: float
    start: int
    end: int
    text: str
    chunks: tuple[Chunk, ...]
    scale: int = BASE_SCALE

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(c.chunk_id for c in self.chunks)

    @property
    def title(self) -> str:
        return self.chunks[0].title if self.chunks else ""

    @property
    def header(self) -> str:
        return self.chunks[0].header if self.chunks else ""


def assemble(plan: SegmentPlan, chunks: Iterable[Chunk]) -> Segment:
    """The segment of ``plan`` from chunks that include every position it
    spans (others are ignored); a missing one is an error, never a hole."""
    by_position = {
        c.position: c
        for c in chunks
        if c.doc_id == plan.doc_id and c.scale == plan.scale and c.position in plan.positions
    }
    missing = [p for p in plan.positions if p not in by_position]
    if missing:
        raise SegmentError(f"segment {plan.doc_id}[{plan.first}:{plan.stop}] lacks chunk positions {missing}")
    run = tuple(by_position[p] for p in plan.positions)
    return Segment(
        plan.doc_id,
        plan.first,
        plan.stop,
        plan.value,
        min(c.start for c in run),
        max(c.end for c in run),
        join_chunks(run),
        run,
        plan.scale,
    )


# Chunks at the given positions of each document, in one engine request
# (search_extension.neighbours.fetch_positions over a search backend and an index).
# Called with the wanted positions alone for base chunks, and with
# ``scale=`` for a larger scale's (ensembling).
FetchPositions = Callable[..., Sequence[Chunk]]


def extract_segments(
    candidates: Sequence[Chunk],
    fetch: FetchPositions,
    settings: SegmentSettings = SegmentSettings(),
    relevance: Sequence[float] | None = None,
) -> list[Segment]:
    """RSE over candidates in rank order: plan the best segments, fetch the
    neighbours they lack in one call, and rebuild each segment's text.
    Chunks of a segment that were candidates keep their scores. Candidates of
    several scales (ensembling) make segments of one scale each, and the
    neighbours of each larger scale come in one more call."""
    plans = best_segments(document_values(candidates, settings, relevance), settings)
    fetched: list[Chunk] = []
    for scale in sorted({plan.scale for plan in plans}):
        missing = missing_positions(plans, candidates, scale)
        if missing:
            fetched.extend(fetch(missing) if scale == BASE_SCALE else fetch(missing, scale=scale))
    held = [*fetched, *reversed(candidates)]  # a candidate wins, at its best rank
    return [assemble(plan, held) for plan in plans]
