"""The relevance model's batches take turns fair between callers
(model_turns.py): the policy on literal sequences, then the thread plumbing
with a model whose batches run only when the test lets them."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from chunkrag_core import cancellation
from chunkrag_core.cancellation import Cancellation, Cancelled
from chunkrag_core.providers.local_relevance import LocalRelevanceModel
from chunkrag_gateway.model_turns import FairTurns, ModelTurns, run_as

# The longest a thread here may take to reach a step (seconds): never reached
# unless the behaviour is wrong.
BOUND_S = 30.0


def served(turns: FairTurns, finish_each: bool = True) -> list[str]:
    """The callers of every waiting batch in the order they begin, one
    slot's batches ending one after another."""
    order = []
    while (begun := turns.next()) is not None:
        order.append(begun.caller)
        if finish_each:
            turns.finish(begun)
    return order


def test_callers_with_batches_waiting_take_one_batch_each_in_turn():
    turns = FairTurns(1)
    for caller in "AAAB" + "BBC":
        turns.ask(caller)
    assert served(turns) == list("ABCABAB")


def test_a_caller_with_two_searches_gets_one_share_not_two():
    turns = FairTurns(1)
    for caller in "AAAAAA" + "BB":  # A's two searches, three batches each, asked first
        turns.ask(caller)
    assert served(turns) == list("ABABAAAA")


def test_a_new_callers_first_batch_goes_before_the_heavy_callers_remaining_ones():
    turns = FairTurns(1)
    for caller in "AAAAABBBBB":
        turns.ask(caller)
    first = turns.next()
    assert first.caller == "A"
    turns.ask("Q")  # comes while A's first batch runs, after every batch of A's and B's asked
    turns.finish(first)
    # B has had no batch yet either: one of B's, then Q's, before A's second.
    assert served(turns) == list("BQABABABAB")


def test_in_one_round_a_newcomer_goes_before_a_caller_served_in_the_round_before():
    turns = FairTurns(1)
    for caller in "AAABBB":
        turns.ask(caller)
    for expected in "ABA":
        begun = turns.next()
        assert begun.caller == expected
        turns.finish(begun)
    turns.ask("C")  # B's second batch and C's first may both start in this round: C has had none
    assert served(turns) == list("CBAB")


def test_a_caller_coming_back_right_after_its_search_gets_no_credit_for_the_batches_it_had():
    turns = FairTurns(1)
    for caller in "AAAB":
        turns.ask(caller)
    assert served(turns) == list("ABAA")
    for caller in "ABBB":  # A had a round more than B: its next search's batch waits for B's
        turns.ask(caller)
    assert served(turns) == list("BABB")


def test_at_most_slots_batches_run_and_an_ending_one_lets_the_next_in():
    turns = FairTurns(2)
    asked = [turns.ask(caller) for caller in "ABC"]
    a, b = turns.next(), turns.next()
    assert (a, b) == (asked[0], asked[1]) and turns.next() is None and turns.running == 2
    turns.finish(b)
    assert turns.next() == asked[2]


def test_a_dropped_batch_leaves_the_line_and_idle_callers_are_forgotten():
    turns = FairTurns(1)
    a, b = turns.ask("A"), turns.ask("B")
    assert turns.next() == a
    turns.drop(b)  # B's request went away while A's batch ran
    assert turns.waiting == () and turns.next() is None and turns.remembered == {"A"}
    turns.finish(a)
    turns.ask("C")
    turns.finish(turns.next())
    assert turns.remembered == {"A", "C"}  # both had a batch in the latest round, B none
    for caller in "DD":
        turns.ask(caller)
    served(turns)
    assert turns.remembered == {"D"}


def test_batches_at_the_lower_priority_leave_the_reserved_slot_to_the_others():
    turns = FairTurns(2, reserved=1)
    heavy = [turns.ask(caller, low=True) for caller in "AB"]
    assert turns.next() == heavy[0] and turns.next() is None  # B's waits: the last slot is not for it
    quiet = turns.ask("Q")
    assert turns.next() == quiet and turns.running == 2
    turns.finish(quiet)
    assert turns.next() is None  # still only one slot for the lower priority
    turns.finish(heavy[0])
    assert turns.next() == heavy[1]


def test_with_one_slot_none_is_reserved():
    turns = FairTurns(1, reserved=1)
    low = turns.ask("A", low=True)
    assert turns.reserved == 0 and turns.next() == low


