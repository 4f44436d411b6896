"""Pure parts of local_services: no processes, no network."""

import io
import stat
import zipfile
from pathlib import Path

import pytest

from chunkrag_core.redaction import redact_url
from local_services.elasticsearch_node import ElasticsearchSettings, render_elasticsearch_yml
from local_services.java import missing_modules, parse_java_version, parse_release_file
from local_services.jvm_node import extract_zip_preserving_modes, split_credentials, zip_member_mode
from local_services.process import LocalServiceError, ServiceStatus
from local_services.redis_server import RedisSettings, encode_command, parse_redis_url, redis_server_args


def _zip_info(name: str, unix_mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = unix_mode << 16
    return info


# --- zip modes ---------------------------------------------------------------------


def test_zip_member_mode_keeps_executable_bit():
    assert zip_member_mode(_zip_info("elasticsearch-9.5.0/bin/elasticsearch", 0o100755)) == 0o755


def test_zip_member_mode_keeps_restrictive_config_mode():
    assert zip_member_mode(_zip_info("elasticsearch-9.5.0/config/jvm.options", 0o100660)) == 0o660


def test_zip_member_mode_drops_setuid():
    assert zip_member_mode(_zip_info("x/tool", 0o104755)) == 0o755


def test_zip_member_mode_defaults_when_archive_has_no_unix_mode():
    assert zip_member_mode(_zip_info("x/readme.txt", 0)) == 0o644
    assert zip_member_mode(_zip_info("x/dir/", 0)) == 0o755


def test_extract_restores_executable_bits(tmp_path: Path):
    archive_path = tmp_path / "dist.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr(_zip_info("dist/", 0o40755), b"")
        archive.writestr(_zip_info("dist/bin/run", 0o100755), b"#!/bin/sh\necho hi\n")
        archive.writestr(_zip_info("dist/README", 0o100644), b"hello\n")
    out = tmp_path / "out"
    out.mkdir()
    extract_zip_preserving_modes(archive_path, out)
    assert stat.S_IMODE((out / "dist/bin/run").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "dist/README").stat().st_mode) == 0o644
    assert (out / "dist/README").read_text() == "hello\n"


