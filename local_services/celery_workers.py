"""Real Celery worker processes for tests, benchmarks and the demo: started with
``celery -A workers.app worker`` exactly as a user would, configured through
the environment, stopped (or killed) by pid.

    with CeleryWorkers(env, log_dir) as workers:
        workers.start(2)          # returns once both answer a ping
        ...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from chunkrag_core.settings import Settings
from workers.app import make_app
from workers.dispatch import WorkersUnavailable, check_workers

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen
    log_file: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


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
        log_file = self.log_dir / f"{name.split('@')[0]}.log"
        command = [
            sys.executable, "-m", "celery", "-A", "workers.app", "worker",
            "--loglevel=INFO", "--pool=prefork", f"--concurrency={self.concurrency}", "-n", name,
            # Startup handshakes the tests do not need; they cost seconds.
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        with log_file.open("wb") as log:
            # A session of its own: the worker and its pool children can be
            # killed together without touching the test process.
            process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        worker = WorkerProcess(name, process, log_file)
        self.running.append(worker)
        return worker

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        answered, problem = 0, "no answer yet"
        while time.monotonic() < deadline:
            for worker in self.running:
                if worker.process.poll() is not None:
                    raise RuntimeError(f"celery worker {worker.name} exited with {worker.process.returncode}:\n{worker.log_tail()}")
            try:
                answered = check_workers(self.app, timeout=1.0)
            except WorkersUnavailable as exc:
                answered, problem = 0, str(exc)
            if answered >= count:
                return
            time.sleep(0.2)
        logs = "\n".join(f"--- {w.name} ---\n{w.log_tail()}" for w in self.running)
        raise RuntimeError(f"{answered} of {count} celery workers answered within {timeout:.0f} s ({problem})\n{logs}")

    def kill(self, worker: WorkerProcess) -> None:
        """SIGKILL a worker with its pool children: a machine dying."""
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=10)
        self.running.remove(worker)

    def stop(self, grace_s: float = 15.0) -> None:
        for worker in self.running:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)  # warm shutdown: finish the task in hand
        for worker in self.running:
            try:
                worker.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(worker.process.pid, signal.SIGKILL)  # with its pool children
                worker.process.wait(timeout=10)
        self.running.clear()

    def __enter__(self) -> CeleryWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
