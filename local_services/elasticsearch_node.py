"""A local single-node Elasticsearch on loopback, for development, tests and CI.

Uses Elastic's server-only "integ-test" distribution from Maven Central: it
has no bundled JDK, no `GET /` root endpoint, no language analyzers and no
painless, so health is probed with `GET /_cluster/health`.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from local_services.java import find_java_home
from local_services.maven import MAVEN_DEPENDENCY_PLUGIN, fetch_pinned, sha256_of  # noqa: F401 - re-exported
from local_services.process import (
    ELASTICSEARCH_SYSTEM_USER,
    LOOPBACK,
    LocalServiceError,
    Log,
    PortRunFiles,
    ServiceStatus,
    ServiceUser,
    chown_tree,
    command_as,
    describe_port_owner,
    ensure_state_home,
    env_port,
    error_lines,
    exclusive_lock,
    live_pid_from_pidfile,
    make_public_dir,
    managed_state,
    pid_alive,
    port_in_use,
    print_line,
    redact_url,
    require_reachable,
    state_home,
    stop_managed,
    tail,
    unprivileged_user,
)

ES_VERSION = "9.5.0"
ES_ZIP_SHA256 = "db0e275fd790f723eca7bcde96069fd6fed304ad23afdb70c8c09553dd9e8b1b"
MAVEN_ARTIFACT = f"org.elasticsearch.distribution.integ-test-zip:elasticsearch:{ES_VERSION}:zip"

CLUSTER_NAME = "chunkrag-local"
NODE_NAME = "chunkrag-local-1"
DEFAULT_PORT = 9200
DEFAULT_HEAP = "1g"
DEFAULT_WAIT_SECONDS = 120.0
STOP_GRACE_SECONDS = 30.0
# `bin/elasticsearch -d` returns once the node has started (HTTP bound);
# a cold JVM on 2 cores can take a while, a hang beyond this is a bug.
LAUNCH_TIMEOUT_SECONDS = 300.0
# Main class of the server JVM; distinguishes our node from a reused pid.
SERVER_CMDLINE_MARKER = "org.elasticsearch.bootstrap.Elasticsearch"
HEALTHY_STATUSES = ("green", "yellow")

_HEAP_PATTERN = re.compile(r"^\d+[kmgKMG]?$")


@dataclass(frozen=True)
class FileUser:
    name: str
    password: str = field(repr=False)
    roles: tuple[str, ...]


@dataclass(frozen=True)
class ElasticsearchSettings(PortRunFiles):
    """Where the node lives and how it is reached.

    `external_url` (from ES_URL) means the user runs their own cluster: it is
    probed but never started or stopped.
    """

    RUN_NAME = "elasticsearch"

    home: Path
    port: int = DEFAULT_PORT
    heap: str = DEFAULT_HEAP
    external_url: str | None = None
    # A node with x-pack security on (HTTP without TLS, loopback only):
    # file-realm users made with bin/elasticsearch-users, roles from roles_yml.
    # The default node stays open; a secured one is for security tests.
    security: bool = False
    users: tuple[FileUser, ...] = ()
    roles_yml: str = ""
    # "user:password" for the health probes of a secured node.
    probe_credentials: str | None = field(default=None, repr=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ElasticsearchSettings:
        env = os.environ if environ is None else environ
        heap = env.get("CHUNKRAG_ES_HEAP", "").strip() or DEFAULT_HEAP
        if not _HEAP_PATTERN.match(heap):
            raise LocalServiceError(f"CHUNKRAG_ES_HEAP={heap!r} is not a JVM heap size like '1g' or '512m'")
        return cls(
            home=state_home(env),
            port=env_port(env, "CHUNKRAG_ES_PORT", DEFAULT_PORT),
            heap=heap,
            external_url=env.get("ES_URL", "").strip() or None,
        )

    @property
    def local_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return self.external_url or self.local_url

    @property
    def health_url(self) -> str:
        """The URL health probes use: with the probe user on a secured node."""
        if self.external_url or not self.probe_credentials:
            return self.url
        user, _, password = self.probe_credentials.partition(":")
        return f"http://{urllib.parse.quote(user)}:{urllib.parse.quote(password)}@{LOOPBACK}:{self.port}"

    @property
    def cluster_name(self) -> str:
        return f"{CLUSTER_NAME}-secured" if self.security else CLUSTER_NAME

    @property
    def transport_port(self) -> int:
        return self.port + 100

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def zip_path(self) -> Path:
        return self.cache_dir / f"elasticsearch-{ES_VERSION}.zip"

    @property
    def distribution_dir(self) -> Path:
        return self.cache_dir / f"elasticsearch-{ES_VERSION}"

    @property
    def config_dir(self) -> Path:
        return self.run_dir / "config"

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def tmp_dir(self) -> Path:
        return self.run_dir / "tmp"

    @property
    def launcher_log(self) -> Path:
        return self.run_dir / "launcher.log"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / f"{self.cluster_name}.log"


def elasticsearch_url(environ: Mapping[str, str] | None = None) -> str:
    """URL clients should use: ES_URL (with its credentials) or the local node."""
    return ElasticsearchSettings.from_environ(environ).url


# --- HTTP ----------------------------------------------------------------------


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """Move user:password from the URL into a Basic Authorization header.

    urllib does not send URL credentials by itself.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, {}
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), {"Authorization": f"Basic {token}"}


