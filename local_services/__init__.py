"""Local single-node Elasticsearch, OpenSearch, Redis and the model server on
loopback for development, tests and CI, each a ManagedProcess (managed.py).

Command line: `python -m local_services up|down|status|wait|logs [--only NAME]`.
From Python (e.g. pytest fixtures): `ensure_services_up()`, then connect to
`elasticsearch_url()` and `redis_url()`; `app_environ()` gives the URL
variables that point the app at the services started.
"""

from local_services.cli import (
    app_environ,
    services_down,
    services_logs,
    services_status,
    services_up,
    services_wait,
)
from local_services.elasticsearch_node import ElasticsearchSettings, elasticsearch_url
from local_services.managed import ManagedProcess
from local_services.process import LocalServiceError, ServiceStatus
from local_services.redis_server import RedisSettings, redis_url

ensure_services_up = services_up

__all__ = [
    "ElasticsearchSettings",
    "LocalServiceError",
    "ManagedProcess",
    "RedisSettings",
    "ServiceStatus",
    "app_environ",
    "elasticsearch_url",
    "ensure_services_up",
    "redis_url",
    "services_down",
    "services_logs",
    "services_status",
    "services_up",
    "services_wait",
]
