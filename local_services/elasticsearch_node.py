"""A local single-node Elasticsearch on loopback, for development, tests and CI.

Uses Elastic's server-only "integ-test" distribution from Maven Central: it
has no bundled JDK, no `GET /` root endpoint, no language analyzers and no
painless, so health is probed with `GET /_cluster/health`. Fetching,
starting, health and stopping are the shared JVM node's (jvm_node.py); the
configuration and the optional x-pack security with file-realm users are
Elasticsearch's own, here.
"""

from __future__ import annotations

import subprocess
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from local_services import jvm_node
from local_services.java import JavaHome
from local_services.jvm_node import DEFAULT_HEAP, ClusterMember, JvmNode, JvmRunFiles
from local_services.managed import ManagedProcess
from local_services.maven import fetch_pinned
from local_services.process import (
    LOOPBACK,
    LocalServiceError,
    Log,
    PortRunFiles,
    ensure_state_home,
    make_public_dir,
    print_line,
)

ES_VERSION = "9.5.0"
ES_ZIP_SHA256 = "db0e275fd790f723eca7bcde96069fd6fed304ad23afdb70c8c09553dd9e8b1b"
MAVEN_ARTIFACT = f"org.elasticsearch.distribution.integ-test-zip:elasticsearch:{ES_VERSION}:zip"

CLUSTER_NAME = "chunkrag-local"
NODE_NAME = "chunkrag-local-1"
DEFAULT_PORT = 9200


@dataclass(frozen=True)
class FileUser:
    name: str
    password: str = field(repr=False)
    roles: tuple[str, ...]


@dataclass(frozen=True)
class ElasticsearchSettings(PortRunFiles, JvmRunFiles):
    """Where the node lives and how it is reached.

    `external_url` (from ES_URL) means the user runs their own cluster: it is
    probed but never started or stopped.
    """

    RUN_NAME = "elasticsearch"
    CLUSTER_NAME = CLUSTER_NAME
    DEFAULT_PORT = DEFAULT_PORT
    PORT_VARIABLE = "CHUNKRAG_ES_PORT"
    HEAP_VARIABLE = "CHUNKRAG_ES_HEAP"
    URL_VARIABLE = "ES_URL"
    CLUSTER_FIRST_PORT = 9250
    CLUSTER_PORT_VARIABLE = "CHUNKRAG_ES_CLUSTER_PORT"
    TRANSPORT_PORT_OFFSET = 100

    home: Path
    port: int = DEFAULT_PORT
    heap: str = DEFAULT_HEAP
    external_url: str | None = None
    # Set: one member of a multi-node cluster on loopback (cluster.py).
    cluster: ClusterMember | None = None
    # A node with x-pack security on (HTTP without TLS, loopback only):
    # file-realm users made with bin/elasticsearch-users, roles from roles_yml.
    # The default node stays open; a secured one is for security tests.
    security: bool = False
    users: tuple[FileUser, ...] = ()
    roles_yml: str = ""
    # The self-generated licence of a secured node ("" leaves the default,
    # basic); "trial" gives document- and field-level security, which the
    # post-search security tests need.
    license: str = ""
    # "user:password" for the health probes of a secured node.
    probe_credentials: str | None = field(default=None, repr=False)

    @property
    def health_url(self) -> str:
        """The URL health probes use: with the probe user on a secured node."""
        if self.external_url or not self.probe_credentials:
            return self.url
        user, _, password = self.probe_credentials.partition(":")
        return f"http://{urllib.parse.quote(user)}:{urllib.parse.quote(password)}@{LOOPBACK}:{self.port}"

    @property
    def cluster_name(self) -> str:
        if self.cluster is not None:
            return self.cluster.cluster_name
        return f"{CLUSTER_NAME}-secured" if self.security else CLUSTER_NAME

    @property
    def zip_path(self) -> Path:
        return self.cache_dir / f"elasticsearch-{ES_VERSION}.zip"

    @property
    def distribution_dir(self) -> Path:
        return self.cache_dir / f"elasticsearch-{ES_VERSION}"