def test_no_slot_is_refused():
    with pytest.raises(ValueError, match="at least one slot"):
        FairTurns(0)


class GatedModel(LocalRelevanceModel):
    """The relevance model's batch loop over a stand-in graph: every text
    one word piece, each batch recorded (caller, size) and held until the
    test lets it run."""

    def __init__(self, turns: ModelTurns, batch_size: int = 2):
        super().__init__(batch_size=batch_size, turns=turns.turn)
        self.ran: list[tuple[str, int]] = []
        self.running = threading.Event()
        self.go = threading.Semaphore(0)
        self._lock_ran = threading.Lock()

    def _encode(self, query, texts):
        return [SimpleNamespace(ids=[1], type_ids=[0]) for _ in texts]

    def _run(self, encodings):
        from chunkrag_gateway.model_turns import current_caller

        with self._lock_ran:
            self.ran.append((current_caller(), len(encodings)))
        self.running.set()
        assert self.go.acquire(timeout=BOUND_S), "the test never let the batch run"
        return np.zeros(len(encodings), dtype=np.float32)


def _eventually(condition) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, "never reached"
        time.sleep(0.01)


def _search(model: GatedModel, caller: str, texts: int, token: Cancellation | None = None, low: bool = False):
    outcome = {}

    def run():
        try:
            outcome["scores"] = cancellation.run_bound(token, run_as, caller, low, model.score, "q", ["t"] * texts)
        except Cancelled as exc:
            outcome["cancelled"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_new_callers_batch_runs_before_the_heavy_callers_remaining_batches():
    turns = ModelTurns(1)
    model = GatedModel(turns)
    heavy, _ = _search(model, "key:heavy", 10)  # five batches of two
    _eventually(lambda: len(model.ran) == 1)
    other, _ = _search(model, "key:other", 10)  # a second heavy caller, waiting behind the first
    _eventually(lambda: turns.waiting() == ["key:other"])
    quiet, outcome = _search(model, "key:quiet", 1)
    _eventually(lambda: turns.waiting() == ["key:other", "key:quiet"])
    assert turns.counts() == (1, 2)  # what the metrics read
    for _ in range(12):
        model.go.release()
    for thread in (heavy, other, quiet):
        thread.join(BOUND_S)
    callers = [caller for caller, _ in model.ran]
    # Waiting behind one batch of each other caller, not behind their remaining eight.
    assert callers[:4] == ["key:heavy", "key:other", "key:quiet", "key:heavy"]
    assert callers.count("key:heavy") == callers.count("key:other") == 5 and outcome["scores"] == [0.5]
    assert list(turns.begun) == callers


def test_a_quiet_callers_batch_takes_the_reserved_slot_while_heavy_batches_wait_for_theirs():
    turns = ModelTurns(2, reserved=1)
    model = GatedModel(turns)
    first, _ = _search(model, "key:heavy", 4, low=True)
    _eventually(lambda: len(model.ran) == 1)
    second, _ = _search(model, "key:other", 4, low=True)
    _eventually(lambda: turns.waiting() == ["key:other"])
    quiet, outcome = _search(model, "key:quiet", 1)
    _eventually(lambda: len(model.ran) == 2)  # at once, beside the heavy batch still running
    assert model.ran[1][0] == "key:quiet" and turns.waiting() == ["key:other"]
    for _ in range(5):
        model.go.release()
    for thread in (first, second, quiet):
        thread.join(BOUND_S)
    assert outcome["scores"] == [0.5] and len(model.ran) == 5


def test_a_batch_waiting_for_its_turn_stops_when_its_request_is_cancelled():
    turns = ModelTurns(1, check_every_s=0.01)
    model = GatedModel(turns)
    heavy, _ = _search(model, "key:heavy", 4)
    _eventually(lambda: len(model.ran) == 1)
    token = Cancellation()
    waiting, outcome = _search(model, "key:late", 2, token)
    _eventually(lambda: turns.waiting() == ["key:late"])
    token.cancel("the request's deadline passed")
    waiting.join(BOUND_S)
    assert isinstance(outcome["cancelled"], Cancelled) and turns.waiting() == []
    model.go.release()
    model.go.release()
    heavy.join(BOUND_S)
    assert [caller for caller, _ in model.ran] == ["key:heavy", "key:heavy"]
