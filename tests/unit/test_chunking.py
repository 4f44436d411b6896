import numpy as np
import pytest

from ingest_pipeline.chunking import consecutive_similarities, group_sentences


def test_a_drop_below_the_threshold_starts_a_new_chunk():
    spans = [(0, 10), (11, 20), (21, 30), (31, 40)]
    groups = group_sentences(spans, [0.85, 0.79, 0.95], threshold=0.8, max_chars=500)
    assert groups == [range(0, 2), range(2, 4)]


def test_similarity_equal_to_the_threshold_stays_together():
    groups = group_sentences([(0, 5), (6, 10)], [0.8], threshold=0.8, max_chars=500)
    assert groups == [range(0, 2)]


def test_length_cap_counts_from_first_start_to_last_end():
    # 0..200, 201..400 fit in 400 chars; the third would make the chunk 0..600.
    spans = [(0, 200), (201, 400), (401, 600)]
    groups = group_sentences(spans, [0.99, 0.99], threshold=0.8, max_chars=400)
    assert groups == [range(0, 2), range(2, 3)]


def test_chunk_exactly_at_the_cap_is_allowed():
    groups = group_sentences([(0, 250), (250, 500)], [0.9], threshold=0.8, max_chars=500)
    assert groups == [range(0, 2)]


def test_every_sentence_lands_in_exactly_one_chunk():
    spans = [(i * 10, i * 10 + 9) for i in range(7)]
    groups = group_sentences(spans, [0.1, 0.9, 0.9, 0.2, 0.95, 0.5], threshold=0.8, max_chars=25)
    assert [i for g in groups for i in g] == list(range(7))
    assert groups == [range(0, 1), range(1, 3), range(3, 4), range(4, 6), range(6, 7)]


def test_no_sentences_no_chunks_and_one_sentence_one_chunk():
    assert group_sentences([], [], 0.8, 500) == []
    assert group_sentences([(3, 9)], [], 0.8, 500) == [range(0, 1)]


def test_mismatched_similarities_are_rejected():
    with pytest.raises(ValueError, match="need 1 similarities"):
        group_sentences([(0, 1), (2, 3)], [0.5, 0.5], 0.8, 500)


def test_consecutive_similarities_of_unit_vectors():
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    assert consecutive_similarities(vectors) == pytest.approx([0.6, 1.0, 0.8])
    assert consecutive_similarities(vectors[:1]).shape == (0,)
