import pytest

from search_extension.fusion import minmax_fuse, minmax_normalise, rrf_fuse


def test_minmax_normalise_maps_to_unit_range():
    assert minmax_normalise([("a", 10.0), ("b", 6.0), ("c", 2.0)]) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert minmax_normalise([("a", 3.0), ("b", 3.0)]) == {"a": 1.0, "b": 1.0}
    assert minmax_normalise([]) == {}


def test_minmax_fuse_weights_and_missing_hits():
    bm25 = [("a", 12.0), ("b", 8.0), ("c", 4.0)]
    knn = [("c", 0.9), ("d", 0.7), ("a", 0.5)]
    fused = dict(minmax_fuse([bm25, knn], [0.5, 0.5], size=10))
    assert fused == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.5, "d": 0.25})
    assert [hit for hit, _ in minmax_fuse([bm25, knn], [0.5, 0.5], size=2)] == ["a", "c"]


def test_rrf_fuse_with_rank_constant():
    fused = rrf_fuse([[("a", 9.0), ("b", 1.0)], [("b", 0.9), ("c", 0.1)]], size=3, rank_constant=60)
    assert fused[0] == ("b", pytest.approx(1 / 62 + 1 / 61))
    assert [hit for hit, _ in fused] == ["b", "a", "c"]
