"""Process plumbing shared by the service modules (the lifecycle built on it is managed.py).

Pidfiles, liveness, port checks, the wait loop, the state directory, and running
a service as an unprivileged user (Elasticsearch refuses to run as root).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import random
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

Log = Callable[[str], None]

LOOPBACK = "127.0.0.1"
ELASTICSEARCH_SYSTEM_USER = "chunkrag-es"


class LocalServiceError(RuntimeError):
    """A failure the user can act on; the message says what to do."""


def print_line(message: str) -> None:
    # Flush so progress lines interleave correctly with child process output
    # when stdout is a pipe (CI logs).
    print(message, flush=True)


@dataclass(frozen=True)
class ServiceStatus:
    """One service's state as reported by `status`."""

    name: str
    state: str  # "running", "stopped", "external" or "unmanaged"
    url: str
    healthy: bool
    health: str
    pid: int | None = None

    def line(self) -> str:
        pid = f"pid {self.pid}" if self.pid else "pid -"
        verdict = "healthy" if self.healthy else "NOT healthy"
        return f"{self.name:<13} {self.state:<9} {pid:<11} {self.url:<27} {verdict} ({self.health})"


# --- configuration from the environment ----------------------------------------


def env_port(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise LocalServiceError(f"{name}={raw!r} is not a TCP port number (1-65535); fix or unset it")
    return int(raw)


# --- state directory ---------------------------------------------------------


def make_public_dir(path: Path) -> Path:
    """Create a directory other local users may traverse.

    The Elasticsearch user must reach the distribution through these
    directories, so a restrictive umask must not leave them private.
    """
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def ensure_state_home(home: Path) -> Path:
    fresh = not home.exists()
    make_public_dir(home)
    if fresh:
        # The home often lives inside a work tree (the Makefile uses
        # <repo>/.chunkrag); keep gigabytes of state out of git.
        (home / ".gitignore").write_text("*\n")
    return home


# --- pidfiles and processes ----------------------------------------------------


def read_pidfile(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, PermissionError):
        return None
    return int(text) if text.isdigit() else None


def _holds_text(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except (FileNotFoundError, PermissionError):
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Exists but belongs to another user.
        pass
    # A zombie still answers kill(0) but is no longer serving anything.
    try:
        stat_text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_text.rpartition(")")[2].split()[0] != "Z"


def process_cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def our_pid_in_pidfile(pidfile: Path, cmdline_marker: str) -> int | None:
    """The pid in the pidfile if that process runs with the marker in its
    command line; never removes anything.

    What a start-up poll uses: a daemon may write its pidfile before it has
    retitled itself to the marker (Redis does), and a pidfile removed in that
    moment loses a running server's pid for good.
    """
    pid = read_pidfile(pidfile)
    if pid is None or not pid_alive(pid):
        return None
    return pid if cmdline_marker in process_cmdline(pid) else None


def live_pid_from_pidfile(pidfile: Path, cmdline_marker: str, log: Log) -> int | None:
    """Pid of our running process, removing the pidfile if it is stale.

    A pid is only trusted if the process command line contains the marker,
    because after a reboot or crash the number may belong to anything.
    """
    pid = read_pidfile(pidfile)
    if pid is None:
        # An empty pidfile is one being written: a JVM node creates the file,
        # then writes its pid. Removing it in between would lose the pid for
        # good (the node writes into the unlinked file) and the start would be
        # reported failed with the node running. The next start overwrites it.
        if _holds_text(pidfile):
            log(f"removing unreadable pidfile {pidfile}")
            pidfile.unlink(missing_ok=True)
        return None
    if pid_alive(pid):
        if cmdline_marker in process_cmdline(pid):
            return pid
        reason = f"pid {pid} is now another program"
    else:
        reason = f"pid {pid} is not running"
    log(f"removing stale pidfile {pidfile} ({reason})")
    pidfile.unlink(missing_ok=True)
    return None


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Serialise up/down of one service across processes.

    Parallel test workers may all call `up` at once; without this, each
    would see no pidfile and race to start its own server on the same port.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class PortRunFiles:
    """Runtime files of a service started on `port` from the state directory `home`.

    Mixed into each service's frozen settings dataclass, which sets RUN_NAME
    and has `home` and `port` fields. One runtime dir per port, so servers on
    different ports do not share pidfiles or data.
    """

    RUN_NAME: ClassVar[str]
    home: Path
    port: int

    @property
    def run_dir(self) -> Path:
        return self.home / "run" / f"{self.RUN_NAME}-{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.run_dir / f"{self.RUN_NAME}.pid"

    @property
    def lock_file(self) -> Path:
        # Beside, not inside, run_dir: Elasticsearch's run_dir is handed to the node's user.
        return self.home / "run" / f"{self.RUN_NAME}-{self.port}.lock"


def run_launcher(
    argv: list[str],
    *,
    cwd: Path,
    timeout: float,
    timed_out: Callable[[], str],
    env: Mapping[str, str] | None = None,
    output=None,
) -> subprocess.CompletedProcess:
    """Run a command that starts a service in the background and returns: in
    a session of its own (Ctrl-C in the caller's terminal must not reach the
    service), stdin closed, its output captured as text, or written to the
    binary file ``output``. Raises LocalServiceError(``timed_out()``) if it
    has not returned after ``timeout`` s."""
    streams = (
        {"stdout": output, "stderr": subprocess.STDOUT}
        if output is not None
        else {"capture_output": True, "text": True}
    )
    try:
        return subprocess.run(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True, timeout=timeout, **streams
        )
    except subprocess.TimeoutExpired:
        raise LocalServiceError(timed_out()) from None


# A probe's answer: (True, what to return) when ready, else (False, the problem).
Probe = Callable[[], "tuple[bool, object]"]


def wait_until_ready(
    probe: Probe,
    *,
    timeout: float,
    pid: int | None,
    interval: float,
    exited: Callable[[], str],
    timed_out: Callable[[str], str],
):
    """Call ``probe`` every ``interval`` s until it says ready and return what
    it found. An OSError from it is a problem like any other (the service is
    not listening yet). Raises LocalServiceError with ``exited()`` if the
    started process ``pid`` died, or ``timed_out(last problem)`` after
    ``timeout`` s; both are called only then (they may read logs)."""
    deadline = time.monotonic() + timeout
    last_problem = "no answer yet"
    while True:
        try:
            ready, found = probe()
            if ready:
                return found
            last_problem = str(found)
        except OSError as exc:
            last_problem = str(getattr(exc, "reason", exc))
        if pid is not None and not pid_alive(pid):
            raise LocalServiceError(exited())
        if time.monotonic() >= deadline:
            raise LocalServiceError(timed_out(last_problem))
        time.sleep(interval)


def tail(path: Path, lines: int = 40, width: int = 400) -> str:
    """Last lines of a log, each cut to `width` (JVM argument lines run to kilobytes)."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(could not read {path}: {exc.strerror})"
    return "\n".join(_clip(line, width) for line in content[-lines:])


_ERROR_MARKERS = ("[ERROR]", "[FATAL]", "ERROR:", "Error occurred", "Exception:", "# Fatal")


def error_lines(path: Path, limit: int = 5, width: int = 400) -> list[str]:
    """Lines that look like the reason a process failed, to show before a long tail."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = [_clip(line, width) for line in content if any(marker in line for marker in _ERROR_MARKERS)]
    return found[:limit]


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


# --- ports -----------------------------------------------------------------------


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


# Where `free_port_block` looks: above every fixed port of the local services
# (9200-9300, 6379, 8088, the cluster defaults 9250/9270) and below the
# kernel's ephemeral range (32768 up on Linux), so an outgoing connection is
# never handed a port a node is about to listen on.
FREE_PORTS = (20000, 32000)


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """True if a listening socket could bind ``port`` now (a probe: bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port_block(
    size: int,
    *,
    taken: Callable[[int], bool] = lambda _port: False,
    ports: tuple[int, int] = FREE_PORTS,
    shuffle: Callable[[list[int]], None] = random.shuffle,
) -> int:
    """The first port of ``size`` consecutive ports that all bind on loopback
    now and that ``taken`` does not claim (e.g. a run dir left there).

    Blocks are aligned on ``size`` and each tried once, in random order, so
    two runs probing at the same moment rarely pick the same block. A probe
    cannot reserve the ports: whoever starts first on them wins, and the
    other's start fails with the port named."""
    low, high = ports
    if size < 1 or high - low + 1 < size:
        raise LocalServiceError(f"no block of {size} ports fits in {low}-{high}")
    firsts = list(range(low, high - size + 2, size))
    shuffle(firsts)
    for first in firsts:
        block = range(first, first + size)
        if not any(taken(port) for port in block) and all(port_free(port) for port in block):
            return first
    raise LocalServiceError(f"found no {size} free consecutive ports in {low}-{high}")


def listening_pid(port: int) -> int | None:
    """Best-effort owner of a listening TCP port, for error messages only."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "0A":  # 0A = LISTEN
                inodes.add(fields[9])
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in targets:
                    return int(proc.name)
        except OSError:
            continue
    return None


def describe_port_owner(port: int) -> str:
    pid = listening_pid(port)
    if pid is None:
        return "an unknown process"
    return f"pid {pid} ({process_cmdline(pid)[:120] or 'command line unavailable'})"


# --- users ---------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceUser:
    """The account a service process runs as."""

    name: str
    uid: int
    gid: int
    group_ids: tuple[int, ...]

    @property
    def is_current(self) -> bool:
        return self.uid == os.geteuid()


def user_by_name(name: str) -> ServiceUser:
    entry = pwd.getpwnam(name)
    groups = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if name in g.gr_mem}
    return ServiceUser(name, entry.pw_uid, entry.pw_gid, tuple(sorted(groups)))


def current_user() -> ServiceUser:
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return ServiceUser(name, uid, os.getegid(), tuple(sorted({os.getegid(), *os.getgroups()})))


def ensure_system_user(name: str, log: Log) -> ServiceUser:
    try:
        return user_by_name(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise LocalServiceError(
            f"need a system user '{name}' to run the service as non-root, but 'useradd' is not on "
            f"PATH; create the user yourself or run this command as a normal user"
        )
    log(f"creating system user {name}")
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise LocalServiceError(f"'useradd {name}' failed: {result.stderr.strip()}")
    return user_by_name(name)


def unprivileged_user(system_user: str, log: Log) -> ServiceUser:
    """Root runs services as a dedicated system user; anyone else as themselves."""
    if os.geteuid() == 0:
        return ensure_system_user(system_user, log)
    return current_user()


def command_as(user: ServiceUser, argv: list[str]) -> list[str]:
    if user.is_current:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        return [setpriv, f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--", *argv]
    runuser = shutil.which("runuser")
    if runuser is not None:
        return [runuser, "-u", user.name, "--", *argv]
    raise LocalServiceError(
        f"cannot switch to user {user.name}: neither 'setpriv' nor 'runuser' is on PATH (install util-linux) "
    )


def chown_tree(root: Path, user: ServiceUser) -> None:
    if user.is_current:
        return
    os.chown(root, user.uid, user.gid)
    for directory, subdirs, files in os.walk(root):
        for name in (*subdirs, *files):
            os.chown(os.path.join(directory, name), user.uid, user.gid, follow_symlinks=False)


def _permits(st: os.stat_result, user: ServiceUser, owner_bit: int, group_bit: int, other_bit: int) -> bool:
    if user.uid == 0:
        return True
    if st.st_uid == user.uid:
        return bool(st.st_mode & owner_bit)
    if st.st_gid in user.group_ids:
        return bool(st.st_mode & group_bit)
    return bool(st.st_mode & other_bit)


def first_blocking_path(path: Path, user: ServiceUser) -> Path | None:
    """The first directory on the way to `path` the user cannot enter, or
    `path` itself if it is a file the user cannot read; None if all is well.

    Reads plain mode bits (ACLs are ignored) so it can answer for another
    user without switching to it.
    """
    path = path.resolve()
    for candidate in reversed([path, *path.parents]):
        try:
            st = candidate.stat()
        except FileNotFoundError:
            return None  # Will be created by us with public permissions.
        if stat.S_ISDIR(st.st_mode):
            if not _permits(st, user, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                return candidate
        elif not _permits(st, user, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
            return candidate
    return None


def require_reachable(paths: Iterable[tuple[str, Path]], user: ServiceUser, hint: str = "") -> None:
    for label, path in paths:
        blocker = first_blocking_path(path, user)
        if blocker is not None:
            what = "directory" if blocker.is_dir() else "file"
            raise LocalServiceError(
                f"user {user.name} cannot reach the {label} at {path}: {what} {blocker} is not "
                f"accessible to it (mode {stat.filemode(blocker.stat().st_mode)}, owner uid "
                f"{blocker.stat().st_uid}). {hint}".rstrip()
            )
