"""Pure parts of the local OpenSearch node: no processes, no network."""

from pathlib import Path

import pytest

from local_services.maven import maven_file_name
from local_services.opensearch_node import (
    KNN_ARTIFACT,
    OPENSEARCH_ARTIFACT,
    OpenSearchSettings,
    plugin_install_command,
    rebase_jvm_options,
    render_opensearch_yml,
)
from local_services.process import LocalServiceError


def test_settings_default_to_their_own_ports_beside_elasticsearch():
    settings = OpenSearchSettings.from_environ({"CHUNKRAG_HOME": "/srv/state"})
    assert settings.port == 9201 and settings.transport_port == 9401
    assert settings.url == "http://127.0.0.1:9201"
    assert settings.run_dir == Path("/srv/state/run/opensearch-9201")
    assert settings.distribution_dir == Path("/srv/state/cache/opensearch-3.5.0-knn-3.5.0.0")
    # Elasticsearch's transport port is its HTTP port + 100: never ours.
    assert settings.transport_port not in (9200, 9300)


def test_environment_overrides_and_external_cluster():
    settings = OpenSearchSettings.from_environ(
        {
            "CHUNKRAG_HOME": "/s",
            "CHUNKRAG_OPENSEARCH_PORT": "9555",
            "CHUNKRAG_OPENSEARCH_HEAP": "512m",
            "OPENSEARCH_URL": "https://u:p@os.example:443",
        }
    )
    assert (settings.port, settings.heap, settings.transport_port) == (9555, "512m", 9755)
    assert settings.url == "https://u:p@os.example:443"


def test_bad_heap_and_port_are_reported():
    with pytest.raises(LocalServiceError, match="CHUNKRAG_OPENSEARCH_HEAP"):
        OpenSearchSettings.from_environ({"CHUNKRAG_HOME": "/s", "CHUNKRAG_OPENSEARCH_HEAP": "lots"})
    with pytest.raises(LocalServiceError, match="CHUNKRAG_OPENSEARCH_PORT"):
        OpenSearchSettings.from_environ({"CHUNKRAG_HOME": "/s", "CHUNKRAG_OPENSEARCH_PORT": "99999"})


def test_opensearch_yml_is_loopback_single_node_without_security_settings():
    settings = OpenSearchSettings(home=Path("/h"), port=9201)
    yml = render_opensearch_yml(settings)
    assert "discovery.type: single-node\n" in yml
    assert "network.host: 127.0.0.1\n" in yml
    assert "http.port: 9201\n" in yml and "transport.port: 9401\n" in yml
    assert 'path.data: "/h/run/opensearch-9201/data"' in yml
    # No security plugin is installed: naming one of its settings would stop the node.
    assert "plugins.security" not in yml and "xpack" not in yml


def test_jvm_options_write_logs_into_the_run_dir():
    settings = OpenSearchSettings(home=Path("/h"), port=9201)
    shipped = (
        "-XX:HeapDumpPath=data\n"
        "-XX:ErrorFile=logs/hs_err_pid%p.log\n"
        "8:-Xloggc:logs/gc.log\n"
        "9-:-Xlog:gc*:file=logs/gc.log:utctime\n"
    )
    assert rebase_jvm_options(shipped, settings) == (
        "-XX:HeapDumpPath=/h/run/opensearch-9201/data\n"
        "-XX:ErrorFile=/h/run/opensearch-9201/logs/hs_err_pid%p.log\n"
        "8:-Xloggc:/h/run/opensearch-9201/logs/gc.log\n"
        "9-:-Xlog:gc*:file=/h/run/opensearch-9201/logs/gc.log:utctime\n"
    )


def test_plugin_is_installed_from_the_checked_file_in_batch_mode():
    command = plugin_install_command(Path("/c/os"), Path("/c/opensearch-knn-3.5.0.0.zip"))
    assert command == ["/c/os/bin/opensearch-plugin", "install", "--batch", "file:///c/opensearch-knn-3.5.0.0.zip"]


def test_maven_file_names_of_the_pinned_artifacts():
    assert maven_file_name(OPENSEARCH_ARTIFACT) == "opensearch-3.5.0.zip"
    assert maven_file_name(KNN_ARTIFACT) == "opensearch-knn-3.5.0.0.zip"
    with pytest.raises(ValueError):
        maven_file_name("org.example:thing")
