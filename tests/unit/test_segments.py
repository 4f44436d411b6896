"""Relevant segment extraction: the pure core, with literal numbers, and the
exact rebuilding of segment text, property-tested."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from chunkrag_core.chunk import Chunk
from search_extension.segments import (
    DocumentValues,
    SegmentError,
    SegmentPlan,
    SegmentSettings,
    assemble,
    best_segments,
    chunk_value,
    document_values,
    join_chunks,
    missing_positions,
    relevances,
)


def chunk(
    doc: str, position: int, start: int, end: int, score: float | None = None, text: str | None = None, **stage
) -> Chunk:
    return Chunk(
        doc_id=doc,
        position=position,
        text=text if text is not None else "x" * (end - start),
        start=start,
        end=end,
        score=score,
        stage_scores=stage,
    )


def test_chunk_value_is_decayed_relevance_minus_the_penalty():
    assert chunk_value(0, 1.0) == pytest.approx(0.82)
    assert chunk_value(30, 1.0) == pytest.approx(math.exp(-1) - 0.18)  # 0.18788
    assert chunk_value(0, 0.0) == pytest.approx(-0.18)
    assert chunk_value(10, 0.5, SegmentSettings(decay_rate=10, irrelevant_chunk_penalty=0.3)) == pytest.approx(
        0.5 / math.e - 0.3
    )


def test_relevance_is_the_judged_probability_else_the_normalised_score():
    chunks = [
        chunk("a", 0, 0, 1, score=4.0),
        chunk("a", 1, 1, 2, score=2.0),
        chunk("a", 2, 2, 3, score=1.0, combined=0.9),
        chunk("a", 3, 3, 4),
    ]
    assert relevances(chunks) == pytest.approx([1.0, 1 / 3, 0.9, 0.0])
    # Scores that tie all count fully; a judged probability is clipped to 0..1.
    assert relevances([chunk("a", 0, 0, 1, score=2.0), chunk("a", 1, 1, 2, score=2.0, combined=1.4)]) == [1.0, 1.0]


def test_document_values_fill_unretrieved_positions_with_minus_the_penalty():
    chunks = [
        chunk("a", 3, 30, 40, score=1.0),
        chunk("b", 0, 0, 5, score=0.5),
        chunk("a", 1, 10, 20, score=0.0),
        chunk("a", 3, 30, 40, score=0.1),
    ]
    docs = document_values(chunks)
    assert [d.doc_id for d in docs] == ["a", "b"]
    a, b = docs
    # ranks 0 and 2; the repeat of a:3 at rank 3 is ignored
    assert a.values == pytest.approx((-0.18, 0.0 * math.exp(-2 / 30) - 0.18, -0.18, 0.82))
    assert dict(a.spans) == {1: (10, 20), 3: (30, 40)}
    assert b.values == pytest.approx((0.5 * math.exp(-1 / 30) - 0.18,))


def test_document_values_reject_a_relevance_list_of_the_wrong_length():
    with pytest.raises(SegmentError):
        document_values([chunk("a", 0, 0, 1, score=1.0)], relevance=[0.5, 0.5])


def _doc(values, spans=None):
    spans = spans if spans is not None else {p: (p * 100, p * 100 + 90) for p, v in enumerate(values) if v > 0}
    return DocumentValues("a", tuple(values), spans)


VALUES = (0.82, -0.18, 0.7, -0.18, -0.18, -0.18, 0.6)


def test_one_long_segment_when_the_gaps_cost_less_than_they_join():
    (segment,) = best_segments([_doc(VALUES)])
    # 0.82 - 0.18 + 0.7 - 3 * 0.18 + 0.6
    assert (segment.first, segment.stop) == (0, 7)
    assert segment.value == pytest.approx(1.40)
    assert (segment.start, segment.end) == (0, 690)


def test_max_segment_length_splits_into_two_segments_best_first():
    plans = best_segments([_doc(VALUES)], SegmentSettings(max_segment_chunks=3))
    assert [(p.first, p.stop) for p in plans] == [(0, 3), (6, 7)]
    assert [p.value for p in plans] == pytest.approx([1.34, 0.6])


def test_a_segment_below_the_minimum_value_is_not_returned():
    plans = best_segments([_doc(VALUES)], SegmentSettings(max_segment_chunks=3, min_segment_value=0.65))
    assert [(p.first, p.stop) for p in plans] == [(0, 3)]
    assert best_segments([_doc((0.3, -0.18, 0.3))]) == []  # 0.42 in all


def test_the_overall_chunk_budget_limits_what_is_taken():
    plans = best_segments([_doc(VALUES)], SegmentSettings(max_segment_chunks=3, max_total_chunks=3))
    assert [(p.first, p.stop) for p in plans] == [(0, 3)]
    plans = best_segments([_doc(VALUES)], SegmentSettings(max_total_chunks=2))
    # (0, 3) needs 3 chunks; the best that fits is the single chunk 0, then 2.
    assert [(p.first, p.stop) for p in plans] == [(0, 1), (2, 3)]


def test_the_character_budget_counts_document_text_from_first_start_to_last_end():
    # Whole run: 690 characters; 0..2 covers 0..290; chunk 6 is 90.
    plans = best_segments([_doc(VALUES)], SegmentSettings(max_total_chars=400))
    assert [(p.first, p.stop, p.chars) for p in plans] == [(0, 3, 290), (6, 7, 90)]
    plans = best_segments([_doc(VALUES)], SegmentSettings(max_total_chars=200))
    # 0 and 2 alone (90 characters each); chunk 6 no longer fits.
    assert [(p.first, p.stop) for p in plans] == [(0, 1), (2, 3)]


def test_segments_across_documents_go_best_first():
    a = DocumentValues("a", (0.6,), {0: (0, 10)})
    b = DocumentValues("b", (0.7, 0.7), {0: (0, 10), 1: (11, 20)})
    plans = best_segments([a, b])
    assert [(p.doc_id, p.first, p.stop) for p in plans] == [("b", 0, 2), ("a", 0, 1)]
    assert plans[0].value == pytest.approx(1.4)


def test_segments_never_start_or_end_on_an_unretrieved_chunk():
    # With no penalty an unretrieved chunk is worth 0: still never an end.
    docs = document_values(
        [chunk("a", 2, 20, 30, score=1.0), chunk("a", 0, 0, 10, score=1.0)],
        SegmentSettings(irrelevant_chunk_penalty=0.0),
    )
    (plan,) = best_segments(docs, SegmentSettings(irrelevant_chunk_penalty=0.0))
    assert (plan.first, plan.stop, plan.start, plan.end) == (0, 3, 0, 30)


def test_missing_positions_are_the_planned_ones_not_yet_held():
    plans = [SegmentPlan("a", 0, 4, 1.0, 0, 40), SegmentPlan("b", 2, 3, 0.6, 20, 30)]
    held = [chunk("a", 0, 0, 10), chunk("a", 3, 30, 40), chunk("b", 2, 20, 30), chunk("c", 1, 0, 1)]
    assert missing_positions(plans, held) == {"a": (1, 2)}


def test_assemble_rebuilds_text_and_refuses_a_hole():
    text = "One. Two.\n\nThree."
    chunks = [
        Chunk(doc_id="d", position=0, text="One.", start=0, end=4, lead=""),
        Chunk(doc_id="d", position=1, text="Two.", start=5, end=9, lead=" "),
        Chunk(doc_id="d", position=2, text="Three.", start=11, end=17, lead="\n\n"),
    ]
    segment = assemble(SegmentPlan("d", 0, 3, 1.0, 0, 17), reversed(chunks))
    assert segment.text == text
    assert segment.chunk_ids == ("d:0", "d:1", "d:2")
    assert (segment.start, segment.end) == (0, 17)
    with pytest.raises(SegmentError, match=r"lacks chunk positions \[1\]"):
        assemble(SegmentPlan("d", 0, 3, 1.0, 0, 17), [chunks[0], chunks[2]])


def test_a_gap_without_a_stored_lead_is_spaces_of_its_length():
    chunks = [
        Chunk(doc_id="d", position=0, text="One.", start=0, end=4),
        Chunk(doc_id="d", position=1, text="Two.", start=7, end=11),
    ]
    assert join_chunks(chunks) == "One.   Two."


def test_bad_settings_are_refused():
    for bad in (
        {"max_segment_chunks": 0},
        {"max_total_chars": 0},
        {"irrelevant_chunk_penalty": -0.1},
        {"decay_rate": 0},
    ):
        with pytest.raises(SegmentError):
            SegmentSettings(**bad)


# --- property tests: no character lost or repeated -------------------------------------------


@st.composite
def tiled_document(draw):
    """A text cut into chunks with gaps between them, each chunk carrying
    its lead, and a run of consecutive chunks of it."""
    text = draw(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=300))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=40))) | {0, len(text)})
    chunks, previous_end = [], 0
    for lo, hi in zip(cuts, cuts[1:]):
        # Part of each piece may be a gap (whitespace, a heading) outside any chunk.
        gap = draw(st.integers(0, hi - lo - 1))
        start = lo + gap
        chunks.append(
            Chunk(
                doc_id="d",
                position=len(chunks),
                text=text[start:hi],
                start=start,
                end=hi,
                lead=text[previous_end:start],
            )
        )
        previous_end = hi
    first = draw(st.integers(0, len(chunks) - 1))
    stop = draw(st.integers(first + 1, len(chunks)))
    return text, chunks, first, stop


@hsettings(max_examples=300, deadline=None)
@given(tiled_document(), st.randoms(use_true_random=False))
def test_a_run_of_chunks_rebuilds_the_document_text_exactly(case, rng):
    text, chunks, first, stop = case
    run = chunks[first:stop]
    shuffled = list(run)
    rng.shuffle(shuffled)
    assert join_chunks(shuffled) == text[run[0].start : run[-1].end]
    plan = SegmentPlan("d", first, stop, 1.0, run[0].start, run[-1].end)
    assert assemble(plan, chunks).text == text[plan.start : plan.end]


@st.composite
def overlapping_spans(draw):
    text = draw(st.text(min_size=1, max_size=200))
    bounds = sorted(set(draw(st.lists(st.integers(0, len(text)), min_size=1, max_size=20))) | {0, len(text)})
    spans = []
    for i in range(len(bounds) - 1):
        # Each span reaches one or more boundaries ahead: neighbours overlap.
        j = draw(st.integers(i + 1, len(bounds) - 1))
        spans.append((bounds[i], bounds[j]))
    return text, spans


@hsettings(max_examples=300, deadline=None)
@given(overlapping_spans())
def test_overlapping_chunks_write_each_character_once(case):
    text, spans = case
    chunks = [Chunk(doc_id="d", position=i, text=text[s:e], start=s, end=e) for i, (s, e) in enumerate(spans)]
    assert join_chunks(chunks) == text[min(s for s, _ in spans) : max(e for _, e in spans)]


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=25), st.integers(1, 8), st.integers(1, 12))
def test_segments_respect_every_budget_and_never_overlap(values, max_len, max_total):
    spans = {p: (p * 10, p * 10 + 9) for p in range(len(values))}
    setting = SegmentSettings(max_segment_chunks=max_len, max_total_chunks=max_total, max_total_chars=95)
    plans = best_segments([DocumentValues("a", tuple(values), spans)], setting)
    covered = [p for plan in plans for p in plan.positions]
    assert len(covered) == len(set(covered))
    assert sum(len(p.positions) for p in plans) <= max_total
    assert sum(p.chars for p in plans) <= 95
    for plan in plans:
        assert len(plan.positions) <= max_len
        assert plan.value >= 0.5
        assert values[plan.first] > 0 and values[plan.stop - 1] > 0
        assert plan.value == pytest.approx(sum(values[plan.first : plan.stop]))
