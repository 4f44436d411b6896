"""A second Elasticsearch node with x-pack security on, for the gateway's
security tests: the same 9.5.0 install the main node uses, on ports of its
own (HTTP 9250, transport 9350), its own data and config, run as the same
unprivileged user. File-realm users made with bin/elasticsearch-users, roles
in roles.yml. The default node on 9200 stays open and untouched.

The integ-test distribution leaves out the analysis-common module, whose
filters the .security index's mapping names, so as it comes it cannot make
API keys (the gateway's derived keys need them). The secured node runs from
a copy of the distribution with a small test plugin that supplies those
filters (``security_analysis/``, compiled here with the JDK the node runs
on); the main node's install is not changed.

The passwords are fixed test values: the node listens on loopback only and
holds nothing but test indices."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from chunkrag_core.settings import state_home
from local_services.elasticsearch_node import (
    ES_VERSION,
    ElasticsearchSettings,
    FileUser,
    fetch_distribution,
    process,
)
from local_services.java import find_java_home

PORT = int(os.environ.get("CHUNKRAG_SECURED_ES_PORT") or 9250)
# A node on a port range of its own may need its transport port there too.
TRANSPORT_PORT = int(os.environ.get("CHUNKRAG_SECURED_ES_TRANSPORT_PORT") or PORT + 100)
HEAP = "512m"
# Indices the tests make; the reader role sees only the first pattern, the
# service account both: the second is the "secret" one gateway keys must not reach.
ALLOWED_PREFIX = "sec-docs-"
OTHER_PREFIX = "sec-other-"

ADMIN = FileUser("chunkrag-admin", "admin-pw-9f2c", ("superuser",))
# May read sec-docs-* only: searches elsewhere are the cluster's 403.
READER = FileUser("alice", "alice-pw-51be", ("docs_reader",))
# What a gateway in service mode runs as: reads every test index and may
# make (and invalidate) API keys of its own, the gateway's derived keys.
SERVICE = FileUser("gateway-service", "service-pw-7d03", ("gateway_reader",))
# A service account without manage_own_api_key: service mode answers 503.
NO_KEYS_SERVICE = FileUser("gateway-nokeys", "nokeys-pw-21aa", ("gateway_reader_without_keys",))

ROLES_YML = f"""\
docs_reader:
  indices:
    - names: ["{ALLOWED_PREFIX}*"]
      privileges: ["read", "view_index_metadata"]
gateway_reader:
  cluster: ["monitor", "manage_own_api_key"]
  indices:
    - names: ["sec-*"]
      privileges: ["read", "view_index_metadata"]
gateway_reader_without_keys:
  cluster: ["monitor"]
  indices:
    - names: ["sec-*"]
      privileges: ["read", "view_index_metadata"]
"""

PLUGIN_NAME = "chunkrag-security-index-analysis"
PLUGIN_SOURCE = Path(__file__).parent / "security_analysis"
PLUGIN_CLASS = "org.chunkrag.testsupport.SecurityIndexAnalysisPlugin"


@dataclass(frozen=True)
class SecuredElasticsearchSettings(ElasticsearchSettings):
    @property
    def distribution_dir(self) -> Path:
        return self.cache_dir / f"elasticsearch-{ES_VERSION}-secured"

    @property
    def transport_port(self) -> int:
        return TRANSPORT_PORT


def node_settings(home: Path | None = None) -> SecuredElasticsearchSettings:
    return SecuredElasticsearchSettings(
        home=home or state_home(os.environ),
        port=PORT,
        heap=HEAP,
        security=True,
        users=(ADMIN, READER, SERVICE, NO_KEYS_SERVICE),
        roles_yml=ROLES_YML,
        # Document- and field-level security (the post-search tests) need it.
        license="trial",
        probe_credentials=f"{ADMIN.name}:{ADMIN.password}",
    )


def url_for(user: FileUser | None = None) -> str:
    if user is None:
        return f"http://127.0.0.1:{PORT}"
    return f"http://{user.name}:{user.password}@127.0.0.1:{PORT}"


def prepare_distribution(settings: SecuredElasticsearchSettings, log=print) -> Path:
    """The secured node's install: a copy of the pinned distribution with
    the analysis plugin the security index needs."""
    target = settings.distribution_dir
    if (target / "plugins" / PLUGIN_NAME / "plugin-descriptor.properties").is_file():
        return target
    base = fetch_distribution(ElasticsearchSettings(home=settings.home), log=log)
    java = find_java_home()
    with tempfile.TemporaryDirectory(dir=settings.cache_dir, prefix=".secured-") as staging:
        copy = Path(staging) / "elasticsearch"
        shutil.copytree(base, copy, symlinks=True)
        classes = Path(staging) / "classes"
        sources = [str(path) for path in PLUGIN_SOURCE.rglob("*.java")]
        subprocess.run(
            [
                str(java.path / "bin" / "javac"),
                "--release",
                "21",
                "-d",
                str(classes),
                "-cp",
                str(base / "lib" / "*"),
                *sources,
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        plugin = copy / "plugins" / PLUGIN_NAME
        plugin.mkdir(parents=True)
        with zipfile.ZipFile(plugin / f"{PLUGIN_NAME}.jar", "w") as jar:
            for path in classes.rglob("*.class"):
                jar.write(path, path.relative_to(classes).as_posix())
        (plugin / "plugin-descriptor.properties").write_text(
            "description=analysis filters for the security index (tests only)\n"
            f"version={ES_VERSION}\nname={PLUGIN_NAME}\n"
            f"classname={PLUGIN_CLASS}\njava.version=21\nelasticsearch.version={ES_VERSION}\n"
        )
        for path in [copy, *copy.rglob("*")]:  # the node runs as another user
            path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        os.replace(copy, target)
    return target


def _has_plugin(settings: SecuredElasticsearchSettings) -> bool:
    """Whether the node that answers runs with the analysis plugin."""
    request = urllib.request.Request(f"{url_for()}/_nodes/_local/plugins")
    request.add_header("authorization", "Basic " + base64.b64encode(f"{ADMIN.name}:{ADMIN.password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            nodes = json.load(response)["nodes"].values()
    except OSError:
        return False
    return any(plugin["name"] == PLUGIN_NAME for node in nodes for plugin in node.get("plugins", []))


@contextmanager
def secured_node(log=print) -> Iterator[ElasticsearchSettings]:
    """Start the node (or reuse one this state directory already runs) and
    stop it afterwards if it was started here. A node left running from an
    install without the plugin is started again from the one with it."""
    settings = node_settings()
    prepare_distribution(settings, log)
    node = process(settings)
    was_running = node.running_pid(log) is not None
    if was_running and not _has_plugin(settings):
        node.down(log=log)
        was_running = False
    node.up(log=log)
    try:
        yield settings
    finally:
        if not was_running:
            node.down(log=log)