def cluster_health(url: str, wait_for_status: str | None = None, timeout: float = 5.0) -> dict:
    """GET /_cluster/health. Raises OSError if the node cannot be reached."""
    base, headers = split_credentials(url)
    query = f"?wait_for_status={wait_for_status}&timeout=1s" if wait_for_status else ""
    request = urllib.request.Request(f"{base.rstrip('/')}/_cluster/health{query}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        # 408 means wait_for_status timed out; the body still has the status.
        body = exc.read()
        try:
            return json.loads(body)
        except ValueError:
            raise OSError(f"HTTP {exc.code} from {redact_url(url)}: {body[:200]!r}") from None
    except ValueError as exc:
        raise OSError(f"{redact_url(url)} did not answer with JSON: {exc}") from None


# --- fetching and unpacking ----------------------------------------------------


def zip_member_mode(info: zipfile.ZipInfo) -> int:
    """Permission bits stored in a zip entry (zipfile.extract ignores them).

    Setuid/setgid/sticky are dropped on purpose; archives made without Unix
    modes get ordinary defaults.
    """
    mode = (info.external_attr >> 16) & 0o777
    if mode == 0:
        return 0o755 if info.is_dir() else 0o644
    return mode


def extract_zip_preserving_modes(zip_path: Path, destination: Path) -> None:
    root = destination.resolve()
    with zipfile.ZipFile(zip_path) as archive:
        directories: list[tuple[Path, int]] = []
        for info in archive.infolist():
            target = (root / info.filename).resolve()
            if target != root and root not in target.parents:
                raise LocalServiceError(f"{zip_path} contains a path outside the archive: {info.filename!r}")
            archive.extract(info, root)
            if info.is_dir():
                directories.append((target, zip_member_mode(info)))
            else:
                target.chmod(zip_member_mode(info))
        # Directories last, deepest first, so a read-only directory does not
        # block extracting its own files.
        for directory, mode in sorted(directories, key=lambda item: len(item[0].parts), reverse=True):
            directory.chmod(mode)


def _download_with_maven(settings: ElasticsearchSettings, log: Log) -> None:
    fetch_pinned(
        MAVEN_ARTIFACT,
        ES_ZIP_SHA256,
        settings.zip_path,
        log,
        cleanup_hint="Delete ~/.m2/repository/org/elasticsearch/distribution and retry.",
    )


def _unpack(settings: ElasticsearchSettings, log: Log) -> None:
    log(f"unpacking {settings.zip_path.name} into {settings.cache_dir}…")
    staging = Path(tempfile.mkdtemp(dir=settings.cache_dir, prefix=".unpack-"))
    try:
        extract_zip_preserving_modes(settings.zip_path, staging)
        unpacked = staging / settings.distribution_dir.name
        if not (unpacked / "bin" / "elasticsearch").is_file():
            raise LocalServiceError(
                f"{settings.zip_path} does not contain {settings.distribution_dir.name}/bin/elasticsearch; "
                f"delete it and retry"
            )
        # Rename is atomic: a half-unpacked tree is never seen under the
        # final name, even if this process is killed.
        os.rename(unpacked, settings.distribution_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_distribution(settings: ElasticsearchSettings, log: Log = print_line) -> Path:
    """Make sure the pinned distribution is unpacked in the cache; return its path."""
    if (settings.distribution_dir / "bin" / "elasticsearch").is_file():
        return settings.distribution_dir
    ensure_state_home(settings.home)
    make_public_dir(settings.cache_dir)
    if settings.zip_path.is_file():
        actual = sha256_of(settings.zip_path)
        if actual != ES_ZIP_SHA256:
            log(f"cached {settings.zip_path.name} has sha256 {actual}, expected {ES_ZIP_SHA256}; fetching again")
            settings.zip_path.unlink()
    if not settings.zip_path.is_file():
        _download_with_maven(settings, log)
    _unpack(settings, log)
    return settings.distribution_dir


# --- configuration ---------------------------------------------------------------


def render_elasticsearch_yml(settings: ElasticsearchSettings, include_geoip_setting: bool = False) -> str:
    """elasticsearch.yml for a loopback-only, security-off development node.

    `include_geoip_setting` only when the ingest-geoip module is present:
    Elasticsearch refuses to start on settings no module declares.
    """
    lines = [
        "# Written by local_services; regenerated on every start.",
        f"cluster.name: {settings.cluster_name}",
        f"node.name: {NODE_NAME}",
        "discovery.type: single-node",
        # Loopback keeps bootstrap checks as warnings and the node private.
        f"network.host: {LOOPBACK}",
        f"http.port: {settings.port}",
        f"transport.port: {settings.transport_port}",
        f"path.data: {json.dumps(str(settings.data_dir))}",
        f"path.logs: {json.dumps(str(settings.logs_dir))}",
        *_security_lines(settings.security),
        # Dev disks are often nearly full; the watermark would make indices read-only.
        "cluster.routing.allocation.disk.threshold_enabled: false",
        # Tests delete indices by wildcard pattern.
        "action.destructive_requires_name: false",
    ]
    if include_geoip_setting:
        lines.append("ingest.geoip.downloader.enabled: false")
    return "\n".join(lines) + "\n"


def _security_lines(enabled: bool) -> list[str]:
    if not enabled:
        return ["xpack.security.enabled: false"]
    # Security without TLS: loopback only, so the bootstrap checks that
    # demand transport TLS do not apply to a single node; callers reach it
    # over plain HTTP with Basic credentials of the file realm.
    return [
        "xpack.security.enabled: true",
        "xpack.security.http.ssl.enabled: false",
        "xpack.security.transport.ssl.enabled: false",
        "xpack.security.enrollment.enabled: false",
    ]


def _add_file_realm_users(settings: ElasticsearchSettings, distribution: Path, java_home: Path) -> None:
    """roles.yml, then each user with bin/elasticsearch-users (which hashes
    the password the way the file realm expects)."""
    (settings.config_dir / "roles.yml").write_text(settings.roles_yml)
    env = {key: value for key, value in os.environ.items() if key not in ("JAVA_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "ES_JAVA_OPTS")}
    env.update(ES_JAVA_HOME=str(java_home), ES_PATH_CONF=str(settings.config_dir))
    for user in settings.users:
        command = [str(distribution / "bin" / "elasticsearch-users"), "useradd", user.name, "-p", user.password, "-r", ",".join(user.roles)]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise LocalServiceError(f"bin/elasticsearch-users useradd {user.name} failed (exit {result.returncode}): {(result.stdout + result.stderr).strip()[-500:]}")


def _prepare_run_dir(settings: ElasticsearchSettings, distribution: Path) -> None:
    make_public_dir(settings.run_dir.parent)
    settings.run_dir.mkdir(exist_ok=True)
    # Fresh config copy every start so it always matches the current settings
    # and distribution; data survives restarts.
    shutil.rmtree(settings.config_dir, ignore_errors=True)
    shutil.copytree(distribution / "config", settings.config_dir)
    geoip = (distribution / "modules" / "ingest-geoip").is_dir()
    (settings.config_dir / "elasticsearch.yml").write_text(render_elasticsearch_yml(settings, geoip))
    for directory in (settings.data_dir, settings.logs_dir, settings.tmp_dir):
        directory.mkdir(exist_ok=True)


# --- lifecycle -------------------------------------------------------------------


def running_pid(settings: ElasticsearchSettings, log: Log = print_line) -> int | None:
    return live_pid_from_pidfile(settings.pidfile, SERVER_CMDLINE_MARKER, log)


def _health_or_none(url: str) -> str | None:
    try:
        return str(cluster_health(url, timeout=3.0).get("status"))
    except OSError:
        return None


def _node_user(settings: ElasticsearchSettings, log: Log) -> ServiceUser:
    """The account the node runs as, after checking it can reach CHUNKRAG_HOME.

    Checked before anything is created or fetched so a bad CHUNKRAG_HOME
    (root's default under /root) fails fast.
    """
    user = unprivileged_user(ELASTICSEARCH_SYSTEM_USER, log)
    require_reachable(
        [("state directory (CHUNKRAG_HOME)", settings.home)],
        user,
        hint="Set CHUNKRAG_HOME to a directory all users can traverse, e.g. CHUNKRAG_HOME=<repo>/.chunkrag.",
    )
    return user


def start(settings: ElasticsearchSettings, log: Log = print_line) -> int:
    """Start the node in the background and return its pid (no health wait)."""
    if settings.external_url:
        raise LocalServiceError(f"ES_URL is set ({redact_url(settings.url)}); not starting a local node")
    pid = running_pid(settings, log)
    if pid is not None:
        return pid
    for port, role in ((settings.port, "HTTP"), (settings.transport_port, "transport")):
        if port_in_use(port):
            raise LocalServiceError(
                f"cannot start elasticsearch: {role} port {LOOPBACK}:{port} is already taken by "
                f"{describe_port_owner(port)}, which was not started from CHUNKRAG_HOME={settings.home}. "
                f"Stop that process, choose another port with CHUNKRAG_ES_PORT (transport uses port+100), "
                f"or set ES_URL to use an already running cluster."
            )

    user = _node_user(settings, log)
    java = find_java_home()
    require_reachable(
        [("JDK", java.path / "bin" / "java")],
        user,
        hint="Set ES_JAVA_HOME to a JDK in a world-readable location such as /usr/lib/jvm.",
    )
    distribution = fetch_distribution(settings, log)
    require_reachable(
        [("Elasticsearch distribution", distribution / "lib" / f"elasticsearch-{ES_VERSION}.jar")],
        user,
        hint=f"Delete {distribution} so it is unpacked again with the archive's permissions.",
    )
    _prepare_run_dir(settings, distribution)
    if settings.security:
        _add_file_realm_users(settings, distribution, java.path)
    chown_tree(settings.run_dir, user)

    # bin/elasticsearch warns about (and ignores) these; drop them so the
    # launcher output only shows real problems.
    ignored = ("JAVA_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "ES_JAVA_OPTS")
    env = {key: value for key, value in os.environ.items() if key not in ignored}
    env.update(
        ES_JAVA_HOME=str(java.path),
        ES_PATH_CONF=str(settings.config_dir),
        ES_JAVA_OPTS=f"-Xms{settings.heap} -Xmx{settings.heap}",
        ES_TMPDIR=str(settings.tmp_dir),
    )
    if not user.is_current:
        env.update(HOME=str(settings.run_dir), USER=user.name, LOGNAME=user.name)
    argv = command_as(user, [str(distribution / "bin" / "elasticsearch"), "-d", "-p", str(settings.pidfile)])

    log(
        f"starting elasticsearch {ES_VERSION} on {LOOPBACK}:{settings.port} as {user.name} "
        f"(Java {java.major} from {java.path})…"
    )
    with settings.launcher_log.open("wb") as launcher_output:
        try:
            result = subprocess.run(
                argv,
                cwd=settings.run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=launcher_output,
                stderr=subprocess.STDOUT,
                # Ctrl-C in the caller's terminal must not reach the node.
                start_new_session=True,
                timeout=LAUNCH_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            raise LocalServiceError(
                f"bin/elasticsearch -d did not return within {LAUNCH_TIMEOUT_SECONDS:.0f} s.\n"
                f"{_log_excerpt(settings)}"
            ) from None
    if result.returncode != 0:
        raise LocalServiceError(f"elasticsearch failed to start (exit {result.returncode}).\n{_log_excerpt(settings)}")
    pid = running_pid(settings, log)
    if pid is None:
        raise LocalServiceError(
            f"elasticsearch reported a successful start but {settings.pidfile} names no running node.\n"
            f"{_log_excerpt(settings)}"
        )
    return pid


def _log_excerpt(settings: ElasticsearchSettings, lines: int = 40) -> str:
    """Likely cause from this start's launcher output, then the node log's tail."""
    if not settings.launcher_log.exists():
        return (
            f"No node was ever started from CHUNKRAG_HOME={settings.home} on port {settings.port}; "
            f"start one with 'python -m local_services up'."
        )
    parts = []
    causes = error_lines(settings.launcher_log)
    if causes:
        parts += [f"--- errors in {settings.launcher_log} ---", *causes]
    # The node log only exists once the JVM got far enough to configure
    # logging; before that everything went to the launcher output.
    log_file = settings.server_log if settings.server_log.exists() else settings.launcher_log
    parts += [f"--- last {lines} lines of {log_file} ---", tail(log_file, lines)]
    return "\n".join(parts)


def wait_until_healthy(
    settings: ElasticsearchSettings, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line
) -> str:
    """Poll cluster health until green/yellow; return that status."""
    deadline = time.monotonic() + timeout
    pid = None if settings.external_url else running_pid(settings, log)
    last_problem = "no answer yet"
    while True:
        try:
            health = cluster_health(settings.health_url, wait_for_status="yellow", timeout=5.0)
            status = str(health.get("status"))
            if status in HEALTHY_STATUSES:
                return status
            last_problem = f"cluster status {status}"
        except OSError as exc:
            last_problem = str(getattr(exc, "reason", exc))
        if pid is not None and not pid_alive(pid):
            raise LocalServiceError(f"elasticsearch (pid {pid}) exited while starting.\n{_log_excerpt(settings)}")
        if time.monotonic() >= deadline:
            excerpt = "" if settings.external_url else f"\n{_log_excerpt(settings)}"
            raise LocalServiceError(
                f"elasticsearch at {redact_url(settings.url)} was not healthy after {timeout:.0f} s "
                f"(last: {last_problem}).{excerpt}"
            )
        time.sleep(0.5)


def up(settings: ElasticsearchSettings, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> None:
    """Idempotent: fetch if needed, start if not running, wait until healthy."""
    if settings.external_url:
        log(f"elasticsearch: using external cluster at {redact_url(settings.url)}")
        return
    _node_user(settings, log)
    ensure_state_home(settings.home)
    with exclusive_lock(settings.lock_file):
        began = time.monotonic()
        pid = running_pid(settings, log)
        if pid is not None:
            health = _health_or_none(settings.health_url)
            if health in HEALTHY_STATUSES:
                log(f"elasticsearch already running (pid {pid}) and healthy ({health}) at {settings.url}")
                return
            log(f"elasticsearch already running (pid {pid}); waiting for it to become healthy…")
        else:
            start(settings, log)
        status = wait_until_healthy(settings, timeout, log)
    log(f"elasticsearch healthy ({status}) in {time.monotonic() - began:.1f} s at {settings.url}")


def down(settings: ElasticsearchSettings, log: Log = print_line) -> None:
    """Idempotent: stop the node started from this CHUNKRAG_HOME, if any."""
    stop_managed(
        "elasticsearch",
        external_url=settings.external_url,
        run_dir=settings.run_dir,
        lock_file=settings.lock_file,
        pidfile=settings.pidfile,
        find_pid=functools.partial(running_pid, settings),
        log=log,
        external_kind="cluster",
        grace_seconds=STOP_GRACE_SECONDS,
    )


def status(settings: ElasticsearchSettings, log: Log = print_line) -> ServiceStatus:
    state, pid = managed_state(settings.external_url, functools.partial(running_pid, settings), log)
    try:
        health = str(cluster_health(settings.health_url, timeout=5.0).get("status"))
    except OSError as exc:
        health = "unreachable" if state != "external" else f"unreachable: {getattr(exc, 'reason', exc)}"
        return ServiceStatus("elasticsearch", state, redact_url(settings.url), False, health, pid)
    if state == "stopped":
        # Something answers on our port, but we did not start it.
        state = "unmanaged"
    return ServiceStatus("elasticsearch", state, redact_url(settings.url), health in HEALTHY_STATUSES, health, pid)
