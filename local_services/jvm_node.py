"""What the local Elasticsearch and OpenSearch nodes share.

Both are a Java server fetched as a zip from Maven Central, unpacked keeping
file modes, configured in a run directory of their own, started with
`bin/<name> -d -p <pidfile>` as an unprivileged user, and probed with
`GET /_cluster/health`. A node module describes itself with a
:class:`JvmNode` (names, version, environment prefix, its own fetching and
configuring steps) and gets its :class:`~local_services.managed.ManagedProcess`
from :func:`process` (whose preparation fetches and configures the node;
callers use `process(...).up()`, `.down()`, `.status()`); what only one engine has
(security users, the k-NN plugin, the jvm.options rewrite) stays in its module.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import SettingsError, node_urls, state_home
from local_services.java import JavaHome, find_java_home
from local_services.managed import Command, ManagedProcess
from local_services.process import (
    ELASTICSEARCH_SYSTEM_USER,
    LOOPBACK,
    LocalServiceError,
    Log,
    ServiceUser,
    chown_tree,
    env_port,
    exclusive_lock,
    make_public_dir,
    require_reachable,
    unprivileged_user,
)

DEFAULT_HEAP = "1g"
STOP_GRACE_SECONDS = 30.0
# `bin/<name> -d` returns once the node has started; a cold JVM on 2 cores
# can take a while, a hang beyond this is a bug.
LAUNCH_TIMEOUT_SECONDS = 300.0
HEALTHY_STATUSES = ("green", "yellow")

_HEAP_PATTERN = re.compile(r"^\d+[kmgKMG]?$")


@dataclass(frozen=True)
class JvmNode:
    """One engine's names and steps; the lifecycle below is the same for both."""

    name: str  # "elasticsearch": bin/<name>, lib/<name>-<version>.jar, messages
    title: str  # "Elasticsearch", in messages about its files
    version: str
    env_prefix: str  # "ES": ES_JAVA_HOME, ES_PATH_CONF, ES_JAVA_OPTS, ES_TMPDIR
    # Main class of the server JVM; distinguishes our node from a reused pid.
    cmdline_marker: str
    # (settings, java, log) -> the unpacked distribution, fetched if needed.
    fetch: Callable[[Any, JavaHome, Log], Path]
    # (settings, distribution, java) -> the run dir's config written.
    configure: Callable[[Any, Path, JavaHome], None]
    # How long the pidfile may take after `-d` returns (0: it is already written).
    pidfile_wait_s: float = 0.0
    # The setting naming the nodes that elect the first master of a new
    # cluster (OpenSearch renamed "master" to "cluster_manager").
    initial_masters_setting: str = "cluster.initial_master_nodes"


@dataclass(frozen=True)
class ClusterMember:
    """A node's place in a multi-node cluster on loopback (cluster.py makes
    these): its name, its transport port, and the transport ports of every
    member it looks for at start."""

    cluster_name: str
    node_name: str
    transport_port: int
    seed_transport_ports: tuple[int, ...]
    initial_masters: tuple[str, ...]


class JvmRunFiles:
    """Where a node's files live and how it is reached. Mixed, beside
    ``PortRunFiles``, into each node's frozen settings dataclass, which has
    ``home``, ``port``, ``heap`` and ``external_url`` fields and sets the
    class variables."""

    CLUSTER_NAME: ClassVar[str]
    TRANSPORT_PORT_OFFSET: ClassVar[int]
    DEFAULT_PORT: ClassVar[int]
    PORT_VARIABLE: ClassVar[str]  # "CHUNKRAG_ES_PORT"
    HEAP_VARIABLE: ClassVar[str]  # "CHUNKRAG_ES_HEAP"
    URL_VARIABLE: ClassVar[str]  # "ES_URL": an external cluster, never started here
    # A multi-node cluster on loopback (cluster.py): its block's first port
    # by default, and the variable that moves it.
    CLUSTER_FIRST_PORT: ClassVar[int]  # 9250
    CLUSTER_PORT_VARIABLE: ClassVar[str]  # "CHUNKRAG_ES_CLUSTER_PORT"
    run_dir: Path
    home: Path
    port: int
    heap: str
    external_url: str | None
    cluster: ClusterMember | None  # None: a single node, its own cluster

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Self:
        env = os.environ if environ is None else environ
        heap = env.get(cls.HEAP_VARIABLE, "").strip() or DEFAULT_HEAP
        if not _HEAP_PATTERN.match(heap):
            raise LocalServiceError(f"{cls.HEAP_VARIABLE}={heap!r} is not a JVM heap size like '1g' or '512m'")
        return cls(
            home=state_home(env),
            port=env_port(env, cls.PORT_VARIABLE, cls.DEFAULT_PORT),
            heap=heap,
            external_url=env.get(cls.URL_VARIABLE, "").strip() or None,
        )

    @property
    def local_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return self.external_url or self.local_url

    @property
    def health_url(self) -> str:
        """The URL health probes use."""
        return self.url

    @property
    def cluster_name(self) -> str:
        return self.cluster.cluster_name if self.cluster else self.CLUSTER_NAME

    @property
    def transport_port(self) -> int:
        return self.cluster.transport_port if self.cluster else self.port + self.TRANSPORT_PORT_OFFSET

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

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
    """GET /_cluster/health from the first node of ``url`` (one URL, or node
    URLs separated by commas, as ES_URL takes them) that answers. Raises
    OSError if none can be reached."""
    try:
        nodes = node_urls(url)
    except SettingsError as exc:
        raise OSError(str(exc)) from None
    failure: OSError | None = None
    for node in nodes:
        try:
            return _node_health(node, wait_for_status, timeout)
        except OSError as exc:
            failure = exc
    raise failure or OSError(f"no node in {redact_url(url)}")


