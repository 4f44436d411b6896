"""One managed local process: the lifecycle every local service shares.

Elasticsearch, OpenSearch, Redis, the model server and each Celery worker
describe themselves with a :class:`ManagedProcess` (their files, how their
process is recognised, how their health is checked, how they are launched)
and get start, wait, up, down, status and logs from here: a pidfile naming a
process whose command line carries a marker, a log file whose tail goes into
every error, a session (process group) of its own, a health wait with a
timeout, and a stop that sends TERM, then KILL to the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chunkrag_core.redaction import redact_url
from local_services.process import (
    LocalServiceError,
    Log,
    ServiceStatus,
    ServiceUser,
    command_as,
    describe_port_owner,
    ensure_state_home,
    error_lines,
    exclusive_lock,
    live_pid_from_pidfile,
    our_pid_in_pidfile,
    pid_alive,
    port_in_use,
    print_line,
    process_cmdline,
    run_launcher,
    tail,
    wait_until_ready,
)

# (healthy, what was seen): "green", "PONG", "cluster status red"... Raises
# OSError when nothing answers.
Check = Callable[[], "tuple[bool, str]"]

# A program that stays in the foreground is started by /bin/sh in the
# background, which prints its pid and exits: the program is reparented to
# init and never lingers as an unreaped child of a long-lived caller (pytest).
_BACKGROUND = 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
# How long `up` and `wait` wait for health unless told: a JVM node's start
# or the model server mapping 1.1 GB on a cold page cache, on a busy machine.
DEFAULT_WAIT_SECONDS = 120.0


@dataclass(frozen=True)
class Command:
    """How to launch a service, once everything it needs is in place."""

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str] | None = None  # None: this process's environment
    user: ServiceUser | None = None  # None: the current user


@dataclass(frozen=True)
class ManagedProcess:
    """One service's process and the facts the shared lifecycle needs.

    ``prepare`` runs only when the service must be started: it fetches and
    configures what the service needs, logs the "starting" line and returns
    the command. A service with ``external_url`` is someone else's: it is
    probed, never started or stopped.
    """

    name: str  # in `status` ("llm")
    title: str  # in messages ("llm server")
    home: Path  # CHUNKRAG_HOME, in messages
    run_dir: Path
    pidfile: Path
    lock_file: Path
    # Where the launched program's output goes, and the log its tail comes
    # from (a server that opens its own log later: its launcher output until then).
    launch_log: Path
    server_log: Path
    cmdline_marker: str  # in the process's command line: tells ours from a reused pid
    url: str
    check: Check
    prepare: Callable[[Log], Command] = field(repr=False)
    # What waiting polls (default: `check`), and what it waits for, in messages.
    probe: Check | None = None
    ready_phrase: str = "become healthy"
    external_url: str | None = None
    external_kind: str = "server"
    ports: tuple[tuple[int, str], ...] = ()  # (port, "HTTP port"): refused when something else listens
    port_hint: str = ""  # how to choose another port, after "Stop that process"
    # The program forks into the background and writes the pidfile itself,
    # within this many seconds of its launcher returning.
    daemonizes: bool = False
    pidfile_wait_s: float = 5.0
    launch_timeout_s: float = 30.0
    stop_grace_s: float = 30.0
    wait_interval_s: float = 0.5
    exit_hint: Callable[[], str] | None = field(default=None, repr=False)
    # Checked by `up` before anything is created, even when already running
    # (a JVM node's account must reach CHUNKRAG_HOME): fails fast, raises.
    preflight: Callable[[Log], object] | None = field(default=None, repr=False)

    # --- finding -------------------------------------------------------------------

    def running_pid(self, log: Log = print_line) -> int | None:
        return live_pid_from_pidfile(self.pidfile, self.cmdline_marker, log)

    def logs(self, lines: int = 40) -> str:
        """Likely causes from the launch output, then the server log's tail."""
        if not self.launch_log.exists() and not self.server_log.exists():
            return f"No {self.title} was ever started from CHUNKRAG_HOME={self.home} ({self.run_dir} has no log)."
        parts = []
        causes = error_lines(self.launch_log)
        if causes:
            parts += [f"--- errors in {self.launch_log} ---", *causes]
        log_file = self.server_log if self.server_log.exists() else self.launch_log
        parts += [f"--- last {lines} lines of {log_file} ---", tail(log_file, lines)]
        return "\n".join(parts)

    # --- starting ------------------------------------------------------------------

    def start(self, log: Log = print_line, on_launch: Callable[[], None] | None = None) -> int:
        """Start the process in the background and return its pid (no health
        wait); ``on_launch`` is called once preparing is done, just before the launch."""
        if self.external_url:
            raise LocalServiceError(
                f"{self.title}: {redact_url(self.external_url)} is configured; not starting a local one"
            )
        pid = self.running_pid(log)
        if pid is not None:
            return pid
        for port, role in self.ports:
            if port_in_use(port):
                raise LocalServiceError(
                    f"cannot start {self.title}: {role} 127.0.0.1:{port} is already taken by "
                    f"{describe_port_owner(port)}, which was not started from CHUNKRAG_HOME={self.home}. "
                    f"Stop that process{', ' + self.port_hint if self.port_hint else ''}."
                )
        command = self.prepare(log)
        argv, env = list(command.argv), command.env
        if command.user is not None and not command.user.is_current:
            argv = command_as(command.user, argv)
            env = {
                **(os.environ if env is None else env),
                "HOME": str(self.run_dir),
                "USER": command.user.name,
                "LOGNAME": command.user.name,
            }
        if on_launch is not None:
            on_launch()
        if self.daemonizes:
            return self._start_daemon(argv, command.cwd, env)
        return self._start_in_background(argv, command.cwd, env)

    def _start_daemon(self, argv: list[str], cwd: Path, env: Mapping[str, str] | None) -> int:
        def timed_out() -> str:
            return f"{self.title} did not return within {self.launch_timeout_s:.0f} s.\n{self.logs()}"

        with self.launch_log.open("wb") as output:
            result = run_launcher(
                argv, cwd=cwd, timeout=self.launch_timeout_s, timed_out=timed_out, env=env, output=output
            )
        if result.returncode != 0:
            raise LocalServiceError(f"{self.title} failed to start (exit {result.returncode}).\n{self.logs()}")
        deadline = time.monotonic() + self.pidfile_wait_s

        # Read-only polling: whatever stale pidfile there was, `start` removed
        # before the launch, and the new one may name a pid not yet retitled.
        while (pid := our_pid_in_pidfile(self.pidfile, self.cmdline_marker)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid is None:
            raise LocalServiceError(
                f"{self.title} reported a successful start but {self.pidfile} names no running process "
                f"within {self.pidfile_wait_s:.0f} s.\n{self.logs()}"
            )
        return pid

    def _start_in_background(self, argv: list[str], cwd: Path, env: Mapping[str, str] | None) -> int:
        self.launch_log.write_bytes(b"")  # This start's output only.

        def timed_out() -> str:
            return f"could not launch {self.title} within {self.launch_timeout_s:.0f} s"

        launcher = ["/bin/sh", "-c", _BACKGROUND, "sh", str(self.launch_log), *argv]
        result = run_launcher(launcher, cwd=cwd, timeout=self.launch_timeout_s, timed_out=timed_out, env=env)
        launched = result.stdout.strip()
        if result.returncode != 0 or not launched.isdigit():
            raise LocalServiceError(
                f"could not launch {self.title} (exit {result.returncode}): {(result.stdout + result.stderr).strip()}"
            )
        pid = int(launched)
        # $! names the forked shell until it has exec'd the program: a pidfile
        # read before then would look stale (the marker is not there yet).
        deadline = time.monotonic() + 10.0
        while self.cmdline_marker not in process_cmdline(pid) and pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.pidfile.write_text(f"{pid}\n")
        return pid

    # --- health --------------------------------------------------------------------

    def wait(self, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> str:
        """Poll the probe until the service is healthy; return what it saw."""
        pid = None if self.external_url else self.running_pid(log)
        excerpt = (lambda: "") if self.external_url else (lambda: f"\n{self.logs()}")
        hint = f" {self.exit_hint()}" if self.exit_hint else ""

        def exited() -> str:
            return f"{self.title} (pid {pid}) exited while starting.{hint}{excerpt()}"

        def timed_out(last: str) -> str:
            where = f"{self.title} at {redact_url(self.url)}"
            return f"{where} did not {self.ready_phrase} within {timeout:.0f} s (last: {last}).{excerpt()}"

        probe = self.probe or self.check
        return wait_until_ready(
            probe, timeout=timeout, pid=pid, interval=self.wait_interval_s, exited=exited, timed_out=timed_out
        )

    def up(self, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> str | None:
        """Idempotent: start if not running, then wait until healthy; return the health."""
        if self.external_url:
            log(f"{self.title}: using external {self.external_kind} at {redact_url(self.external_url)}")
            return None
        if self.preflight is not None:
            self.preflight(log)
        ensure_state_home(self.home)
        with exclusive_lock(self.lock_file):
            began = time.monotonic()

            def launching() -> None:
                # From the launch: a first download or build is not start-up time.
                nonlocal began
                began = time.monotonic()

            pid = self.running_pid(log)
            if pid is not None:
                healthy, health = self._check_or_unreachable()
                if healthy:
                    log(f"{self.title} already running (pid {pid}) and healthy ({health}) at {redact_url(self.url)}")
                    return health
                log(f"{self.title} already running (pid {pid}); waiting for it to become healthy…")
            else:
                self.start(log, on_launch=launching)
            health = self.wait(timeout, log)
        log(f"{self.title} healthy ({health}) in {time.monotonic() - began:.1f} s at {redact_url(self.url)}")
        return health

    def _check_or_unreachable(self) -> tuple[bool, str]:
        try:
            return self.check()
        except OSError:
            return False, "unreachable"

    def status(self, log: Log = print_line) -> ServiceStatus:
        if self.external_url:
            state, pid = "external", None
        else:
            pid = self.running_pid(log)
            state = "running" if pid is not None else "stopped"
        try:
            healthy, health = self.check()
        except OSError as exc:
            health = "unreachable" if state != "external" else f"unreachable: {getattr(exc, 'reason', exc)}"
            return ServiceStatus(self.name, state, redact_url(self.url), False, health, pid)
        if state == "stopped":
            # Something answers on our port, but we did not start it.
            state = "unmanaged"
        return ServiceStatus(self.name, state, redact_url(self.url), healthy, health, pid)

    # --- stopping ------------------------------------------------------------------

    def down(self, log: Log = print_line) -> None:
        """Idempotent: stop the process started from this CHUNKRAG_HOME, if
        any, whatever URL the environment names (ES_URL, REDIS_URL exported
        for the app point at the services started here as often as at
        someone else's); a service with ``external_url`` and nothing started
        here is someone else's, and is left alone."""
        not_ours = (
            f"{self.title}: using external {self.external_kind} at {redact_url(self.external_url)}; not stopping it"
            if self.external_url
            else f"{self.title} is not running"
        )
        if not self.run_dir.exists():
            log(not_ours)
            return
        with exclusive_lock(self.lock_file):
            pid = self.running_pid(log)
            if pid is None:
                log(not_ours)
                return
            log(f"stopping {self.title} (pid {pid})…")
            killed = terminate(pid, self.stop_grace_s)
            self.pidfile.unlink(missing_ok=True)
        log(f"{self.title} stopped" + (f" (killed after {self.stop_grace_s:.0f} s without exiting)" if killed else ""))

    def kill(self) -> None:
        """SIGKILL the process with its whole group, at once: a machine dying."""
        pid = self.running_pid(lambda _message: None)
        if pid is not None:
            _kill_group(pid)
            _wait_gone(pid, 10.0)
        self.pidfile.unlink(missing_ok=True)


def terminate(pid: int, grace_seconds: float = 30.0) -> bool:
    """SIGTERM to the process (a graceful stop: a worker finishes its task),
    then, after ``grace_seconds``, SIGKILL to its whole process group, so
    helpers it forked die with it. Returns True if SIGKILL was needed."""
    return terminate_all([pid], grace_seconds) == [pid]


def terminate_all(pids: Sequence[int], grace_seconds: float = 30.0) -> list[int]:
    """:func:`terminate` for several processes stopping side by side (one
    grace period for all); returns those that needed SIGKILL."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    stubborn = [pid for pid in pids if not _wait_gone(pid, max(0.0, deadline - time.monotonic()))]
    for pid in stubborn:
        _kill_group(pid)
    for pid in stubborn:
        _wait_gone(pid, 10.0)
    return stubborn


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        group = os.getpgid(pid)
        # Never our own group: a service started without a session of its own.
        if group != os.getpgrp():
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
