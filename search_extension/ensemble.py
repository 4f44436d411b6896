"""Multi-scale chunk ensembling, the pure part: fuse the ranked lists of
several chunk scales, then de-duplicate by character span.

Each scale's hybrid search returns its own ranked list; scores of different
scales are not comparable (a 2,000-token chunk gathers more BM25 than a
sentence), so each list is min-max normalised on its own and the lists are
merged by weighted normalised score. Then, walking that order, results of
one document are kept as disjoint spans: a chunk lying inside a kept span is
dropped (its text is already there), and a chunk no larger than the kept
spans it overlaps or touches (only whitespace between) merges with them into
one span, at the rank of the best of them, with text rebuilt exactly from
offsets, within a length cap (by default the largest scale's chunk length),
so spans do not snowball into whole documents.

Nothing here calls a cluster.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable, Mapping, Sequence

from chunkrag_core.chunk import Chunk
from search_extension.fusion import Ranked, minmax_normalise
from search_extension.segments import join_chunks

# A scale's weight when none is given: every scale's best hit counts the same
# (1.0 after normalisation), so the ranking, not the chunk size, decides.
DEFAULT_SCALE_WEIGHT = 1.0
# The stage score naming how many retrieved chunks a merged span holds.
MEMBERS = "ensemble_members"


def fuse_scales(
    lists: Sequence[tuple[int, Ranked]], weights: Mapping[int, float] | None = None
) -> list[tuple[Hashable, float]]:
    """``(scale, [(key, score), ...] best first)`` per scale -> one list of
    ``(key, weight * min-max normalised score)``, best first. Ties keep the
    order given (scales as listed, then each list's own rank). A key in
    several lists keeps its best score."""
    weights = weights or {}
    fused: dict[Hashable, float] = {}
    for scale, ranked in lists:
        weight = weights.get(scale, DEFAULT_SCALE_WEIGHT)
        normalised = minmax_normalise(ranked)
        for key, _ in ranked:
            score = weight * normalised[key]
            if key not in fused or score > fused[key]:
                fused[key] = score
    return sorted(fused.items(), key=lambda item: -item[1])


def gap_text(later: Chunk, gap: int) -> str | None:
    """The document text of the ``gap`` characters just before ``later``,
    when its lead (the text since the chunk before it at its scale) holds
    them; None when it does not."""
    if gap == 0:
        return ""
    if later.lead is None or len(later.lead) < gap:
        return None
    return later.lead[len(later.lead) - gap :]


def touches(group: Sequence[Chunk], chunk: Chunk) -> bool:
    """Whether ``chunk`` overlaps the span of ``group`` (chunks of its
    document) or meets it with only whitespace between."""
    if chunk.doc_id != group[0].doc_id:
        return False
    start, end = min(c.start for c in group), max(c.end for c in group)
    if chunk.start < end and start < chunk.end:
        return True
    if chunk.start >= end:
        between = gap_text(chunk, chunk.start - end)
    elif chunk.end <= start:
        between = gap_text(min(group, key=lambda c: c.start), start - chunk.end)
    else:  # an empty chunk at an edge
        between = ""
    return between is not None and not between.strip()


def covered(group: Sequence[Chunk], chunk: Chunk) -> bool:
    """Whether ``chunk`` lies wholly inside the span of ``group``."""
    return (
        chunk.doc_id == group[0].doc_id
        and min(c.start for c in group) <= chunk.start
        and chunk.end <= max(c.end for c in group)
    )


def overlaps(group: Sequence[Chunk], chunk: Chunk) -> bool:
    """Whether ``chunk`` shares at least one character with ``group``'s span."""
    return (
        chunk.doc_id == group[0].doc_id
        and chunk.start < max(c.end for c in group)
        and min(c.start for c in group) < chunk.end
    )


def merge_spans(ranked: Sequence[Chunk], size: int | None = None, max_span_chars: int | None = None) -> list[Chunk]:
    """Chunks best first -> disjoint spans best first (at most ``size``).

    Walking the chunks in order, a kept span grows only by chunks no larger
    (in scale) than the largest chunk already in it, so a low-ranked large
    chunk never swells a better-ranked small one into its whole context:

    - a chunk inside a kept span is dropped (its text is there already);
    - a chunk that overlaps or touches (only whitespace between) kept spans
      holding a chunk of its scale or larger joins them into one span, at
      the best rank, while the union stays within ``max_span_chars``;
    - otherwise a chunk that overlaps a kept span is dropped (it would
      repeat text), and one that only touches is kept as a span of its own;
    - a chunk longer than ``max_span_chars`` is never kept, so it hides none
      of the smaller chunks inside it (a caller with a character budget
      passes the budget).

    A span of several chunks is the best one's record (id, scale, scores,
    vector) with the union's text and offsets, and ``ensemble_members``
    among its stage scores."""
    groups: list[list[Chunk]] = []
    for chunk in ranked:
        if max_span_chars is not None and chunk.end - chunk.start > max_span_chars:
            continue
        if any(covered(group, chunk) for group in groups):
            continue
        joined = [i for i, group in enumerate(groups) if touches(group, chunk)]
        if joined:
            kept = [c for i in joined for c in groups[i]]
            members = [*kept, chunk]
            union = max(c.end for c in members) - min(c.start for c in members)
            small_enough = chunk.scale <= max(c.scale for c in kept)
            if small_enough and (max_span_chars is None or union <= max_span_chars):
                first = joined[0]
                groups = [
                    members if i == first else group for i, group in enumerate(groups) if i == first or i not in joined
                ]
                continue
            if any(overlaps(groups[i], chunk) for i in joined):
                continue
        groups.append([chunk])
    spans = [span_chunk(group) for group in groups]
    return spans if size is None else spans[:size]


def span_chunk(group: Sequence[Chunk]) -> Chunk:
    """One record for chunks of one document that together cover a span:
    the first (best) chunk's, with the text of the whole span."""
    best = group[0]
    if len(group) == 1:
        return best
    ordered = sorted(group, key=lambda c: (c.start, c.end))
    return dataclasses.replace(
        best,
        text=join_chunks(ordered),
        start=ordered[0].start,
        end=max(c.end for c in group),
        lead=ordered[0].lead,
        sentence_count=max(c.sentence_count for c in group),
        stage_scores={**best.stage_scores, MEMBERS: float(len(group))},
    )
