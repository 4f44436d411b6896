"""The pure parts of bench/llm_uses.py: the draft answer's support in a chunk and the boost."""

import pytest

from bench.llm_uses import boosted, draft_support, words


def test_words_drop_stop_words_single_characters_and_punctuation():
    assert words("The Eiffel Tower, in Paris (France) a 1889 b") == ["eiffel", "tower", "paris", "france", "1889"]


def test_support_is_the_share_of_the_drafts_distinct_words_in_the_chunk():
    assert draft_support("Paris, France", "He moved to Paris in 1901.") == 0.5
    assert draft_support("Paris Paris", "Paris") == 1.0
    assert draft_support("John Smith", "Nothing here.") == 0.0


def test_an_empty_or_stop_word_draft_supports_nothing():
    assert draft_support("", "Paris") == 0.0
    assert draft_support("Unknown", "unknown") == 0.0


def test_boost_moves_the_probability_in_log_odds():
    assert boosted(0.5, 0.0) == 0.5
    assert boosted(0.5, 1.0, boost=2.0) == pytest.approx(0.880797, abs=1e-6)
    assert boosted(0.2, 0.5, boost=2.0) == pytest.approx(0.404610, abs=1e-6)


def test_boost_keeps_certain_probabilities_finite():
    assert boosted(0.0, 1.0) == pytest.approx(7.389e-9, rel=1e-3)
    assert boosted(1.0, 0.0) == pytest.approx(1.0)
