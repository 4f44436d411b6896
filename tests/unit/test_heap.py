import gc

import pytest

from chunkrag_gateway.heap import FULL_COLLECTION_EVERY, settle_heap


@pytest.fixture
def restored_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_settling_freezes_what_is_alive_and_makes_full_collections_rarer(restored_gc):
    kept = [{"alive": n} for n in range(1000)]
    frozen = settle_heap()
    assert frozen == gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold()[2] == FULL_COLLECTION_EVERY
    assert kept[999] == {"alive": 999}  # frozen objects stay as they were


def test_a_cycle_made_after_settling_is_still_collected(restored_gc):
    settle_heap()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
