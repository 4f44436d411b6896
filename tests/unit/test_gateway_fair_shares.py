"""The model-stage places shared fairly between callers (limits.py): a
caller without another filtered search is served before callers with one,
which hold at most max_filtered - reserved places together, so flooding
keys cannot take every place; with shared state, a caller's searches in the
other instances count too."""

from __future__ import annotations

import asyncio

import pytest

from chunkrag_gateway import errors
from chunkrag_gateway.limits import CallerSlots, FilteredQueue


class Searches:
    """Filtered searches of several callers through the per-caller places
    and the queue, as the gateway nests them; each holds its place until
    released, and the order places were granted in is recorded."""

    def __init__(self, queue: FilteredQueue, slots: CallerSlots | None = None):
        self.queue, self.slots = queue, slots
        self.granted: list[str] = []
        self.releases: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task] = []

    def start(self, caller: str, name: str, heavy: bool = False) -> None:
        self.releases[name] = asyncio.Event()
        self.tasks.append(asyncio.create_task(self._search(caller, name, heavy)))

    async def _search(self, caller: str, name: str, heavy: bool) -> None:
        if self.slots is None:
            return await self._queued(caller, name, heavy)
        async with self.slots.slot(caller):
            await self._queued(caller, name, heavy)

    async def _queued(self, caller: str, name: str, heavy: bool) -> None:
        async with self.queue.slot(caller, heavy=heavy):
            self.granted.append(name)
            await self.releases[name].wait()

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    async def release(self, name: str) -> None:
        self.releases[name].set()
        await self.settle()

    async def finish(self) -> None:
        for event in self.releases.values():
            event.set()
        await asyncio.gather(*self.tasks)


def test_flooding_keys_share_all_but_the_reserved_places_and_a_quiet_key_gets_one_at_once():
    async def scenario():
        slots = CallerSlots(2, retry_after_s=30)
        queue = FilteredQueue(4, 16, 5, reserved=1, busy=slots.busy)
        searches = Searches(queue, slots)
        for key in "ABCD":  # four keys, four searches each, sent together
            for n in range(4):
                searches.start(f"key:{key}", f"{key}{n}")
        await searches.settle()
        assert queue.in_use == 3  # every flooding key has others: one place is left
        searches.start("key:quiet", "quiet")
        await searches.settle()
        assert searches.granted[-1] == "quiet" and queue.in_use == 4
        # Its search runs at the quiet callers' priority; the flooding keys' lower (filter_threads.py).
        assert not queue.busy("key:quiet", holding=True) and queue.busy("key:A", holding=True)
        await searches.release("quiet")
        await searches.release(searches.granted[0])  # a flood search ends: its place goes to a flooding key
        assert queue.in_use == 3
        searches.start("key:quiet", "quiet again")
        await searches.settle()
        assert searches.granted[-1] == "quiet again"
        await searches.finish()
        assert queue.in_use == 0 and queue.waiting == 0

    asyncio.run(scenario())


def test_keys_with_one_heavy_search_each_leave_the_reserved_place_to_a_quiet_keys_light_search():
    async def scenario():
        slots = CallerSlots(2, retry_after_s=30)
        queue = FilteredQueue(4, 16, 5, reserved=1, busy=slots.busy)
        searches = Searches(queue, slots)
        for key in "ABCDEF":  # six keys, one search each that has the model read every candidate
            searches.start(f"key:{key}", key, heavy=True)
        await searches.settle()
        assert searches.granted == ["A", "B", "C"] and queue.waiting == 3
        searches.start("key:quiet", "quiet")
        await searches.settle()
        assert searches.granted[-1] == "quiet" and queue.in_use == 4
        await searches.release("quiet")  # the reserved place stays free for the next quiet search
        assert queue.in_use == 3
        await searches.release("A")  # a heavy search's place goes to the heavy search that waited longest
        assert searches.granted[-1] == "D" and queue.in_use == 3
        await searches.finish()
        assert queue.in_use == 0 and queue.waiting == 0

    asyncio.run(scenario())


def test_a_caller_without_another_search_goes_before_busy_callers_that_waited_longer():
    async def scenario():
        queue = FilteredQueue(2, 16, 5)
        searches = Searches(queue)
        for name in ("A1", "A2", "A3", "B1", "B2"):
            searches.start(f"key:{name[0]}", name)
        await searches.settle()
        searches.start("key:C", "C1")
        await searches.settle()
        assert searches.granted == ["A1", "A2"]
        await searches.release("A1")  # C has no other search: it goes first, though A3, B1 and B2 came before
        assert searches.granted == ["A1", "A2", "C1"]
        await searches.release("A2")  # A3 is now A's only search; B has two
        assert searches.granted[-1] == "A3"
        await searches.release("C1")  # A holds one, B none: B first
        assert searches.granted[-1] == "B1"
        await searches.finish()

    asyncio.run(scenario())


