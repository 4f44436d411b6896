"""The distributed ingest's watch over its batches: which to send again,
when to stop waiting, and the wait itself against a scripted Celery app (a
test double; real workers killed mid-ingest are in
tests/integration/test_cluster_node_loss.py)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import pytest
from celery.exceptions import TimeoutError as CeleryTimeout

from chunkrag_core.settings import Settings, WorkerSettings
from ingest_pipeline.pipeline import BatchOutcome
from ingest_pipeline.sources import plain_document
from workers import ingest_dispatch
from workers.codec import encode_outcome
from workers.dispatch import MAX_RESENDS, TaskView, unclaimed
from workers.ingest_dispatch import CLAIM_GRACE_S, batch_deadline

# --- pure parts ---------------------------------------------------------------


def test_a_waiting_task_no_queue_and_no_live_worker_holds_is_sent_again():
    views = [
        TaskView("PENDING"),  # lost: taken off the queue by a worker that died
        TaskView("PENDING"),  # reserved by a live worker (held)
        TaskView("RETRY"),  # its countdown held by a worker that died
        TaskView("RETRY"),  # counting down on a live worker (held)
        TaskView("STARTED", "w1@host"),  # started: pings decide (to_resend)
        TaskView("SUCCESS"),
        TaskView("FAILURE"),
        TaskView("UNKNOWN"),  # the result backend could not say: not lost
        TaskView("PENDING", resends=MAX_RESENDS),  # sent again enough already
    ]
    assert unclaimed(views, held={1, 3}, queued=0) == [0, 2]
    # While the queue holds messages, a waiting task may be among them.
    assert unclaimed(views, held={1, 3}, queued=4) == []
    assert unclaimed(views, held=set(), queued=0) == [0, 1, 2, 3]
    assert unclaimed(views, held=set(), queued=0, max_resends=0) == []


def test_a_batch_waits_one_budget_for_itself_and_one_for_each_unfinished_batch_before_it():
    assert batch_deadline(100.0, ahead=0, budget_s=600.0) == 700.0
    assert batch_deadline(100.0, ahead=15, budget_s=600.0) == 9700.0
    assert batch_deadline(0.0, ahead=3, budget_s=2.5) == 10.0


def test_the_batch_budget_is_a_setting_from_the_environment():
    assert WorkerSettings().ingest_batch_budget_s == 600.0
    settings = Settings.from_env({"CHUNKRAG_WORKER_INGEST_BATCH_BUDGET_S": "45"})
    assert settings.workers.ingest_batch_budget_s == 45.0


# --- the wait, against a scripted Celery app ------------------------------------


class Clock:
    """Time that passes only when the dispatcher waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Task:
    """What a scripted task does: its state, and the worker it started on."""

    id: str
    args: tuple
    state: str = "PENDING"
    hostname: str | None = None
    result: object = None


class Result:
    """An AsyncResult reading a scripted task."""

    def __init__(self, task: Task, clock: Clock) -> None:
        self.task, self.clock, self.id = task, clock, task.id
        self.backend = self
        self.forgotten = False

    def get_task_meta(self, task_id: str) -> dict:
        info = {"hostname": self.task.hostname, "pid": 1} if self.task.state == "STARTED" else self.task.result
        return {"status": self.task.state, "result": info}

    def get(self, timeout: float, propagate: bool = True):
        if self.task.state in ("SUCCESS", "FAILURE"):
            return self.task.result
        self.clock.now += timeout
        raise CeleryTimeout("scripted wait")

    @property
    def state(self) -> str:
        return self.task.state

    @property
    def result(self):
        return self.task.result

    def successful(self) -> bool:
        return self.task.state == "SUCCESS"

    def forget(self) -> None:
        self.forgotten = True


@dataclass
class Workers:
    """The scripted cluster of workers: ``on_send`` decides what each new
    task (numbered from 0) does; ``live`` answer pings and inspections."""

    clock: Clock
    on_send: Callable[[int, Task], None]
    live: set[str] = field(default_factory=set)
    queued: int = 0
    tasks: list[Task] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    pings: int = 0

    # app.signature(name).clone(args=...).apply_async()
    def signature(self, _name):
        return self

    def clone(self, args):
        return SimpleNamespace(apply_async=lambda: self._send(args))

    def _send(self, args) -> Result:
        task = Task(f"task-{len(self.tasks)}", args)
        self.tasks.append(task)
        self.on_send(len(self.tasks) - 1, task)
        return Result(task, self.clock)

    # app.control
    @property
    def control(self):
        return self

    def ping(self, destination=None, timeout=1.0, limit=None):
        self.pings += 1
        return [{name: {"ok": "pong"}} for name in sorted(destination or self.live) if name in self.live]

    def inspect(self, timeout=1.0):
        return self

    def query_task(self, *ids):
        held = {t.id: ["reserved", {}] for t in self.tasks if t.id in ids and t.hostname in self.live}
        return {name: held for name in self.live}

    def revoke(self, ids):
        self.revoked.extend(ids)

    @contextmanager
    def connection_for_read(self):
        yield self

    @contextmanager
    def channel(self):
        yield SimpleNamespace(queue_declare=lambda queue, passive: SimpleNamespace(message_count=self.queued))


def outcome_of(args) -> dict:
    documents = len(args[1])
    return encode_outcome(BatchOutcome(documents, 0, documents, (10,) * documents, (1,) * documents, 0, 0, (), ()))


