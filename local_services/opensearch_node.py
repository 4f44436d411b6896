"""A local single-node OpenSearch on loopback, for development, tests and CI.

OpenSearch's "integ-test" distribution from Maven Central (from 3.5.0 it has
the usual modules: analysis-common with `english`, search-pipeline-common, …)
plus the k-NN plugin, also from Maven Central. That plugin zip carries no
native libraries, so only `"engine": "lucene"` vector fields work on this node:
the project never creates a faiss or nmslib one (indexing into one crashes a
node without the libraries). No security plugin is installed, so the node
speaks plain HTTP without authentication, like the local Elasticsearch.

The node runs as the same unprivileged user as Elasticsearch (OpenSearch also
refuses root), on its own HTTP and transport ports. Fetching, starting,
health and stopping are the shared JVM node's (jvm_node.py); the k-NN plugin
and the configuration are OpenSearch's own, here.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from local_services import jvm_node
from local_services.java import JavaHome
from local_services.jvm_node import DEFAULT_HEAP, ClusterMember, JvmNode, JvmRunFiles
from local_services.managed import ManagedProcess
from local_services.maven import fetch_pinned
from local_services.process import LocalServiceError, Log, PortRunFiles, ensure_state_home, make_public_dir, print_line

OPENSEARCH_VERSION = "3.5.0"
OPENSEARCH_ARTIFACT = f"org.opensearch.distribution.integ-test-zip:opensearch:{OPENSEARCH_VERSION}:zip"
OPENSEARCH_ZIP_SHA256 = "b676ad392c95a94d8d2bd8785b8b922c7811536daf6a9ec0c7277a34bd8a17a9"
KNN_VERSION = "3.5.0.0"
KNN_ARTIFACT = f"org.opensearch.plugin:opensearch-knn:{KNN_VERSION}:zip"
KNN_ZIP_SHA256 = "99fdf3ac9ef95974e276298b83a58532bf21ba13bd5fd96a4b59465b7e613309"
KNN_PLUGIN_DIR = "opensearch-knn"

CLUSTER_NAME = "chunkrag-local-opensearch"
INITIAL_MASTERS_SETTING = "cluster.initial_cluster_manager_nodes"
NODE_NAME = "chunkrag-opensearch-1"
# 9200 is Elasticsearch's; the two nodes run side by side.
DEFAULT_PORT = 9201
# Elasticsearch's transport is its HTTP port + 100 (9300); +200 keeps ours
# clear of it for any pair of adjacent HTTP ports.
TRANSPORT_PORT_OFFSET = 200
PLUGIN_INSTALL_TIMEOUT_SECONDS = 300.0
# The node writes its pidfile some seconds after the launcher returns (more on a busy machine).
PIDFILE_WAIT_SECONDS = 120.0


@dataclass(frozen=True)
class OpenSearchSettings(PortRunFiles, JvmRunFiles):
    """Where the node lives and how it is reached.

    `external_url` (from OPENSEARCH_URL) means the user runs their own
    cluster: it is probed but never started or stopped.
    """

    RUN_NAME = "opensearch"
    CLUSTER_NAME = CLUSTER_NAME
    DEFAULT_PORT = DEFAULT_PORT
    PORT_VARIABLE = "CHUNKRAG_OPENSEARCH_PORT"
    HEAP_VARIABLE = "CHUNKRAG_OPENSEARCH_HEAP"
    URL_VARIABLE = "OPENSEARCH_URL"
    CLUSTER_FIRST_PORT = 9270
    CLUSTER_PORT_VARIABLE = "CHUNKRAG_OPENSEARCH_CLUSTER_PORT"
    TRANSPORT_PORT_OFFSET = TRANSPORT_PORT_OFFSET

    home: Path
    port: int = DEFAULT_PORT
    heap: str = DEFAULT_HEAP
    external_url: str | None = None
    # Set: one member of a multi-node cluster on loopback (cluster.py).
    cluster: ClusterMember | None = None

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


def opensearch_url(environ: Mapping[str, str] | None = None) -> str:
    """URL clients should use: OPENSEARCH_URL (with its credentials) or the local node."""
    return OpenSearchSettings.from_environ(environ).url


# --- fetching, unpacking, the k-NN plugin -------------------------------------------


def plugin_install_command(distribution: Path, plugin_zip: Path) -> list[str]:
    # --batch answers yes to the plugin's extra permissions (k-NN asks for some).
    return [str(distribution / "bin" / "opensearch-plugin"), "install", "--batch", plugin_zip.resolve().as_uri()]


def _install_knn(distribution: Path, plugin_zip: Path, java: JavaHome, log: Log) -> None:
    log(f"installing the k-NN plugin {KNN_VERSION} into {distribution.name}…")
    env = jvm_node.java_env(NODE, java.path)
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
        raise LocalServiceError(
            f"opensearch-plugin install did not finish within {PLUGIN_INSTALL_TIMEOUT_SECONDS:.0f} s"
        ) from None
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
    # The plugin goes in before the tree gets its final name.
    return jvm_node.unpack(
        NODE,
        settings.zip_path,
        settings.distribution_dir,
        log,
        finish=lambda tree: _install_knn(tree, settings.knn_zip_path, java, log),
    )


# --- configuration ---------------------------------------------------------------


def render_opensearch_yml(settings: OpenSearchSettings) -> str:
    """opensearch.yml for a loopback-only development node (no security plugin is installed)."""
    return jvm_node.render_node_yml(settings, NODE_NAME, initial_masters_setting=INITIAL_MASTERS_SETTING)


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


def _configure(settings: OpenSearchSettings, distribution: Path, java: JavaHome) -> None:
    (settings.config_dir / "opensearch.yml").write_text(render_opensearch_yml(settings))
    jvm_options = settings.config_dir / "jvm.options"
    jvm_options.write_text(rebase_jvm_options(jvm_options.read_text(), settings))


# --- lifecycle -------------------------------------------------------------------

NODE = JvmNode(
    name="opensearch",
    title="OpenSearch",
    version=OPENSEARCH_VERSION,
    env_prefix="OPENSEARCH",
    cmdline_marker="org.opensearch.bootstrap.OpenSearch",
    fetch=fetch_distribution,
    configure=_configure,
    # Unlike Elasticsearch, `bin/opensearch -d` returns before the node has
    # written its pidfile (that comes once the node has bootstrapped).
    pidfile_wait_s=PIDFILE_WAIT_SECONDS,
    initial_masters_setting=INITIAL_MASTERS_SETTING,
)


def process(settings: OpenSearchSettings) -> ManagedProcess:
    """The node as a managed process: `process(settings).up()`, `.down()`, `.status()`, `.logs()`."""
    return jvm_node.process(NODE, settings)
