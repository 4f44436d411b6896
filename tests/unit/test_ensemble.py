"""The pure core of multi-scale ensembling: per-scale normalisation, fusion,
and de-duplication by span, with literal numbers."""

import pytest

from chunkrag_core.chunk import Chunk
from search_extension.ensemble import covered, fuse_scales, gap_text, merge_spans, touches
from search_extension.segments import join_chunks

#            0         1         2         3         4         5
#            0123456789012345678901234567890123456789012345678901234
DOCUMENT = "Bees fly far. They make honey.\n\nHives hold wax. The end."
SENTENCES = [(0, 13), (14, 30), (32, 47), (48, 56)]


def chunk(start, end, *, scale=0, position=0, doc="d", lead_from=None, score=None):
    """A chunk of DOCUMENT; its lead is the text since ``lead_from`` (the
    previous chunk's end at its scale; the document start by default)."""
    lead_start = 0 if lead_from is None else lead_from
    return Chunk(
        doc_id=doc,
        position=position,
        text=DOCUMENT[start:end],
        start=start,
        end=end,
        scale=scale,
        lead=DOCUMENT[lead_start:start],
        score=score,
    )


def test_each_scale_is_normalised_on_its_own_then_merged_by_score():
    fused = fuse_scales(
        [
            (0, [("a", 12.0), ("b", 9.0), ("c", 4.0)]),  # -> 1.0, 0.625, 0.0
            (128, [("x", 0.9), ("y", 0.5)]),  # -> 1.0, 0.0
        ]
    )
    assert fused == [("a", 1.0), ("x", 1.0), ("b", 0.625), ("c", 0.0), ("y", 0.0)]


def test_weights_scale_the_normalised_scores_and_a_repeated_key_keeps_its_best():
    fused = fuse_scales([(0, [("a", 3.0), ("b", 1.0)]), (512, [("z", 2.0), ("a", 0.0)])], weights={512: 0.5})
    assert fused == [("a", 1.0), ("z", 0.5), ("b", 0.0)]


def test_a_list_whose_scores_tie_is_all_best_and_empty_lists_add_nothing():
    assert fuse_scales([(0, [("a", 2.0), ("b", 2.0)]), (128, [])]) == [("a", 1.0), ("b", 1.0)]


def test_gap_text_is_the_end_of_the_later_chunks_lead():
    later = chunk(32, 47, lead_from=13)  # lead "They make honey.\n\n"... from 13
    assert gap_text(later, 2) == "\n\n"
    assert gap_text(later, 0) == ""
    assert gap_text(chunk(32, 47, lead_from=31), 2) is None  # the lead is shorter than the gap


def test_overlapping_and_whitespace_adjacent_spans_touch_others_do_not():
    group = [chunk(0, 30)]
    assert touches(group, chunk(14, 47, lead_from=0))  # overlaps
    assert touches(group, chunk(32, 47, lead_from=30))  # "\n\n" between
    assert not touches(group, chunk(48, 56, lead_from=47))  # a sentence between
    assert not touches(group, chunk(32, 47, lead_from=30, doc="other"))
    assert covered(group, chunk(14, 30)) and not covered(group, chunk(14, 47))


def test_a_small_chunk_inside_a_kept_larger_one_is_dropped():
    large = chunk(0, 47, scale=128, score=1.0)
    small = chunk(14, 30, position=1, lead_from=13, score=0.9)
    assert merge_spans([large, small]) == [large]


def test_adjacent_small_chunks_merge_into_one_span_at_the_best_rank_with_exact_text():
    first = chunk(14, 30, position=1, lead_from=13, score=1.0)
    other = chunk(48, 56, position=3, lead_from=47, score=0.8, doc="e")
    second = chunk(32, 47, position=2, lead_from=30, score=0.7)
    merged, kept = merge_spans([first, other, second])
    assert kept == other
    assert (merged.start, merged.end, merged.text) == (14, 47, DOCUMENT[14:47])
    assert merged.chunk_id == "d:1" and merged.score == 1.0
    assert merged.stage_scores["ensemble_members"] == 2.0
    assert merged.lead == DOCUMENT[13:14]