def done_by(worker: str) -> Callable[[Task], None]:
    def finish(task: Task) -> None:
        task.state, task.hostname, task.result = "SUCCESS", worker, outcome_of(task.args)

    return finish


class _Cluster:
    def capabilities(self):
        return None

    def refresh(self, index):
        pass


@pytest.fixture
def quiet_edges(monkeypatch):
    monkeypatch.setattr(ingest_dispatch, "check_workers", lambda app, timeout, limit=None: 1)
    monkeypatch.setattr(ingest_dispatch, "ensure_index_for", lambda *args, **kwargs: None)
    monkeypatch.setattr(ingest_dispatch, "pause_refresh", lambda client, index: "1s")
    monkeypatch.setattr(ingest_dispatch, "restore_refresh", lambda client, index, previous: None)


def run(workers: Workers, documents: int, **kwargs):
    settings = Settings.from_env({"CHUNKRAG_WORKER_INGEST_BATCH_DOCS": "1"})
    items = [plain_document(f"d{n}", f"Text {n}.", "test") for n in range(documents)]
    return ingest_dispatch.ingest_documents_on_workers(
        items,
        client=_Cluster(),
        settings=settings,
        index="i",
        progress=False,
        app=workers,
        clock=workers.clock,
        **kwargs,
    )


def test_a_batch_whose_worker_stops_answering_pings_is_sent_again_and_counted_once(quiet_edges):
    clock = Clock()

    def on_send(n: int, task: Task) -> None:
        if n == 1:  # the second batch starts on w2, which then dies
            task.state, task.hostname = "STARTED", "w2@host"
        else:
            done_by("w1@host")(task)

    workers = Workers(clock, on_send, live={"w1@host"})
    began = clock()
    report = run(workers, documents=3, batch_budget_s=60.0, liveness_check_s=5.0)

    assert report.ok and report.documents == 3 and report.chunks == 3
    assert report.resent == 1
    assert [t.args[1][0]["doc_id"] for t in workers.tasks] == ["d0", "d1", "d2", "d1"]
    assert workers.revoked == ["task-1"]  # the stranded task: dropped should the broker hand it back
    assert clock() - began <= 10.0  # found at the first look, not at the deadline


def test_a_batch_lost_between_queue_and_worker_is_sent_again(quiet_edges):
    clock = Clock()
    # The first send is never recorded anywhere: PENDING, no queue, no worker.
    workers = Workers(clock, lambda n, task: None if n == 0 else done_by("w1@host")(task), live={"w1@host"})
    report = run(workers, documents=1, batch_budget_s=60.0, liveness_check_s=5.0)
    assert report.ok and report.documents == 1 and report.resent == 1
    assert workers.revoked == ["task-0"]
    assert clock.now - 1000.0 >= CLAIM_GRACE_S  # not before the grace a worker gets to record it


def test_a_waiting_batch_is_not_sent_again_while_the_queue_holds_messages(quiet_edges):
    clock = Clock()
    workers = Workers(clock, lambda n, task: None, live={"w1@host"}, queued=3)
    report = run(workers, documents=1, batch_budget_s=30.0, liveness_check_s=5.0)
    assert report.resent == 0 and len(workers.tasks) == 1
    [error] = report.errors
    assert error.startswith("1 documents (d0) not ingested: no worker finished it within 30 s (task pending)")


def test_the_wait_ends_by_the_deadline_and_names_the_documents_of_a_batch_never_finished(quiet_edges):
    clock = Clock()

    def on_send(n: int, task: Task) -> None:
        if n == 0:
            done_by("w1@host")(task)
        else:  # every copy of the second batch starts on a worker that then dies
            task.state, task.hostname = "STARTED", f"gone{n}@host"

    workers = Workers(clock, on_send, live={"w1@host"})
    budget, began = 20.0, clock()
    report = run(workers, documents=2, batch_budget_s=budget, liveness_check_s=5.0)

    assert report.documents == 1 and report.resent == MAX_RESENDS
    [error] = report.errors
    assert error.startswith("1 documents (d1) not ingested: no worker finished it within")
    assert f"sent {MAX_RESENDS + 1} times" in error and error.endswith("run the command again to finish")
    # Every copy is revoked: none of them is left for the broker to hand back.
    assert set(workers.revoked) >= {t.id for t in workers.tasks[1:]}
    # Sent behind one unfinished batch (d0, not collected yet): given up two
    # budgets after its first send (the re-sends came well within them).
    assert 2 * budget <= clock() - began <= 2 * budget + 1.0


def test_a_stuck_batch_on_a_live_worker_is_given_up_at_its_deadline_not_sent_again(quiet_edges):
    clock = Clock()
    workers = Workers(clock, lambda n, task: setattr(task, "state", "STARTED") or setattr(task, "hostname", "w1@host"))
    workers.live = {"w1@host"}
    began = clock()
    report = run(workers, documents=1, batch_budget_s=15.0, liveness_check_s=5.0)
    assert report.resent == 0 and len(workers.tasks) == 1
    assert report.errors == (
        "1 documents (d0) not ingested: no worker finished it within 15 s (task started); "
        "run the command again to finish",
    )
    assert 15.0 <= clock() - began <= 16.0


def test_the_budget_and_the_check_interval_must_be_positive(quiet_edges):
    workers = Workers(Clock(), lambda n, task: None)
    for bad in ({"batch_budget_s": 0.0}, {"liveness_check_s": -1.0}):
        with pytest.raises(ValueError):
            run(workers, documents=1, **bad)
