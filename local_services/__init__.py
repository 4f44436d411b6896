"""Local single-node Elasticsearch and Redis on loopback for development, tests and CI.

Command line: `python -m local_services up|down|status|wait [--only NAME]`.
From Python (e.g. pytest fixtures): `ensure_services_up()`, then connect to
`elasticsearch_url()` and `redis_url()`.
"""

from local_services.cli import (
    services_down,
    services_status,
    services_up,
    services_wait,
)
from local_services.elasticsearch_node import ElasticsearchSettings, elasticsearch_url
from local_services.process import LocalServiceError, ServiceStatus
from local_services.redis_server import RedisSettings, redis_url

ensure_services_up = services_up

__all__ = [
    "ElasticsearchSettings",
    "LocalServiceError",
    "RedisSettings",
    "ServiceStatus",
    "elasticsearch_url",
    "ensure_services_up",
    "redis_url",
    "services_down",
    "services_status",
    "services_up",
    "services_wait",
]