def test_a_larger_chunk_ranked_below_a_smaller_one_never_swells_it():
    small = chunk(14, 30, position=1, lead_from=13, score=1.0)
    container = chunk(0, 56, scale=512, score=0.6)  # overlaps: dropped
    next_door = chunk(32, 56, scale=128, position=1, lead_from=30, score=0.5)  # touches: apart
    spans = merge_spans([small, container, next_door])
    assert [(s.chunk_id, s.start, s.end) for s in spans] == [("d:1", 14, 30), ("d:1@128", 32, 56)]


def test_a_smaller_chunk_joins_a_larger_kept_span_it_overlaps_or_touches():
    large = chunk(14, 47, scale=128, lead_from=13, score=1.0)
    before = chunk(0, 13, score=0.9)  # touches: " " between
    overlapping = chunk(32, 56, scale=16, position=3, lead_from=30, score=0.8)  # 32..47 shared
    (merged,) = merge_spans([large, before, overlapping])
    assert merged.chunk_id == "d:0@128" and merged.text == DOCUMENT and merged.stage_scores["ensemble_members"] == 3.0


def test_a_base_chunk_bridging_two_kept_spans_joins_them_at_the_first_ones_rank():
    a = chunk(0, 13, score=1.0)
    b = chunk(32, 56, position=2, lead_from=30, score=0.9)
    bridge = chunk(14, 30, position=1, lead_from=13, score=0.5)
    (merged,) = merge_spans([a, b, bridge])
    assert merged.chunk_id == "d:0" and merged.text == DOCUMENT and merged.stage_scores["ensemble_members"] == 3.0


def test_size_counts_spans_after_de_duplication():
    spans = merge_spans(
        [chunk(0, 13), chunk(0, 13, scale=128), chunk(48, 56, lead_from=47), chunk(14, 30, lead_from=13, doc="e")],
        size=2,
    )
    assert [(s.doc_id, s.start) for s in spans] == [("d", 0), ("d", 48)]


def test_join_uses_the_end_of_a_longer_lead_and_spaces_where_no_lead_reaches():
    # Chunks of different scales: the later one's lead starts before the earlier one's end.
    assert join_chunks([chunk(0, 13), chunk(32, 47, lead_from=0)]) == DOCUMENT[0:47]
    assert join_chunks([chunk(0, 13), chunk(32, 47, lead_from=31)]) == DOCUMENT[0:13] + " " * 19 + DOCUMENT[32:47]


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (1, 2, 0)])
def test_every_order_gives_disjoint_spans_whose_text_is_the_documents(order):
    pieces = [
        chunk(0, 30, scale=128),
        chunk(14, 30, position=1, lead_from=13),
        chunk(32, 56, scale=128, position=1, lead_from=30),
    ]
    spans = merge_spans([pieces[i] for i in order])
    for span in spans:
        assert span.text == DOCUMENT[span.start : span.end]
    bounds = sorted((s.start, s.end) for s in spans)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(bounds, bounds[1:]))
    assert bounds[-1][1] == 56  # the last sentence is never lost


def test_a_cap_keeps_spans_from_snowballing_and_skips_chunks_longer_than_it():
    first = chunk(14, 30, position=1, lead_from=13, score=1.0)
    adjacent = chunk(32, 47, position=2, lead_from=30, score=0.9)  # union 14..47 is 33 characters
    assert [(s.start, s.end) for s in merge_spans([first, adjacent], max_span_chars=33)] == [(14, 47)]
    # Over the cap: a chunk that only touches stays a span of its own ...
    assert [(s.start, s.end) for s in merge_spans([first, adjacent], max_span_chars=20)] == [(14, 30), (32, 47)]
    # ... one that overlaps is dropped (it would repeat text) ...
    straddling = chunk(14, 47, scale=128, lead_from=13, score=0.8)
    kept = chunk(0, 30, scale=128, score=1.0)
    assert [(s.start, s.end) for s in merge_spans([kept, straddling], max_span_chars=40)] == [(0, 30)]
    # ... and a chunk longer than the cap never hides the smaller ones inside it.
    whole = chunk(0, 56, scale=512, score=1.0)
    assert [(s.start, s.end) for s in merge_spans([whole, first], max_span_chars=40)] == [(14, 30)]
