"""Real services, no mocks.

Assumes the test command started them first, e.g.
`CHUNKRAG_HOME=<repo>/.chunkrag python -m local_services up`.
"""

import json
import urllib.request

import pytest

from local_services import services_status
from local_services.elasticsearch_node import ElasticsearchSettings, elasticsearch_url
from local_services.jvm_node import cluster_health
from local_services.opensearch_node import OpenSearchSettings, opensearch_url
from local_services.redis_server import RedisSettings, parse_redis_url, ping, redis_url

pytestmark = pytest.mark.integration

HINT = "start them first: CHUNKRAG_HOME=<repo>/.chunkrag python -m local_services up"


def test_status_reports_every_default_service_healthy_and_the_model_server():
    statuses = {status.name: status for status in services_status()}
    assert set(statuses) == {"elasticsearch", "opensearch", "redis", "llm"}
    for name in ("elasticsearch", "opensearch", "redis"):
        assert statuses[name].healthy, f"{statuses[name].line()} -- {HINT}"
    assert statuses["elasticsearch"].health in ("green", "yellow")
    assert statuses["opensearch"].health in ("green", "yellow")
    assert statuses["redis"].health == "PONG"


def test_elasticsearch_is_the_pinned_single_node_cluster():
    settings = ElasticsearchSettings.from_environ()
    health = cluster_health(elasticsearch_url(), timeout=10.0)
    assert health["number_of_nodes"] == 1
    if settings.external_url is None:
        assert health["cluster_name"] == "chunkrag-local"
        with urllib.request.urlopen(f"{settings.url}/_nodes/_local/settings", timeout=10) as response:
            node = next(iter(json.load(response)["nodes"].values()))
        assert node["version"] == "9.5.0"
        assert node["settings"]["action"]["destructive_requires_name"] == "false"


def test_opensearch_is_the_pinned_single_node_cluster_with_knn():
    settings = OpenSearchSettings.from_environ()
    health = cluster_health(opensearch_url(), timeout=10.0)
    assert health["number_of_nodes"] == 1
    if settings.external_url is None:
        assert health["cluster_name"] == "chunkrag-local-opensearch"
        with urllib.request.urlopen(f"{settings.url}/_nodes/_local/plugins", timeout=10) as response:
            node = next(iter(json.load(response)["nodes"].values()))
        assert node["version"] == "3.5.0"
        assert "opensearch-knn" in {plugin["name"] for plugin in node["plugins"]}
        # No security plugin: the node is plain HTTP on loopback, like the local Elasticsearch.
        assert not any("security" in plugin["name"] for plugin in node["plugins"])


def test_redis_answers_ping():
    assert ping(parse_redis_url(redis_url()), timeout=5.0) == "+PONG"
    assert RedisSettings.from_environ().url == redis_url()