def test_extract_rejects_paths_escaping_the_destination(tmp_path: Path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(_zip_info("../evil", 0o100644), b"x")
    archive_path = tmp_path / "evil.zip"
    archive_path.write_bytes(buffer.getvalue())
    (tmp_path / "out").mkdir()
    with pytest.raises(LocalServiceError, match="outside the archive"):
        extract_zip_preserving_modes(archive_path, tmp_path / "out")


# --- java release file ---------------------------------------------------------------

TEMURIN_RELEASE = """IMPLEMENTOR="Eclipse Adoptium"
JAVA_RUNTIME_VERSION="25.0.3+9-LTS"
JAVA_VERSION="25.0.3"
MODULES="java.base java.instrument java.logging java.management java.naming java.xml \
jdk.attach jdk.incubator.vector jdk.management jdk.unsupported"
IMAGE_TYPE="JDK"
"""

JLINKED_RELEASE = """JAVA_VERSION="25.0.2"
MODULES="java.base java.instrument java.logging java.management java.naming java.xml \
jdk.attach jdk.management jdk.unsupported"
"""


def test_parse_release_file_reads_quoted_values():
    release = parse_release_file(TEMURIN_RELEASE)
    assert release["JAVA_VERSION"] == "25.0.3"
    assert release["IMPLEMENTOR"] == "Eclipse Adoptium"


def test_parse_java_version_variants():
    assert parse_java_version("25.0.3") == (25, 0, 3)
    assert parse_java_version("21") == (21,)
    assert parse_java_version("17.0.12") == (17, 0, 12)
    assert parse_java_version("1.8.0_292") == (8, 0, 292)
    assert parse_java_version("22-ea") == (22,)


def test_full_jdk_has_the_modules_elasticsearch_needs():
    assert missing_modules(parse_release_file(TEMURIN_RELEASE)) == []


def test_jlinked_runtime_without_vector_module_is_rejected():
    assert missing_modules(parse_release_file(JLINKED_RELEASE)) == ["jdk.incubator.vector"]


# --- configuration rendering ---------------------------------------------------------


def test_elasticsearch_yml_for_port_9201():
    settings = ElasticsearchSettings(home=Path("/srv/chunkrag"), port=9201, heap="512m")
    assert render_elasticsearch_yml(settings) == (
        "# Written by local_services; regenerated on every start.\n"
        "cluster.name: chunkrag-local\n"
        "node.name: chunkrag-local-1\n"
        "discovery.type: single-node\n"
        "network.host: 127.0.0.1\n"
        "http.port: 9201\n"
        "transport.port: 9301\n"
        'path.data: "/srv/chunkrag/run/elasticsearch-9201/data"\n'
        'path.logs: "/srv/chunkrag/run/elasticsearch-9201/logs"\n'
        "xpack.security.enabled: false\n"
        "cluster.routing.allocation.disk.threshold_enabled: false\n"
        "action.destructive_requires_name: false\n"
    )


def test_elasticsearch_yml_geoip_setting_only_when_module_present():
    settings = ElasticsearchSettings(home=Path("/srv/chunkrag"))
    assert "ingest.geoip.downloader.enabled: false\n" in render_elasticsearch_yml(settings, include_geoip_setting=True)
    assert "geoip" not in render_elasticsearch_yml(settings)


def test_settings_from_environment():
    env = {"CHUNKRAG_HOME": "/srv/x", "CHUNKRAG_ES_PORT": "9250", "CHUNKRAG_ES_HEAP": "2g"}
    settings = ElasticsearchSettings.from_environ(env)
    assert settings == ElasticsearchSettings(home=Path("/srv/x"), port=9250, heap="2g")
    assert settings.url == "http://127.0.0.1:9250"
    assert RedisSettings.from_environ({"CHUNKRAG_HOME": "/srv/x"}).url == "redis://127.0.0.1:6379/0"


def test_external_urls_win():
    env = {"CHUNKRAG_HOME": "/srv/x", "ES_URL": "https://u:p@es.example:9243", "REDIS_URL": "redis://r:6380/1"}
    assert ElasticsearchSettings.from_environ(env).url == "https://u:p@es.example:9243"
    assert RedisSettings.from_environ(env).url == "redis://r:6380/1"


def test_bad_port_and_heap_are_reported():
    with pytest.raises(LocalServiceError, match="CHUNKRAG_ES_PORT='92o0'"):
        ElasticsearchSettings.from_environ({"CHUNKRAG_ES_PORT": "92o0"})
    with pytest.raises(LocalServiceError, match="CHUNKRAG_ES_HEAP"):
        ElasticsearchSettings.from_environ({"CHUNKRAG_ES_HEAP": "lots"})


def test_redis_server_args():
    settings = RedisSettings(home=Path("/srv/chunkrag"), port=6380)
    assert redis_server_args(settings, Path("/usr/bin/redis-server")) == [
        "/usr/bin/redis-server",
        "--port", "6380",
        "--bind", "127.0.0.1",
        "--protected-mode", "yes",
        "--daemonize", "yes",
        "--pidfile", "/srv/chunkrag/run/redis-6380/redis.pid",
        "--dir", "/srv/chunkrag/run/redis-6380",
        "--logfile", "/srv/chunkrag/run/redis-6380/redis.log",
        "--save", "",
        "--appendonly", "no",
    ]  # fmt: skip


# --- URLs and protocol -----------------------------------------------------------------


def test_redact_url_hides_password_only():
    assert redact_url("https://elastic:s3cret@es.example:9243/") == "https://elastic:***@es.example:9243/"
    assert redact_url("http://127.0.0.1:9200") == "http://127.0.0.1:9200"


def test_split_credentials_builds_basic_auth_header():
    url, headers = split_credentials("https://elastic:changeme@es.example:9243")
    assert url == "https://es.example:9243"
    assert headers == {"Authorization": "Basic ZWxhc3RpYzpjaGFuZ2VtZQ=="}
    assert split_credentials("http://127.0.0.1:9200") == ("http://127.0.0.1:9200", {})


def test_parse_redis_url():
    endpoint = parse_redis_url("rediss://default:p%40ss@cache.example:6390/2")
    assert (endpoint.host, endpoint.port, endpoint.username, endpoint.password, endpoint.tls) == (
        "cache.example",
        6390,
        "default",
        "p@ss",
        True,
    )
    assert parse_redis_url("redis://127.0.0.1:6379/0").password is None


def test_encode_command_is_resp_array():
    assert encode_command("PING") == b"*1\r\n$4\r\nPING\r\n"
    assert encode_command("AUTH", "pw") == b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"


def test_status_line():
    status = ServiceStatus("redis", "running", "redis://127.0.0.1:6379/0", True, "PONG", 4242)
    assert status.line() == "redis         running   pid 4242    redis://127.0.0.1:6379/0    healthy (PONG)"


def test_app_environ_points_the_app_at_the_local_services_on_their_ports():
    from local_services.cli import app_environ

    env = {
        "CHUNKRAG_HOME": "/srv/x",
        "CHUNKRAG_ES_PORT": "9210",
        "CHUNKRAG_REDIS_PORT": "6390",
        "CHUNKRAG_LLM_PORT": "18088",
    }
    assert app_environ(env) == {
        "ES_URL": "http://127.0.0.1:9210",
        "OPENSEARCH_URL": "http://127.0.0.1:9201",
        "REDIS_URL": "redis://127.0.0.1:6390/0",
        "CHUNKRAG_CHAT_BASE_URL": "http://127.0.0.1:18088/v1",
    }
    # What the environment names stays; OPENSEARCH_URL alone keeps choosing OpenSearch.
    chosen = {
        "CHUNKRAG_HOME": "/srv/x",
        "OPENSEARCH_URL": "https://os.example",
        "CHUNKRAG_CHAT_BASE_URL": "https://x/v1",
    }
    assert app_environ(chosen) == {"REDIS_URL": "redis://127.0.0.1:6379/0"}
