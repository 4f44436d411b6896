import math

import pytest

from bench.metrics import ndcg_at_k, percentile, recall_at_k


def test_ndcg_with_binary_relevance():
    assert ndcg_at_k(["a", "b"], {"a"}, 10) == 1.0
    assert ndcg_at_k(["x", "a"], {"a"}, 10) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "b"], {"a", "b"}, 10) == pytest.approx(
        (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    )
    assert ndcg_at_k(["x"] * 10 + ["a"], {"a"}, 10) == 0.0


def test_recall_and_percentile():
    assert recall_at_k(["a", "x", "b"], {"a", "b", "c", "d"}, 2) == 0.25
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([5], 0.95) == 5
