"""The shard tally of a filtered search, on literal responses."""

from search_extension import shards
from search_extension.shards import Shards


def failure(shard, index="idx"):
    return {"shard": shard, "index": index, "node": "n1", "reason": {"type": "node_disconnected_exception"}}


def test_a_response_tally_is_read_with_its_failures_and_timeout():
    response = {
        "timed_out": True,
        "_shards": {"total": 5, "successful": 3, "skipped": 1, "failed": 2, "failures": [failure(0), failure(4)]},
    }
    assert shards.of_response(response) == Shards(5, 3, 1, 2, (failure(0), failure(4)), timed_out=True)


def test_a_response_without_a_tally_counts_for_nothing():
    assert shards.of_response({"hits": {"hits": []}}) is None
    assert shards.worst([None, Shards(3, 2, failed=1)]) == Shards(3, 2, failed=1)
    assert shards.worst([None]) == shards.ONE
    assert shards.ONE.as_dict() == {
        "total": 1,
        "successful": 1,
        "skipped": 0,
        "failed": 0,
    }


def test_the_worst_of_two_sides_reports_any_shard_missing_from_either():
    text_side = Shards(3, 3)
    knn_side = Shards(3, 2, failed=1, failures=(failure(1),))
    other = Shards(3, 2, failed=1, failures=(failure(1), failure(2)))
    assert shards.worst([text_side, knn_side]) == Shards(3, 2, 0, 1, (failure(1),))
    # One failure per (index, shard), the first seen.
    assert shards.worst([knn_side, other]).failures == (failure(1), failure(2))
    assert shards.worst([Shards(3, 3), Shards(3, 3, timed_out=True)]).timed_out
    assert shards.worst([]) == shards.ONE


def test_failures_are_capped():
    many = {"_shards": {"total": 40, "successful": 0, "failed": 40, "failures": [failure(i) for i in range(40)]}}
    tally = shards.of_response(many)
    assert tally.failed == 40 and len(tally.failures) == shards.MAX_FAILURES
    assert tally.as_dict()["failures"][0] == failure(0)
