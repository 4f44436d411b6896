"""How many shards answered a search, as the cluster said it.

A search over an index whose shard has no live copy (a node lost, no
replica) still answers, from the shards that did; the answer's ``_shards``
says how many failed and why. One filtered search is several cluster
searches (the BM25 and kNN sides of an ``_msearch``, one pair per scale when
ensembling), all over the same shards: their tallies are folded into one
that reports the worst of them, so a caller learns of any shard missing from
any side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

# The failures reported per search at most: a cluster of many shards that
# lost a node would otherwise repeat one reason hundreds of times.
MAX_FAILURES = 10


@dataclass(frozen=True, slots=True)
class Shards:
    total: int
    successful: int
    skipped: int = 0
    failed: int = 0
    # The cluster's own failure entries (``shard``, ``index``, ``node``,
    # ``reason``), one per failed shard copy, at most MAX_FAILURES.
    failures: tuple[Mapping[str, Any], ...] = ()
    timed_out: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The ``_shards`` object of an Elasticsearch search response."""
        body: dict[str, Any] = {
            "total": self.total,
            "successful": self.successful,
            "skipped": self.skipped,
            "failed": self.failed,
        }
        if self.failures:
            body["failures"] = [dict(failure) for failure in self.failures]
        return body


# A search that reports no tally (a response built by hand, an engine that
# omits it) stands for one logical search that answered.
ONE = Shards(total=1, successful=1)


def of_response(response: Mapping[str, Any]) -> Shards | None:
    """The tally of one search response (``_shards`` and ``timed_out``);
    None for a response that has none."""
    shards = response.get("_shards")
    timed_out = bool(response.get("timed_out", False))
    if not isinstance(shards, Mapping):
        return None
    failures = shards.get("failures") or ()
    return Shards(
        total=int(shards.get("total", 0)),
        successful=int(shards.get("successful", 0)),
        skipped=int(shards.get("skipped", 0)),
        failed=int(shards.get("failed", 0)),
        failures=tuple(f for f in failures if isinstance(f, Mapping))[:MAX_FAILURES],
        timed_out=timed_out,
    )


def worst(tallies: Iterable[Shards | None]) -> Shards:
    """One tally for searches over the same shards: the most shards any of
    them asked, the fewest that answered (or were skipped) in all, the most
    that failed in any, each failed shard's first failure, and timed out if
    any did. Searches without a tally count for nothing; none at all:
    :data:`ONE`."""
    tallies = [tally for tally in tallies if tally is not None]
    if not tallies:
        return ONE
    failures: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    for tally in tallies:
        for failure in tally.failures:
            failures.setdefault((failure.get("index"), failure.get("shard")), failure)
    return Shards(
        total=max(t.total for t in tallies),
        successful=min(t.successful for t in tallies),
        skipped=min(t.skipped for t in tallies),
        failed=max(t.failed for t in tallies),
        failures=tuple(failures.values())[:MAX_FAILURES],
        timed_out=any(t.timed_out for t in tallies),
    )