def test_among_busy_callers_the_one_holding_fewest_places_goes_first():
    async def scenario():
        queue = FilteredQueue(3, 16, 5)
        searches = Searches(queue)
        for name in ("A1", "A2", "B1", "A3", "B2"):
            searches.start(f"key:{name[0]}", name)
        await searches.settle()
        assert searches.granted == ["A1", "A2", "B1"]
        await searches.release("A1")  # A holds one, B holds one: A3 waited longer
        assert searches.granted[-1] == "A3"
        await searches.release("A2")  # A holds one (A3), B one (B1): B2 waited longer
        assert searches.granted[-1] == "B2"
        await searches.finish()

    asyncio.run(scenario())


def test_with_one_place_none_is_reserved_and_a_full_queue_is_still_a_429():
    async def scenario():
        queue = FilteredQueue(1, 1, 7, reserved=1)
        assert queue.reserved == 0
        searches = Searches(queue)
        searches.start("key:A", "A1")
        searches.start("key:A", "A2")
        await searches.settle()
        assert searches.granted == ["A1"] and queue.waiting == 1
        with pytest.raises(errors.GatewayError) as full:
            async with queue.slot("key:B"):
                pass
        assert full.value.status == 429 and full.value.headers["retry-after"] == "7"
        await searches.finish()
        assert searches.granted == ["A1", "A2"]

    asyncio.run(scenario())


def test_a_waiting_search_cancelled_leaves_no_place_taken():
    async def scenario():
        queue = FilteredQueue(1, 4, 5)
        searches = Searches(queue)
        searches.start("key:A", "A1")
        searches.start("key:B", "B1")
        await searches.settle()
        searches.tasks[1].cancel()  # B1's client went away while it waited
        await searches.settle()
        assert queue.waiting == 0
        await searches.release("A1")
        assert queue.in_use == 0 and searches.granted == ["A1"]
        await asyncio.gather(*searches.tasks, return_exceptions=True)

    asyncio.run(scenario())


class OtherInstances:
    """The shared count (shared_state.SharedSearches) as a double: how many
    searches each caller has in the other instances."""

    def __init__(self, elsewhere: dict[str, int]):
        self.elsewhere, self.left = elsewhere, []

    async def enter(self, caller):
        return f"member-of-{caller}", self.elsewhere.get(caller, 0)

    def leave(self, caller, member):
        self.left.append(member)


def test_a_callers_searches_in_other_instances_make_it_busy_here():
    async def scenario():
        shared = OtherInstances({"key:flood": 3, "key:flood-too": 1})
        slots = CallerSlots(2, retry_after_s=30, shared=shared)
        queue = FilteredQueue(2, 16, 5, reserved=1, busy=slots.busy)
        searches = Searches(queue, slots)
        searches.start("key:flood", "F1")  # its only search here, but three elsewhere
        searches.start("key:flood-too", "T1")  # the same: it may not take the last place
        searches.start("key:quiet", "Q1")
        await searches.settle()
        assert searches.granted == ["F1", "Q1"] and queue.waiting == 1
        assert slots.busy("key:flood-too") and not slots.busy("key:quiet")
        await searches.finish()
        assert searches.granted == ["F1", "Q1", "T1"]
        assert sorted(shared.left) == ["member-of-key:flood", "member-of-key:flood-too", "member-of-key:quiet"]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("chunkrag", "heavy"),
    [
        ({}, False),  # the default filter: the gate's best three
        ({"judge_top": 9}, False),
        ({"relevance": "crossencoder"}, True),
        ({"rerank": "local"}, True),
        ({"relevance": "crossencoder", "stages": False}, False),  # retrieval only: no model at all
    ],
)
def test_a_search_is_heavy_when_the_relevance_model_reads_every_candidate_or_every_kept_one(chunkrag, heavy):
    from chunkrag_gateway.app import reads_every_candidate
    from chunkrag_gateway.dialect import search_options

    options = search_options({"ext": {"chunkrag": chunkrag}}, max_candidates=50)
    assert reads_every_candidate(options) is heavy
