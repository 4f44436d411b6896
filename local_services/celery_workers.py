"""Real Celery worker processes for tests, benchmarks and the demo: started with
``celery -A workers.app worker`` exactly as a user would, configured through
the environment, stopped (or killed) by pid.

    with CeleryWorkers(env, log_dir) as workers:
        workers.start(2)          # returns once both answer a ping
        ...

Each worker is a :class:`~local_services.managed.ManagedProcess` whose
pidfile and log live in ``log_dir``; the pool waits for all of them at once,
since a worker is healthy only when the broker hears it.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from chunkrag_core.settings import Settings
from local_services.managed import Command, ManagedProcess, terminate_all
from local_services.process import LocalServiceError, pid_alive, tail, wait_until_ready
from workers.app import make_app
from workers.dispatch import WorkersUnavailable, check_workers

ROOT = Path(__file__).resolve().parents[1]
STOP_GRACE_SECONDS = 15.0


@dataclass(frozen=True)
class WorkerProcess:
    name: str
    managed: ManagedProcess
    pid: int

    @property
    def log_file(self) -> Path:
        return self.managed.launch_log

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_file, lines)


def worker_command(name: str, concurrency: int) -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "worker",
        "--loglevel=INFO", "--pool=prefork", f"--concurrency={concurrency}", "-n", name,
        # Startup handshakes the tests do not need; they cost seconds.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def _quiet(_message: str) -> None:
    pass


def _unchecked() -> tuple[bool, str]:
    # One worker alone has no health check: the broker hears the pool (CeleryWorkers.wait_for).
    return True, "started"


def worker_process(name: str, env: Mapping[str, str], log_dir: Path, concurrency: int = 1) -> ManagedProcess:
    short = name.split("@")[0]
    return ManagedProcess(
        name=short,
        title=f"celery worker {name}",
        home=log_dir,
        run_dir=log_dir,
        pidfile=log_dir / f"{short}.pid",
        lock_file=log_dir / f"{short}.lock",
        launch_log=log_dir / f"{short}.log",
        server_log=log_dir / f"{short}.log",
        # Unique to this worker, in its -n argument and in the title Celery
        # gives the process when setproctitle is installed.
        cmdline_marker=f"{short}@",
        url="",
        check=_unchecked,
        prepare=lambda _log: Command(worker_command(name, concurrency), cwd=ROOT, env=env),
        stop_grace_s=STOP_GRACE_SECONDS,
    )


class CeleryWorkers:
    def __init__(self, env: dict[str, str], log_dir: Path, concurrency: int = 1):
        self.env = env
        self.log_dir = log_dir
        self.concurrency = concurrency
        self.app = make_app(Settings.from_env(env))
        self.running: list[WorkerProcess] = []

    def start(self, count: int = 1, timeout: float = 60.0) -> list[WorkerProcess]:
        started = [self._spawn() for _ in range(count)]
        self.wait_for(len(self.running), timeout)
        return started

    def _spawn(self) -> WorkerProcess:
        name = f"test-{uuid.uuid4().hex[:6]}@%h"
        managed = worker_process(name, self.env, self.log_dir, self.concurrency)
        worker = WorkerProcess(name, managed, managed.start(_quiet))
        self.running.append(worker)
        return worker

    def wait_for(self, count: int, timeout: float) -> None:
        """Until ``count`` workers answer a broker ping; a worker that exits
        meanwhile is reported at once, with its log."""

        def probe() -> tuple[bool, str]:
            for worker in self.running:
                if not pid_alive(worker.pid):
                    raise LocalServiceError(f"celery worker {worker.name} exited:\n{worker.log_tail()}")
            try:
                answered = check_workers(self.app, timeout=1.0)
            except WorkersUnavailable as exc:
                return False, f"0 answered ({exc})"
            return answered >= count, f"{answered} answered"

        def timed_out(last: str) -> str:
            logs = "\n".join(f"--- {w.name} ---\n{w.log_tail()}" for w in self.running)
            return f"fewer than {count} celery workers answered within {timeout:.0f} s ({last})\n{logs}"

        wait_until_ready(probe, timeout=timeout, pid=None, interval=0.2, exited=lambda: "", timed_out=timed_out)

    def kill(self, worker: WorkerProcess) -> None:
        """SIGKILL a worker with its pool children: a machine dying."""
        worker.managed.kill()
        self.running.remove(worker)

    def stop(self) -> None:
        """A warm shutdown of every worker (each finishes the task in hand),
        then SIGKILL for any still running after the grace period."""
        ours = [pid for worker in self.running if (pid := worker.managed.running_pid(_quiet)) is not None]
        terminate_all(ours, STOP_GRACE_SECONDS)
        for worker in self.running:
            worker.managed.pidfile.unlink(missing_ok=True)
        self.running.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
