"""A second Elasticsearch node with x-pack security on, for the gateway's
security tests: the same 9.5.0 install the main node uses, on ports of its
own (HTTP 9250, transport 9350), its own data and config, run as the same
unprivileged user. File-realm users made with bin/elasticsearch-users, roles
in roles.yml. The default node on 9200 stays open and untouched.

The passwords are fixed test values: the node listens on loopback only and
holds nothing but test indices."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from local_services.elasticsearch_node import ElasticsearchSettings, FileUser, down, running_pid, up
from chunkrag_core.settings import state_home

PORT = int(os.environ.get("CHUNKRAG_SECURED_ES_PORT") or 9250)  # transport: port + 100
HEAP = "512m"
# Indices the tests make; the reader role sees only the first pattern.
ALLOWED_PREFIX = "sec-docs-"
OTHER_PREFIX = "sec-other-"

ADMIN = FileUser("chunkrag-admin", "admin-pw-9f2c", ("superuser",))
# May read sec-docs-* only: searches elsewhere are the cluster's 403.
READER = FileUser("alice", "alice-pw-51be", ("docs_reader",))
# What a gateway in service mode runs as: reads every test index.
SERVICE = FileUser("gateway-service", "service-pw-7d03", ("gateway_reader",))

ROLES_YML = f"""\
docs_reader:
  indices:
    - names: ["{ALLOWED_PREFIX}*"]
      privileges: ["read", "view_index_metadata"]
gateway_reader:
  cluster: ["monitor"]
  indices:
    - names: ["sec-*"]
      privileges: ["read", "view_index_metadata"]
"""


def node_settings(home: Path | None = None) -> ElasticsearchSettings:
    return ElasticsearchSettings(
        home=home or state_home(os.environ),
        port=PORT,
        heap=HEAP,
        security=True,
        users=(ADMIN, READER, SERVICE),
        roles_yml=ROLES_YML,
        probe_credentials=f"{ADMIN.name}:{ADMIN.password}",
    )


def url_for(user: FileUser | None = None) -> str:
    if user is None:
        return f"http://127.0.0.1:{PORT}"
    return f"http://{user.name}:{user.password}@127.0.0.1:{PORT}"


@contextmanager
def secured_node(log=print) -> Iterator[ElasticsearchSettings]:
    """Start the node (or reuse one this state directory already runs) and
    stop it afterwards if it was started here."""
    settings = node_settings()
    was_running = running_pid(settings, log) is not None
    up(settings, log=log)
    try:
        yield settings
    finally:
        if not was_running:
            down(settings, log=log)