def _node_health(url: str, wait_for_status: str | None, timeout: float) -> dict:
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


def unpack(
    node: JvmNode, zip_path: Path, destination: Path, log: Log, finish: Callable[[Path], None] | None = None
) -> Path:
    """Unpack ``zip_path`` (whose top folder is ``<name>-<version>``) to
    ``destination``; ``finish`` runs on the unpacked tree before it gets its
    final name."""
    log(f"unpacking {zip_path.name} into {destination.parent}…")
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=".unpack-"))
    top = f"{node.name}-{node.version}"
    try:
        extract_zip_preserving_modes(zip_path, staging)
        unpacked = staging / top
        if not (unpacked / "bin" / node.name).is_file():
            raise LocalServiceError(f"{zip_path} does not contain {top}/bin/{node.name}; delete it and retry")
        if finish is not None:
            finish(unpacked)
        # Rename is atomic: a half-unpacked (or half-finished) tree is never
        # seen under the final name, even if this process is killed.
        os.rename(unpacked, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


# --- configuration ---------------------------------------------------------------


def discovery_lines(member: ClusterMember | None, initial_masters_setting: str) -> list[str]:
    """How the node finds its cluster: alone (single-node discovery), or by
    the transport ports of the other members, the first master elected
    among all of them (every member is master-eligible and holds data)."""
    if member is None:
        return ["discovery.type: single-node"]
    seeds = ", ".join(json.dumps(f"{LOOPBACK}:{port}") for port in member.seed_transport_ports)
    masters = ", ".join(json.dumps(name) for name in member.initial_masters)
    return [f"discovery.seed_hosts: [{seeds}]", f"{initial_masters_setting}: [{masters}]"]


def render_node_yml(
    settings: JvmRunFiles,
    node_name: str,
    engine_lines: Sequence[str] = (),
    last_lines: Sequence[str] = (),
    initial_masters_setting: str = "cluster.initial_master_nodes",
) -> str:
    """The node's yml for a loopback-only development node (alone, or a
    member of a local cluster when ``settings.cluster`` says so): what both
    engines take, with ``engine_lines`` (settings only one engine knows)
    after the paths and ``last_lines`` at the end."""
    member = settings.cluster
    lines = [
        "# Written by local_services; regenerated on every start.",
        f"cluster.name: {settings.cluster_name}",
        f"node.name: {member.node_name if member else node_name}",
        *discovery_lines(member, initial_masters_setting),
        # Loopback keeps bootstrap checks as warnings and the node private.
        f"network.host: {LOOPBACK}",
        f"http.port: {settings.port}",
        f"transport.port: {settings.transport_port}",
        f"path.data: {json.dumps(str(settings.data_dir))}",
        f"path.logs: {json.dumps(str(settings.logs_dir))}",
        *engine_lines,
        # Dev disks are often nearly full; the watermark would make indices read-only.
        "cluster.routing.allocation.disk.threshold_enabled: false",
        # Tests delete indices by wildcard pattern.
        "action.destructive_requires_name: false",
        *last_lines,
    ]
    return "\n".join(lines) + "\n"


def java_env(node: JvmNode, java_home: Path) -> dict[str, str]:
    """This process's environment for the node's scripts, with its JDK.

    The launch scripts warn about (and ignore) the generic Java variables, and
    a stray <PREFIX>_PATH_CONF or _JAVA_OPTS would point them elsewhere: drop
    them so the output only shows real problems."""
    prefix = node.env_prefix
    ignored = ("JAVA_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", f"{prefix}_JAVA_OPTS", f"{prefix}_PATH_CONF")
    env = {key: value for key, value in os.environ.items() if key not in ignored}
    env[f"{prefix}_JAVA_HOME"] = str(java_home)
    return env


def prepare_run_dir(settings: JvmRunFiles, distribution: Path) -> None:
    """The run dir with a fresh copy of the distribution's config (so it
    always matches the current settings and distribution; data survives
    restarts), for the node module to write its own files into."""
    make_public_dir(settings.run_dir.parent)
    settings.run_dir.mkdir(exist_ok=True)
    shutil.rmtree(settings.config_dir, ignore_errors=True)
    shutil.copytree(distribution / "config", settings.config_dir)
    for directory in (settings.data_dir, settings.logs_dir, settings.tmp_dir):
        directory.mkdir(exist_ok=True)


# --- lifecycle -------------------------------------------------------------------


def _node_user(settings: JvmRunFiles, log: Log) -> ServiceUser:
    """The account the node runs as, after checking it can reach CHUNKRAG_HOME.

    Checked before anything is created or fetched so a bad CHUNKRAG_HOME
    (root's default under /root) fails fast. Both engines refuse root.
    """
    user = unprivileged_user(ELASTICSEARCH_SYSTEM_USER, log)
    require_reachable(
        [("state directory (CHUNKRAG_HOME)", settings.home)],
        user,
        hint="Set CHUNKRAG_HOME to a directory all users can traverse, e.g. CHUNKRAG_HOME=<repo>/.chunkrag.",
    )
    return user


def fetch_once(node: JvmNode, settings: JvmRunFiles, java: JavaHome, log: Log) -> Path:
    """``node.fetch``, one caller at a time per state home.

    The nodes of a local cluster start side by side, each from the one
    distribution in the cache: the first fetches and unpacks it, the others
    wait here and then find it (two unpacks at once fail on the final rename)."""
    with exclusive_lock(settings.home / "run" / f"{node.name}-{node.version}.fetch.lock"):
        return node.fetch(settings, java, log)


def _prepare(node: JvmNode, settings: JvmRunFiles, log: Log) -> Command:
    """Fetch and configure the node; the command is `bin/<name> -d -p <pidfile>` as the node's user."""
    user = _node_user(settings, log)
    java = find_java_home()
    require_reachable(
        [("JDK", java.path / "bin" / "java")],
        user,
        hint="Set ES_JAVA_HOME to a JDK in a world-readable location such as /usr/lib/jvm.",
    )
    distribution = fetch_once(node, settings, java, log)
    require_reachable(
        [(f"{node.title} distribution", distribution / "lib" / f"{node.name}-{node.version}.jar")],
        user,
        hint=f"Delete {distribution} so it is unpacked again with the archive's permissions.",
    )
    prepare_run_dir(settings, distribution)
    node.configure(settings, distribution, java)
    chown_tree(settings.run_dir, user)

    prefix = node.env_prefix
    env = java_env(node, java.path)
    env.update(
        {
            f"{prefix}_PATH_CONF": str(settings.config_dir),
            f"{prefix}_JAVA_OPTS": f"-Xms{settings.heap} -Xmx{settings.heap}",
            f"{prefix}_TMPDIR": str(settings.tmp_dir),
        }
    )
    log(
        f"starting {node.name} {node.version} on {LOOPBACK}:{settings.port} as {user.name} "
        f"(Java {java.major} from {java.path})…"
    )
    argv = [str(distribution / "bin" / node.name), "-d", "-p", str(settings.pidfile)]
    return Command(argv, cwd=settings.run_dir, env=env, user=user)


def _check(settings: JvmRunFiles) -> tuple[bool, str]:
    status = str(cluster_health(settings.health_url, timeout=5.0).get("status"))
    return status in HEALTHY_STATUSES, status


def _probe(settings: JvmRunFiles) -> tuple[bool, str]:
    # The node holds the request up to 1 s until the cluster is yellow: fewer polls.
    status = str(cluster_health(settings.health_url, wait_for_status="yellow", timeout=5.0).get("status"))
    return (True, status) if status in HEALTHY_STATUSES else (False, f"cluster status {status}")


def process(node: JvmNode, settings: JvmRunFiles) -> ManagedProcess:
    """A node as a managed process: `bin/<name> -d` daemonises it and writes
    the pidfile; healthy when the cluster is green or yellow."""
    return ManagedProcess(
        name=node.name,
        title=node.name,
        home=settings.home,
        run_dir=settings.run_dir,
        pidfile=settings.pidfile,
        lock_file=settings.lock_file,
        launch_log=settings.launcher_log,
        # The node log only exists once the JVM got far enough to configure
        # logging; before that everything went to the launcher output.
        server_log=settings.server_log,
        cmdline_marker=node.cmdline_marker,
        url=settings.url,
        check=functools.partial(_check, settings),
        prepare=functools.partial(_prepare, node, settings),
        preflight=functools.partial(_node_user, settings),
        probe=functools.partial(_probe, settings),
        ready_phrase="become healthy (green or yellow)",
        external_url=settings.external_url,
        external_kind="cluster",
        ports=((settings.port, "HTTP port"), (settings.transport_port, "transport port")),
        port_hint=(
            f"choose another port with {settings.PORT_VARIABLE} "
            f"(transport uses port+{settings.TRANSPORT_PORT_OFFSET}), "
            f"or set {settings.URL_VARIABLE} to use an already running cluster"
        ),
        daemonizes=True,
        pidfile_wait_s=node.pidfile_wait_s,
        launch_timeout_s=LAUNCH_TIMEOUT_SECONDS,
        stop_grace_s=STOP_GRACE_SECONDS,
    )
