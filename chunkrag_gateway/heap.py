"""The gateway's heap, settled once its models are read.

Python's full garbage collection walks every container object alive: in a
process with the models, clients and caches read that is ~100k objects,
and one full collection paused the request that triggered it by ~45 ms on
the project's 2-core machine, about one post-search in twenty: the tail of
its latency. Almost all of those objects (modules, the sentence splitter's
tables, the clients) live as long as the process, so after start they are
moved out of the collector's reach (``gc.freeze``), and full collections
are made rarer. Measured with ``bench.post_search_bench`` (60 queries, three
passes, 2026-11-28): the companion's added p95 was 30-100 ms without this,
39-51 ms with the freeze alone and 27-35 ms with both.
"""

from __future__ import annotations

import gc

# A full collection after this many collections of the middle generation
# (Python's default: 10). Each full collection now walks only what requests
# made since start; ten times fewer of them put one in about one request in
# two hundred instead of twenty. What it costs: cyclic garbage waits ten
# times longer to be freed (reference counting still frees the rest at once).
FULL_COLLECTION_EVERY = 100


def settle_heap() -> int:
    """Collect once, freeze every object alive now, and make full
    collections rarer; returns how many objects are frozen. Frozen objects
    are never collected as cycles, so call it when start-up's garbage is
    gone, not per request."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    return gc.get_freeze_count()
