"""A local single-node OpenSearch on loopback, for development, tests and CI.

OpenSearch's "integ-test" distribution from Maven Central (from 3.5.0 it has
the usual modules: analysis-common with `english`, search-pipeline-common, …)
plus the k-NN plugin, also from Maven Central. That plugin zip carries no
native libraries, so only `"engine": "lucene"` vector fields work on this node:
the project never creates a faiss or nmslib one (indexing into one crashes a
node without the libraries). No security plugin is installed, so the node
speaks plain HTTP without authentication, like the local Elasticsearch.

The node runs as the same unprivileged user as Elasticsearch (OpenSearch also
refuses root), on its own HTTP and transport ports.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from local_services.elasticsearch_node import _log_excerpt, cluster_health, extract_zip_preserving_modes
from local_services.java import JavaHome, find_java_home
from local_services.maven import fetch_pinned
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
    unprivileged_user,
)

OPENSEARCH_VERSION = "3.5.0"
OPENSEARCH_ARTIFACT = f"org.opensearch.distribution.integ-test-zip:opensearch:{OPENSEARCH_VERSION}:zip"
OPENSEARCH_ZIP_SHA256 = "b676ad392c95a94d8d2bd8785b8b922c7811536daf6a9ec0c7277a34bd8a17a9"
KNN_VERSION = "3.5.0.0"
KNN_ARTIFACT = f"org.opensearch.plugin:opensearch-knn:{KNN_VERSION}:zip"
KNN_ZIP_SHA256 = "99fdf3ac9ef95974e276298b83a58532bf21ba13bd5fd96a4b59465b7e613309"
KNN_PLUGIN_DIR = "opensearch-knn"

CLUSTER_NAME = "chunkrag-local-opensearch"
NODE_NAME = "chunkrag-opensearch-1"
# 9200 is Elasticsearch's; the two nodes run side by side.
DEFAULT_PORT = 9201
# Elasticsearch's transport is its HTTP port + 100 (9300); +200 keeps ours
# clear of it for any pair of adjacent HTTP ports.
TRANSPORT_PORT_OFFSET = 200
DEFAULT_HEAP = "1g"
DEFAULT_WAIT_SECONDS = 120.0
STOP_GRACE_SECONDS = 30.0
# `bin/opensearch -d` returns once the node has started; a hang beyond this is a bug.
LAUNCH_TIMEOUT_SECONDS = 300.0
PLUGIN_INSTALL_TIMEOUT_SECONDS = 300.0
# The node writes its pidfile some seconds after the launcher returns (more on a busy machine).
PIDFILE_WAIT_SECONDS = 120.0
# Main class of the server JVM; distinguishes our node from a reused pid.
SERVER_CMDLINE_MARKER = "org.opensearch.bootstrap.OpenSearch"
HEALTHY_STATUSES = ("green", "yellow")

_HEAP_PATTERN = re.compile(r"^\d+[kmgKMG]?$")


@dataclass(frozen=True)
class OpenSearchSettings(PortRunFiles):
    """Where the node lives and how it is reached.

    `external_url` (from OPENSEARCH_URL) means the user runs their own
    cluster: it is probed but never started or stopped.
    """

    RUN_NAME = "opensearch"

    home: Path
    port: int = DEFAULT_PORT
    heap: str = DEFAULT_HEAP
    external_url: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> OpenSearchSettings:
        env = os.environ if environ is None else environ
        heap = env.get("CHUNKRAG_OPENSEARCH_HEAP", "").strip() or DEFAULT_HEAP
        if not _HEAP_PATTERN.match(heap):
            raise LocalServiceError(f"CHUNKRAG_OPENSEARCH_HEAP={heap!r} is not a JVM heap size like '1g' or '512m'")
        return cls(
            home=state_home(env),
            port=env_port(env, "CHUNKRAG_OPENSEARCH_PORT", DEFAULT_PORT),
            heap=heap,
            external_url=env.get("OPENSEARCH_URL", "").strip() or None,
        )

    @property
    def local_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return self.external_url or self.local_url

    @property
    def transport_port(self) -> int:
        return self.port + TRANSPORT_PORT_OFFSET

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def zip_path(self) -> Path:
        return self.cache_dir / f"opensearch-{OPENSEARCH_VERSION}.zip"

    @property
    def knn_zip_path(self) -> Path:
        return self.cache_dir / f"opensearch-knn-{KNN_VERSION}.zip"

    @property
    def distribution_dir(self) -> Path:
        # The k-NN version in the name: a tree without the plugin, or with
        # another version of it, is never mistaken for this one.
        return self.cache_dir / f"opensearch-{OPENSEARCH_VERSION}-knn-{KNN_VERSION}"

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
        return self.logs_dir / f"{CLUSTER_NAME}.log"


def opensearch_url(environ: Mapping[str, str] | None = None) -> str:
    """URL clients should use: OPENSEARCH_URL (with its credentials) or the local node."""
    return OpenSearchSettings.from_environ(environ).url


# --- fetching, unpacking, the k-NN plugin -------------------------------------------


def _java_env(java: JavaHome) -> dict[str, str]:
    # The launch scripts warn about (and ignore) these; drop them so their
    # output only shows real problems.
    ignored = ("JAVA_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "OPENSEARCH_JAVA_OPTS", "OPENSEARCH_PATH_CONF")
    env = {key: value for key, value in os.environ.items() if key not in ignored}
    env["OPENSEARCH_JAVA_HOME"] = str(java.path)
    return env


def plugin_install_command(distribution: Path, plugin_zip: Path) -> list[str]:
    # --batch answers yes to the plugin's extra permissions (k-NN asks for some).
    return [str(distribution / "bin" / "opensearch-plugin"), "install", "--batch", plugin_zip.resolve().as_uri()]


def _install_knn(distribution: Path, plugin_zip: Path, java: JavaHome, log: Log) -> None:
    log(f"installing the k-NN plugin {KNN_VERSION} into {distribution.name}…")
    env = _java_env(java)
    # The tool reads the distribution's own config; it must not pick up a run dir's.
    env["OPENSEARCH_PATH_CONF"] = str(distribution / "config")
    try:
        result = subprocess.run(
            plugin_install_command(distribution, plugin_zip),
            cwd=distribution,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PLUGIN_INSTALL_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise LocalServiceError(f"opensearch-plugin install did not finish within {PLUGIN_INSTALL_TIMEOUT_SECONDS:.0f} s") from None
    if result.returncode != 0 or not (distribution / "plugins" / KNN_PLUGIN_DIR).is_dir():
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise LocalServiceError(f"installing the k-NN plugin failed (exit {result.returncode}):\n{output}")


def fetch_distribution(settings: OpenSearchSettings, java: JavaHome, log: Log = print_line) -> Path:
    """The pinned distribution with the k-NN plugin, unpacked in the cache."""
    if (settings.distribution_dir / "plugins" / KNN_PLUGIN_DIR).is_dir():
        return settings.distribution_dir
    ensure_state_home(settings.home)
    make_public_dir(settings.cache_dir)
    hint = "Delete ~/.m2/repository/org/opensearch and retry."
    fetch_pinned(OPENSEARCH_ARTIFACT, OPENSEARCH_ZIP_SHA256, settings.zip_path, log, cleanup_hint=hint)
    fetch_pinned(KNN_ARTIFACT, KNN_ZIP_SHA256, settings.knn_zip_path, log, cleanup_hint=hint)
    log(f"unpacking {settings.zip_path.name} into {settings.cache_dir}…")
    staging = Path(tempfile.mkdtemp(dir=settings.cache_dir, prefix=".unpack-"))
    try:
        extract_zip_preserving_modes(settings.zip_path, staging)
        unpacked = staging / f"opensearch-{OPENSEARCH_VERSION}"
        if not (unpacked / "bin" / "opensearch").is_file():
            raise LocalServiceError(f"{settings.zip_path} does not contain opensearch-{OPENSEARCH_VERSION}/bin/opensearch; delete it and retry")
        _install_knn(unpacked, settings.knn_zip_path, java, log)
        # Rename is atomic: a half-unpacked tree, or one without the plugin,
        # is never seen under the final name, even if this process is killed.
        os.rename(unpacked, settings.distribution_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return settings.distribution_dir


# --- configuration ---------------------------------------------------------------


def render_opensearch_yml(settings: OpenSearchSettings) -> str:
    """opensearch.yml for a loopback-only development node (no security plugin is installed)."""
    lines = [
        "# Written by local_services; regenerated on every start.",
        f"cluster.name: {CLUSTER_NAME}",
        f"node.name: {NODE_NAME}",
        "discovery.type: single-node",
        # Loopback keeps bootstrap checks as warnings and the node private.
        f"network.host: {LOOPBACK}",
        f"http.port: {settings.port}",
        f"transport.port: {settings.transport_port}",
        f"path.data: {json.dumps(str(settings.data_dir))}",
        f"path.logs: {json.dumps(str(settings.logs_dir))}",
        # Dev disks are often nearly full; the watermark would make indices read-only.
        "cluster.routing.allocation.disk.threshold_enabled: false",
        # Tests delete indices by wildcard pattern.
        "action.destructive_requires_name: false",
    ]
    return "\n".join(lines) + "\n"


def rebase_jvm_options(text: str, settings: OpenSearchSettings) -> str:
    """jvm.options with the GC log, error file and heap dumps in the run dir.

    The shipped file names them relative to the distribution (`logs/gc.log`),
    which belongs to root and is shared by every run dir: the node's user
    cannot write there and the JVM refuses to start."""
    logs, data = str(settings.logs_dir), str(settings.data_dir)
    return (
        text.replace("file=logs/", f"file={logs}/")
        .replace("-Xloggc:logs/", f"-Xloggc:{logs}/")
        .replace("-XX:ErrorFile=logs/", f"-XX:ErrorFile={logs}/")
        .replace("-XX:HeapDumpPath=data", f"-XX:HeapDumpPath={data}")
    )


def _prepare_run_dir(settings: OpenSearchSettings, distribution: Path) -> None:
    make_public_dir(settings.run_dir.parent)
    settings.run_dir.mkdir(exist_ok=True)
    # Fresh config copy every start so it always matches the current settings
    # and distribution; data survives restarts.
    shutil.rmtree(settings.config_dir, ignore_errors=True)
    shutil.copytree(distribution / "config", settings.config_dir)
    (settings.config_dir / "opensearch.yml").write_text(render_opensearch_yml(settings))
    jvm_options = settings.config_dir / "jvm.options"
    jvm_options.write_text(rebase_jvm_options(jvm_options.read_text(), settings))
    for directory in (settings.data_dir, settings.logs_dir, settings.tmp_dir):
        directory.mkdir(exist_ok=True)


# --- lifecycle -------------------------------------------------------------------


def running_pid(settings: OpenSearchSettings, log: Log = print_line) -> int | None:
    return live_pid_from_pidfile(settings.pidfile, SERVER_CMDLINE_MARKER, log)


def _health_or_none(url: str) -> str | None:
    try:
        return str(cluster_health(url, timeout=3.0).get("status"))
    except OSError:
        return None


def _node_user(settings: OpenSearchSettings, log: Log) -> ServiceUser:
    user = unprivileged_user(ELASTICSEARCH_SYSTEM_USER, log)
    require_reachable(
        [("state directory (CHUNKRAG_HOME)", settings.home)],
        user,
        hint="Set CHUNKRAG_HOME to a directory all users can traverse, e.g. CHUNKRAG_HOME=<repo>/.chunkrag.",
    )
    return user


def start(settings: OpenSearchSettings, log: Log = print_line) -> int:
    """Start the node in the background and return its pid (no health wait)."""
    if settings.external_url:
        raise LocalServiceError(f"OPENSEARCH_URL is set ({redact_url(settings.url)}); not starting a local node")
    pid = running_pid(settings, log)
    if pid is not None:
        return pid
    for port, role in ((settings.port, "HTTP"), (settings.transport_port, "transport")):
        if port_in_use(port):
            raise LocalServiceError(
                f"cannot start opensearch: {role} port {LOOPBACK}:{port} is already taken by "
                f"{describe_port_owner(port)}, which was not started from CHUNKRAG_HOME={settings.home}. "
                f"Stop that process, choose another port with CHUNKRAG_OPENSEARCH_PORT (transport uses "
                f"port+{TRANSPORT_PORT_OFFSET}), or set OPENSEARCH_URL to use an already running cluster."
            )
    user = _node_user(settings, log)
    java = find_java_home()
    require_reachable(
        [("JDK", java.path / "bin" / "java")],
        user,
        hint="Set ES_JAVA_HOME to a JDK in a world-readable location such as /usr/lib/jvm.",
    )
    distribution = fetch_distribution(settings, java, log)
    require_reachable(
        [("OpenSearch distribution", distribution / "lib" / f"opensearch-{OPENSEARCH_VERSION}.jar")],
        user,
        hint=f"Delete {distribution} so it is unpacked again with the archive's permissions.",
    )
    _prepare_run_dir(settings, distribution)
    chown_tree(settings.run_dir, user)

    env = _java_env(java)
    env.update(
        OPENSEARCH_PATH_CONF=str(settings.config_dir),
        OPENSEARCH_JAVA_OPTS=f"-Xms{settings.heap} -Xmx{settings.heap}",
        OPENSEARCH_TMPDIR=str(settings.tmp_dir),
    )
    if not user.is_current:
        env.update(HOME=str(settings.run_dir), USER=user.name, LOGNAME=user.name)
    argv = command_as(user, [str(distribution / "bin" / "opensearch"), "-d", "-p", str(settings.pidfile)])
    log(f"starting opensearch {OPENSEARCH_VERSION} on {LOOPBACK}:{settings.port} as {user.name} (Java {java.major} from {java.path})…")
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
            raise LocalServiceError(f"bin/opensearch -d did not return within {LAUNCH_TIMEOUT_SECONDS:.0f} s.\n{_log_excerpt(settings)}") from None
    if result.returncode != 0:
        raise LocalServiceError(f"opensearch failed to start (exit {result.returncode}).\n{_log_excerpt(settings)}")
    # Unlike Elasticsearch, `bin/opensearch -d` returns before the node has
    # written its pidfile (that comes once the node has bootstrapped).
    deadline = time.monotonic() + PIDFILE_WAIT_SECONDS
    while (pid := running_pid(settings, log)) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if pid is None:
        raise LocalServiceError(
            f"opensearch reported a successful start but {settings.pidfile} named no running node within "
            f"{PIDFILE_WAIT_SECONDS:.0f} s.\n{_log_excerpt(settings)}"
        )
    return pid


def wait_until_healthy(settings: OpenSearchSettings, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> str:
    """Poll cluster health until green/yellow; return that status."""
    deadline = time.monotonic() + timeout
    pid = None if settings.external_url else running_pid(settings, log)
    last_problem = "no answer yet"
    while True:
        try:
            status = str(cluster_health(settings.url, wait_for_status="yellow", timeout=5.0).get("status"))
            if status in HEALTHY_STATUSES:
                return status
            last_problem = f"cluster status {status}"
        except OSError as exc:
            last_problem = str(getattr(exc, "reason", exc))
        if pid is not None and not pid_alive(pid):
            raise LocalServiceError(f"opensearch (pid {pid}) exited while starting.\n{_log_excerpt(settings)}")
        if time.monotonic() >= deadline:
            excerpt = "" if settings.external_url else f"\n{_log_excerpt(settings)}"
            raise LocalServiceError(
                f"opensearch at {redact_url(settings.url)} was not healthy after {timeout:.0f} s (last: {last_problem}).{excerpt}"
            )
        time.sleep(0.5)


def up(settings: OpenSearchSettings, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> None:
    """Idempotent: fetch if needed, start if not running, wait until healthy."""
    if settings.external_url:
        log(f"opensearch: using external cluster at {redact_url(settings.url)}")
        return
    _node_user(settings, log)
    ensure_state_home(settings.home)
    with exclusive_lock(settings.lock_file):
        began = time.monotonic()
        pid = running_pid(settings, log)
        if pid is not None:
            health = _health_or_none(settings.url)
            if health in HEALTHY_STATUSES:
                log(f"opensearch already running (pid {pid}) and healthy ({health}) at {settings.url}")
                return
            log(f"opensearch already running (pid {pid}); waiting for it to become healthy…")
        else:
            start(settings, log)
        status = wait_until_healthy(settings, timeout, log)
    log(f"opensearch healthy ({status}) in {time.monotonic() - began:.1f} s at {settings.url}")


def down(settings: OpenSearchSettings, log: Log = print_line) -> None:
    """Idempotent: stop the node started from this CHUNKRAG_HOME, if any."""
    stop_managed(
        "opensearch",
        external_url=settings.external_url,
        run_dir=settings.run_dir,
        lock_file=settings.lock_file,
        pidfile=settings.pidfile,
        find_pid=functools.partial(running_pid, settings),
        log=log,
        external_kind="cluster",
        grace_seconds=STOP_GRACE_SECONDS,
    )


def status(settings: OpenSearchSettings, log: Log = print_line) -> ServiceStatus:
    state, pid = managed_state(settings.external_url, functools.partial(running_pid, settings), log)
    try:
        health = str(cluster_health(settings.url, timeout=5.0).get("status"))
    except OSError as exc:
        health = "unreachable" if state != "external" else f"unreachable: {getattr(exc, 'reason', exc)}"
        return ServiceStatus("opensearch", state, redact_url(settings.url), False, health, pid)
    if state == "stopped":
        # Something answers on our port, but we did not start it.
        state = "unmanaged"
    return ServiceStatus("opensearch", state, redact_url(settings.url), health in HEALTHY_STATUSES, health, pid)