def elasticsearch_url(environ: Mapping[str, str] | None = None) -> str:
    """URL clients should use: ES_URL (with its credentials) or the local node."""
    return ElasticsearchSettings.from_environ(environ).url


# --- fetching and unpacking ----------------------------------------------------


def fetch_distribution(settings: ElasticsearchSettings, java: JavaHome | None = None, log: Log = print_line) -> Path:
    """Make sure the pinned distribution is unpacked in the cache; return its path."""
    if (settings.distribution_dir / "bin" / "elasticsearch").is_file():
        return settings.distribution_dir
    ensure_state_home(settings.home)
    make_public_dir(settings.cache_dir)
    fetch_pinned(
        MAVEN_ARTIFACT,
        ES_ZIP_SHA256,
        settings.zip_path,
        log,
        cleanup_hint="Delete ~/.m2/repository/org/elasticsearch/distribution and retry.",
    )
    return jvm_node.unpack(NODE, settings.zip_path, settings.distribution_dir, log)


# --- configuration ---------------------------------------------------------------


def render_elasticsearch_yml(settings: ElasticsearchSettings, include_geoip_setting: bool = False) -> str:
    """elasticsearch.yml for a loopback-only development node, security off
    unless the settings ask for it.

    `include_geoip_setting` only when the ingest-geoip module is present:
    Elasticsearch refuses to start on settings no module declares.
    """
    geoip = ["ingest.geoip.downloader.enabled: false"] if include_geoip_setting else []
    return jvm_node.render_node_yml(settings, NODE_NAME, _security_lines(settings.security, settings.license), geoip)


def _security_lines(enabled: bool, license: str = "") -> list[str]:
    if not enabled:
        return ["xpack.security.enabled: false"]
    licensed = [f"xpack.license.self_generated.type: {license}"] if license else []
    # Security without TLS: loopback only, so the bootstrap checks that
    # demand transport TLS do not apply to a single node; callers reach it
    # over plain HTTP with Basic credentials of the file realm.
    return [
        "xpack.security.enabled: true",
        "xpack.security.http.ssl.enabled: false",
        "xpack.security.transport.ssl.enabled: false",
        "xpack.security.enrollment.enabled: false",
        *licensed,
    ]


def _add_file_realm_users(settings: ElasticsearchSettings, distribution: Path, java: JavaHome) -> None:
    """roles.yml, then each user with bin/elasticsearch-users (which hashes
    the password the way the file realm expects)."""
    (settings.config_dir / "roles.yml").write_text(settings.roles_yml)
    env = jvm_node.java_env(NODE, java.path)
    env["ES_PATH_CONF"] = str(settings.config_dir)
    for user in settings.users:
        command = [
            str(distribution / "bin" / "elasticsearch-users"),
            "useradd",
            user.name,
            "-p",
            user.password,
            "-r",
            ",".join(user.roles),
        ]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise LocalServiceError(
                f"bin/elasticsearch-users useradd {user.name} failed (exit {result.returncode}): "
                f"{(result.stdout + result.stderr).strip()[-500:]}"
            )


def _configure(settings: ElasticsearchSettings, distribution: Path, java: JavaHome) -> None:
    geoip = (distribution / "modules" / "ingest-geoip").is_dir()
    (settings.config_dir / "elasticsearch.yml").write_text(render_elasticsearch_yml(settings, geoip))
    if settings.security:
        _add_file_realm_users(settings, distribution, java)


# --- lifecycle -------------------------------------------------------------------

NODE = JvmNode(
    name="elasticsearch",
    title="Elasticsearch",
    version=ES_VERSION,
    env_prefix="ES",
    cmdline_marker="org.elasticsearch.bootstrap.Elasticsearch",
    fetch=fetch_distribution,
    configure=_configure,
    # `bin/elasticsearch -d` returns once the node is up, its pidfile written.
    pidfile_wait_s=0.0,
)


def process(settings: ElasticsearchSettings) -> ManagedProcess:
    """The node as a managed process: `process(settings).up()`, `.down()`, `.status()`, `.logs()`."""
    return jvm_node.process(NODE, settings)
