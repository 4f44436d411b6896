import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_filter.processors.ordering import lost_in_the_middle
from chunkrag_filter.processors.redundancy import drop_redundant
from chunkrag_filter.processors.thresholds import dynamic_threshold, fixed_threshold, passing


def chunk(position, vector):
    return Chunk(doc_id="d", position=position, text=f"c{position}", start=position, end=position + 1, vector=vector)


def test_redundant_chunks_are_dropped_in_rank_order():
    a = chunk(0, [1.0, 0.0])
    near_a = chunk(1, [0.95, 0.312])  # cos to a = 0.95
    b = chunk(2, [0.0, 1.0])  # cos to a = 0, to near_a = 0.312
    edge = chunk(3, [0.9, 0.43589])  # cos to a = 0.9 exactly: kept (must exceed)
    kept, dropped = drop_redundant([a, near_a, b, edge], threshold=0.9)
    assert [c.chunk_id for c in kept] == ["d:0", "d:2", "d:3"]
    assert [(r.chunk.chunk_id, r.duplicate_of) for r in dropped] == [("d:1", "d:0")]
    assert dropped[0].similarity == pytest.approx(0.95, abs=1e-3)


def test_chunks_without_vectors_are_kept():
    kept, dropped = drop_redundant([chunk(0, None), chunk(1, [1.0, 0.0]), chunk(2, [1.0, 0.0])])
    assert [c.position for c in kept] == [0, 1] and len(dropped) == 1


def test_dynamic_threshold_uses_mean_when_scores_spread():
    threshold = dynamic_threshold([0.9, 0.8, 0.2, 0.1])  # μ = 0.5, var = 0.125
    assert threshold.value == pytest.approx(0.5) and threshold.variance == pytest.approx(0.125)
    assert passing([0.9, 0.8, 0.2, 0.1], threshold) == [0, 1]


def test_dynamic_threshold_raises_bar_when_scores_cluster():
    scores = [0.70, 0.72, 0.74, 0.76]  # μ = 0.73, var = 0.0005 < 0.01
    threshold = dynamic_threshold(scores)
    assert threshold.value == pytest.approx(0.73 + 0.0005**0.5)
    assert passing(scores, threshold) == [3]


def test_fixed_threshold_and_empty_scores():
    assert passing([0.5, 0.49], fixed_threshold([0.5, 0.49], 0.5)) == [0]
    assert dynamic_threshold([]).value == 1.0


def test_lost_in_the_middle_puts_the_best_at_the_ends():
    assert lost_in_the_middle([1, 2, 3, 4, 5]) == [1, 3, 5, 4, 2]
    assert lost_in_the_middle([1, 2]) == [1, 2]
    assert lost_in_the_middle([]) == []
