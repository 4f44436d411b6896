"""Post-search on an index without a companion (or with one the caller may
not read): the first request learns it from the companion's own answers
(404 or 403), and later requests of the same credentials send nothing to
the companion while it is remembered. A backend double counts the
requests; the real nodes are in tests/integration/test_post_search_companion.py."""

from __future__ import annotations

import numpy as np
import pytest

from chunkrag_core.engines.errors import EngineNotFound, EngineRefused
from chunkrag_core.settings import Settings
from ingest_pipeline.source_fields import SourceField
from search_extension.companion import CompanionsFirst, UnreadableCompanions
from search_extension.companion_scoring import engine_scored

FIELD = SourceField("kb", "1", "body", "Rotate the key from the console.")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """A backend double whose companion index is missing (or refused)."""

    def __init__(self, status: int = 404):
        self.status, self.requests = status, []

    def msearch(self, searches):
        self.requests.append("msearch")
        error = {"type": "index_not_found_exception" if self.status == 404 else "security_exception"}
        return {"responses": [{"error": error, "status": self.status} for _ in searches[1::2]]}

    def search(self, index, body):
        self.requests.append("search")
        kind = EngineNotFound if self.status == 404 else EngineRefused
        raise kind(f"{index}: {self.status}", engine="test", status=self.status)

    def index_exists(self, index):  # pragma: no cover - must not be asked
        raise AssertionError("no request asks first whether the companion exists")


class Fallback:
    def __init__(self):
        self.asked = []

    def passages(self, fields, *, query=""):
        self.asked.extend(f.companion_id for f in fields)
        return {f.companion_id: () for f in fields}


def _scored(source: CompanionsFirst):
    return source.scored(
        [[FIELD]],
        query="rotate",
        query_vector=np.array([1.0, 0.0], dtype=np.float32),
        weights=(0.5, 0.5),
        max_passages=4,
        with_vectors=True,
    )


def test_a_companion_remembered_unreadable_expires_after_its_time():
    clock = Clock()
    unreadable = UnreadableCompanions(ttl_s=30.0, clock=clock)
    unreadable.note("alice", "kb-chunkrag")
    assert ("alice", "kb-chunkrag") in unreadable
    assert ("bob", "kb-chunkrag") not in unreadable  # another caller may read other indices
    clock.now += 29.9
    assert ("alice", "kb-chunkrag") in unreadable
    clock.now += 0.2
    assert ("alice", "kb-chunkrag") not in unreadable


def test_the_oldest_remembered_companion_goes_first():
    unreadable = UnreadableCompanions(entries=2, clock=Clock())
    for name in ("a", "b", "c"):
        unreadable.note("", name)
    assert [("", name) in unreadable for name in ("a", "b", "c")] == [False, True, True]


@pytest.mark.parametrize("status", [404, 403])
def test_the_engine_scored_path_names_the_companion_that_cannot_be_read(status):
    outcome = engine_scored(
        Cluster(status),
        [[FIELD]],
        {"kb": "kb-chunkrag"},
        {FIELD.companion_id: "fp"},
        query="rotate",
        query_vector=np.array([1.0, 0.0], dtype=np.float32),
        weights=(0.5, 0.5),
        max_passages=4,
        with_vectors=True,
    )
    assert outcome.unreadable == ("kb-chunkrag",) and outcome.scored.best == (None,)
    assert outcome.why_not == f"the companion [kb-chunkrag] cannot be read ({status})"


@pytest.mark.parametrize("status", [404, 403])
def test_a_missing_companion_costs_one_request_then_none_while_remembered(status):
    cluster, fallback, clock = Cluster(status), Fallback(), Clock()
    unreadable = UnreadableCompanions(clock=clock)

    def request(identity: str):
        source = CompanionsFirst(cluster, fallback, settings=Settings(), unreadable=unreadable, identity=identity)
        assert _scored(source) is None
        assert source.passages([FIELD]) == {FIELD.companion_id: ()}
        return source.not_scored_because

    first = request("alice")
    assert cluster.requests == ["msearch"] and "[kb-chunkrag] cannot be read" in first
    # The fetched-chunks way knows it too: no search, no existence check.
    assert fallback.asked == [FIELD.companion_id]
    assert "noted earlier" in request("alice")
    assert cluster.requests == ["msearch"] and fallback.asked == [FIELD.companion_id] * 2
    # Other credentials ask for themselves.
    request("bob")
    assert cluster.requests == ["msearch", "msearch"]
    # Once forgotten, the companion is asked for again (a sync may have made it).
    clock.now += 31.0
    request("alice")
    assert cluster.requests == ["msearch"] * 3


def test_the_fetched_chunks_way_alone_learns_a_missing_companion_from_its_search():
    cluster, fallback = Cluster(404), Fallback()
    unreadable = UnreadableCompanions(clock=Clock())
    source = CompanionsFirst(cluster, fallback, settings=Settings(), engine_scoring=False, unreadable=unreadable)
    for _ in range(3):
        assert source.passages([FIELD]) == {FIELD.companion_id: ()}
    assert cluster.requests == ["search"] and fallback.asked == [FIELD.companion_id] * 3
