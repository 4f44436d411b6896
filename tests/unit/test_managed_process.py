"""The one managed-process lifecycle (local_services.managed) on small real
processes in a temporary directory: a Python HTTP server on a free port, and
shell loops that ignore SIGTERM. No project service is started."""

import http.client
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from local_services import (
    cli,
    elasticsearch_node,
    llm_server,
    opensearch_node,
    redis_server,
)
from local_services.elasticsearch_node import ElasticsearchSettings
from local_services.llm_server import LlmSettings
from local_services.managed import Command, ManagedProcess, terminate_all
from local_services.opensearch_node import OpenSearchSettings
from local_services.process import LocalServiceError, pid_alive
from local_services.redis_server import RedisSettings


def quiet(_message: str) -> None:
    pass


def group_members(group: int) -> list[int]:
    members = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if proc.name.isdigit() and int(fields[2]) == group:
            members.append(int(proc.name))
    return members


def logged_ready(process: ManagedProcess) -> None:
    """Until the shell has set its traps (it says so)."""
    deadline = time.monotonic() + 10
    while "ready" not in process.launch_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_check(port: int):
    def check() -> tuple[bool, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/")
            status = connection.getresponse().status
        finally:
            connection.close()
        return status == 200, f"HTTP {status}"

    return check


def described(
    tmp_path: Path, argv: list[str], *, port: int = 0, marker: str, check=None, **overrides
) -> ManagedProcess:
    run_dir = tmp_path / "run" / "svc"
    run_dir.mkdir(parents=True, exist_ok=True)
    fields = {
        "name": "svc",
        "title": "test server",
        "home": tmp_path,
        "run_dir": run_dir,
        "pidfile": run_dir / "svc.pid",
        "lock_file": tmp_path / "run" / "svc.lock",
        "launch_log": run_dir / "svc.log",
        "server_log": run_dir / "svc.log",
        "cmdline_marker": marker,
        "url": f"http://127.0.0.1:{port}",
        "check": check or http_check(port),
        "prepare": lambda log: (log("starting the test server…"), Command(argv, cwd=run_dir))[1],
        "ports": ((port, "port"),) if port else (),
        "stop_grace_s": 5.0,
        "wait_interval_s": 0.1,
    }
    fields.update(overrides)
    return ManagedProcess(**fields)


def test_up_status_logs_down_of_a_foreground_server(tmp_path: Path):
    port = free_port()
    server = described(
        tmp_path,
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        port=port,
        marker=f"http.server {port}",
    )
    lines: list[str] = []
    assert server.up(timeout=30, log=lines.append) == "HTTP 200"
    pid = server.running_pid(quiet)
    assert pid is not None and server.pidfile.read_text().strip() == str(pid)
    assert lines[0] == "starting the test server…" and lines[-1].startswith("test server healthy (HTTP 200) in ")

    status = server.status(quiet)
    assert (status.name, status.state, status.pid, status.healthy, status.health) == (
        "svc",
        "running",
        pid,
        True,
        "HTTP 200",
    )
    # Idempotent: a second up finds it healthy and starts nothing.
    assert server.up(timeout=30, log=lines.append) == "HTTP 200"
    assert lines[-1] == f"test server already running (pid {pid}) and healthy (HTTP 200) at http://127.0.0.1:{port}"
    assert "GET / HTTP" in server.logs()  # the server's own access log went to the log file

    server.down(lines.append)
    assert lines[-2:] == [f"stopping test server (pid {pid})…", "test server stopped"]
    assert not pid_alive(pid) and not server.pidfile.exists()
    stopped = server.status(quiet)
    assert (stopped.state, stopped.healthy, stopped.health) == ("stopped", False, "unreachable")
    server.down(lines.append)
    assert lines[-1] == "test server is not running"


def test_down_stops_what_this_home_started_though_the_environment_names_its_url(tmp_path: Path):
    """ES_URL or REDIS_URL exported (as `chunkrag` prints them for the app)
    after `services up`: `down` still stops the service started here."""
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    started = described(tmp_path, argv, port=port, marker=f"http.server {port}")
    assert started.up(timeout=30, log=quiet) == "HTTP 200"
    pid = started.running_pid(quiet)
    exported = described(
        tmp_path, argv, port=port, marker=f"http.server {port}", external_url=f"http://127.0.0.1:{port}"
    )
    lines: list[str] = []
    exported.down(lines.append)
    assert lines == [f"stopping test server (pid {pid})…", "test server stopped"]
    assert not pid_alive(pid)
    exported.down(lines.append)
    assert lines[-1] == f"test server: using external server at http://127.0.0.1:{port}; not stopping it"


def test_a_port_taken_by_another_program_is_refused_before_preparing(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = described(
            tmp_path,
            ["true"],
            port=port,
            marker="never",
            prepare=lambda log: pytest.fail("prepared"),
            port_hint="choose another with X_PORT",
        )
        with pytest.raises(
            LocalServiceError,
            match=rf"port 127.0.0.1:{port} is already taken by pid \d+ .*"
            r"Stop that process, choose another with X_PORT\.$",
        ):
            server.start(quiet)
        # Something answers there, but we did not start it.
        assert server.status(quiet).state in ("unmanaged", "stopped")


def test_a_process_that_exits_while_starting_is_reported_with_its_log(tmp_path: Path):
    crashing = described(
        tmp_path,
        ["/bin/sh", "-c", "echo 'ERROR: no config at /nowhere'; sleep 0.3; exit 3"],
        marker="/nowhere",
        check=lambda: (_ for _ in ()).throw(ConnectionRefusedError("refused")),
        exit_hint=lambda: "Fix the config.",
    )
    with pytest.raises(LocalServiceError) as failure:
        crashing.up(timeout=30, log=quiet)
    message = str(failure.value)
    assert message.startswith("test server (pid ") and "exited while starting. Fix the config." in message
    assert "--- errors in " in message and "ERROR: no config at /nowhere" in message


def test_a_wait_that_times_out_names_the_last_problem_and_the_log(tmp_path: Path):
    idle = described(
        tmp_path,
        ["/bin/sh", "-c", "echo booting; sleep 30"],
        marker="booting; sleep 30",
        check=lambda: (False, "still booting"),
        ready_phrase="say ready",
    )
    idle.start(quiet)
    # The program's first line reaches the log a moment after the launch returns.
    deadline = time.monotonic() + 10.0
    while "booting" not in idle.launch_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        with pytest.raises(
            LocalServiceError,
            match=r"(?s)^test server at http://127.0.0.1:0 did not say ready within 0 s "
            r"\(last: still booting\)\..*booting",
        ):
            idle.wait(timeout=0, log=quiet)
    finally:
        idle.down(quiet)


def test_stop_sends_term_then_kills_the_whole_group(tmp_path: Path):
    # The leader ignores TERM and so does the helper it forked: both must go.
    script = "trap '' TERM; (trap '' TERM; while :; do sleep 0.1; done) & echo ready; while :; do sleep 0.1; done"
    stubborn = described(
        tmp_path, ["/bin/sh", "-c", script], marker="trap '' TERM", check=lambda: (True, "up"), stop_grace_s=0.5
    )
    pid = stubborn.start(quiet)
    logged_ready(stubborn)
    helpers = [member for member in group_members(os.getpgid(pid)) if member != pid]
    assert helpers
    lines: list[str] = []
    stubborn.down(lines.append)
    assert lines[-1] == "test server stopped (killed after 0 s without exiting)"
    assert not pid_alive(pid)
    deadline = time.monotonic() + 10  # SIGKILL is sent to all at once; dying takes a moment
    while any(pid_alive(helper) for helper in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(helper) for helper in helpers), [
        Path(f"/proc/{h}/stat").read_text() for h in helpers if pid_alive(h)
    ]


def test_terminate_all_shares_one_grace_period(tmp_path: Path):
    polite = described(tmp_path / "a", ["sleep", "30"], marker="sleep 30", check=lambda: (True, "up"))
    (tmp_path / "b").mkdir()
    stubborn = described(
        tmp_path / "b",
        ["/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"],
        marker="trap",
        check=lambda: (True, "up"),
    )
    pids = [polite.start(quiet), stubborn.start(quiet)]
    logged_ready(stubborn)
    assert terminate_all(pids, grace_seconds=0.5) == [pids[1]]
    assert not any(pid_alive(pid) for pid in pids)


def test_an_external_service_is_probed_but_never_started_or_stopped(tmp_path: Path):
    external = described(
        tmp_path,
        ["false"],
        marker="never",
        check=lambda: (True, "green"),
        external_url="http://u:secret@es.example:9243",
        external_kind="cluster",
        prepare=lambda log: pytest.fail("prepared"),
    )
    lines: list[str] = []
    assert external.up(timeout=5, log=lines.append) is None
    external.down(lines.append)
    assert lines == [
        "test server: using external cluster at http://u:***@es.example:9243",
        "test server: using external cluster at http://u:***@es.example:9243; not stopping it",
    ]
    with pytest.raises(LocalServiceError, match="not starting a local one"):
        external.start(quiet)
    assert external.status(quiet).state == "external"


def test_every_service_module_describes_itself_as_a_managed_process(tmp_path: Path):
    for module, settings in (
        (elasticsearch_node, ElasticsearchSettings(home=tmp_path, port=9211)),
        (opensearch_node, OpenSearchSettings(home=tmp_path, port=9212)),
        (redis_server, RedisSettings(home=tmp_path, port=6392)),
        (llm_server, LlmSettings(home=tmp_path, port=8092)),
    ):
        managed = module.process(settings)
        assert managed.pidfile == settings.pidfile and managed.lock_file == settings.lock_file
        assert managed.ports[0][0] == settings.port
        assert managed.running_pid(quiet) is None
        assert "was ever started" in managed.logs()
    assert elasticsearch_node.process(ElasticsearchSettings(home=tmp_path, port=9211)).ports[1] == (
        9311,
        "transport port",
    )


def test_the_cli_shows_each_services_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CHUNKRAG_HOME", str(tmp_path))
    lines: list[str] = []
    cli.services_logs(log=lines.append)
    assert [line.split("\n")[0] for line in lines] == [
        "=== elasticsearch ===",
        "=== opensearch ===",
        "=== redis ===",
        "=== llm ===",
    ]


def test_an_empty_pidfile_is_one_being_written_and_is_left_alone(tmp_path) -> None:
    """A JVM node creates its pidfile, then writes the pid: a poll that
    lands in between must not delete it (the pid would be lost for good)."""
    from local_services.process import live_pid_from_pidfile

    pidfile = tmp_path / "node.pid"
    pidfile.write_text("")
    assert live_pid_from_pidfile(pidfile, "marker", lambda _message: None) is None
    assert pidfile.exists()
    pidfile.write_text("not a pid\n")
    assert live_pid_from_pidfile(pidfile, "marker", lambda _message: None) is None
    assert not pidfile.exists()


def test_a_daemon_that_retitles_itself_after_writing_its_pidfile_is_found(tmp_path) -> None:
    """Redis writes its pidfile, then retitles itself to the marker
    ("redis-server 127.0.0.1:<port>"): a start-up poll that lands in between
    sees a live pid without the marker and must not delete the pidfile, or
    the pid is lost and a running server is reported failed."""
    marker = "retitled-daemon 127.0.0.1:1"
    pidfile = tmp_path / "run" / "svc" / "svc.pid"
    # The launcher forks and returns at once; the child writes the pidfile,
    # waits past several polls, then execs (same pid) a program whose command
    # line carries the marker (spelt in two halves: the launch's own command
    # line must not carry it).
    daemon = (
        "import os, sys, time\n"
        "if os.fork():\n"
        "    sys.exit(0)\n"
        "os.setsid()\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(0.6)\n"
        f"title = {marker[:8]!r} + {marker[8:]!r}\n"
        "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', title])\n"
    )
    server = described(
        tmp_path,
        [sys.executable, "-c", daemon],
        marker=marker,
        check=lambda: (True, "up"),
        daemonizes=True,
        pidfile_wait_s=5.0,
    )
    pid = server.start(quiet)
    try:
        assert marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert server.pidfile.read_text().strip() == str(pid)
    finally:
        server.down(quiet)
