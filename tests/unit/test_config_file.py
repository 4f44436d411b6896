"""The configuration file: TOML keys mapped onto the environment's names,
the environment over the file, provenance, masking, unknown keys and bad
values, and `chunkrag config show|check`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chunkrag_cli import config_command
from chunkrag_cli.main import main
from chunkrag_core import config_file, config_names
from chunkrag_core.config_file import ConfigFileError, parse_config
from chunkrag_core.settings import Settings, SettingsError

EXAMPLE = """
scales = [128, 512, 2000]

[gateway]
max_candidates = 30
access_log = true
passthrough = ["read", "write"]

[es.cluster]
port = 9350

[worker]
retry_backoff_s = 1.5

[env]
ES_URL = "http://elastic:secret@10.0.0.1:9200,http://10.0.0.2:9200"
OPENAI_API_KEY = "sk-not-shown"
"""


def test_sections_top_level_keys_and_the_env_table_map_onto_variable_names():
    config = parse_config(EXAMPLE)
    assert not config.problems
    assert config.values == {
        "CHUNKRAG_SCALES": "128,512,2000",
        "CHUNKRAG_GATEWAY_MAX_CANDIDATES": "30",
        "CHUNKRAG_GATEWAY_ACCESS_LOG": "true",
        "CHUNKRAG_GATEWAY_PASSTHROUGH": "read,write",
        "CHUNKRAG_ES_CLUSTER_PORT": "9350",
        "CHUNKRAG_WORKER_RETRY_BACKOFF_S": "1.5",
        "ES_URL": "http://elastic:secret@10.0.0.1:9200,http://10.0.0.2:9200",
        "OPENAI_API_KEY": "sk-not-shown",
    }
    assert config.entries["CHUNKRAG_ES_CLUSTER_PORT"].key == "es.cluster.port"
    assert config.entries["ES_URL"].key == "env.ES_URL"


def test_the_settings_parse_the_file_values_as_they_parse_the_environment():
    settings = Settings.from_env(config_file.layered({}, parse_config(EXAMPLE)))
    assert settings.gateway.max_candidates == 30
    assert settings.gateway.access_log is True
    assert settings.gateway.passthrough == "read,write"
    assert settings.workers.retry_backoff_s == 1.5
    assert settings.chunking.scales == (128, 512, 2000)
    assert settings.es_nodes == ("http://elastic:secret@10.0.0.1:9200", "http://elastic:secret@10.0.0.2:9200")
    assert settings.chat.api_key == "sk-not-shown"


def test_the_environment_overrides_the_file_and_an_empty_variable_does_not():
    config = parse_config("[gateway]\nmax_candidates = 30\nport = 8500\n")
    environ = {"CHUNKRAG_GATEWAY_MAX_CANDIDATES": "12", "CHUNKRAG_GATEWAY_PORT": ""}
    settings = Settings.from_env(config_file.layered(environ, config))
    assert settings.gateway.max_candidates == 12
    assert settings.gateway.port == 8500
    assert config_file.source_of("CHUNKRAG_GATEWAY_MAX_CANDIDATES", environ, config) == "environment"
    assert config_file.source_of("CHUNKRAG_GATEWAY_PORT", environ, config) == "file:<text>"
    assert config_file.source_of("CHUNKRAG_GATEWAY_HOST", environ, config) == "default"


def test_export_sets_only_what_the_environment_does_not(tmp_path: Path):
    (tmp_path / "chunkrag.toml").write_text("[gateway]\nmax_candidates = 30\nport = 8500\n")
    environ = {"CHUNKRAG_GATEWAY_PORT": "9000"}
    config = config_file.export_to_environment(environ, cwd=tmp_path)
    assert config is not None and config.path == tmp_path / "chunkrag.toml"
    assert environ == {"CHUNKRAG_GATEWAY_PORT": "9000", "CHUNKRAG_GATEWAY_MAX_CANDIDATES": "30"}


def test_which_file_chunkrag_config_then_the_working_directory(tmp_path: Path):
    named = tmp_path / "elsewhere.toml"
    named.write_text("index = 'docs'\n")
    (tmp_path / "chunkrag.toml").write_text("index = 'local'\n")
    assert config_file.config_path({"CHUNKRAG_CONFIG": str(named)}, cwd=tmp_path) == named
    assert config_file.config_path({}, cwd=tmp_path) == tmp_path / "chunkrag.toml"
    assert config_file.config_path({"CHUNKRAG_CONFIG": "none"}, cwd=tmp_path) is None
    assert config_file.config_path({}, cwd=tmp_path / "nothing-here") is None
    with pytest.raises(ConfigFileError, match="CHUNKRAG_CONFIG"):
        config_file.config_path({"CHUNKRAG_CONFIG": str(tmp_path / "missing.toml")})


def test_settings_load_reads_the_file_and_from_env_does_not(tmp_path: Path):
    named = tmp_path / "c.toml"
    named.write_text("index = 'from-file'\n[retrieval]\nsize = 7\n")
    environ = {"CHUNKRAG_CONFIG": str(named), "CHUNKRAG_RETRIEVAL_SIZE": "3"}
    loaded = Settings.load(environ)
    assert (loaded.index, loaded.retrieval.size) == ("from-file", 3)
    assert Settings.from_env(environ).index == "chunkrag"


def test_values_that_cannot_be_an_environment_string_and_clashing_keys_are_named():
    config = parse_config(
        "[gateway]\nport = [[1]]\nwhen = 2024-01-01\n"
        "[es]\ncluster_port = 1\n[es.cluster]\nport = 2\n"
        "[env]\n'not a name' = 'x'\nCHUNKRAG_CONFIG = 'other.toml'\n"
        '["bad-key"]\nx = 1\n'
    )
    problems = "\n".join(config.problems)
    assert "gateway.port: an array of strings, numbers or booleans only" in problems
    assert "gateway.when: a date or time" in problems
    assert "both set CHUNKRAG_ES_CLUSTER_PORT" in problems
    assert "env.not a name: not an environment variable name" in problems
    assert "bad-key: a key is letters, digits and underscores" in problems
    assert "env.CHUNKRAG_CONFIG: CHUNKRAG_CONFIG names the file; it has no effect inside one" in problems
    with pytest.raises(ConfigFileError, match="gateway.port"):
        config.raise_problems()
    assert parse_config("[gateway\n").problems[0].startswith("not valid TOML")


def test_unknown_keys_are_those_that_map_to_no_variable_the_code_reads():
    config = parse_config(
        "[gateway]\nmax_candidate = 3\nmax_candidates = 3\n[llm]\nthreads = 4\n"
        "[env]\nREDIS_URL = 'redis://h:6379/0'\nOTEL_EXPORTER_OTLP_ENDPOINT = 'http://c:4318'\nREDIS_ULR = 'x'\n"
    )
    assert config_file.unknown_keys(config) == [
        "gateway.max_candidate: unknown (CHUNKRAG_GATEWAY_MAX_CANDIDATE is read nowhere)",
        "env.REDIS_ULR: unknown (REDIS_ULR is read nowhere)",
    ]


def test_the_known_variables_are_those_the_documentation_test_collects():
    from tests.unit.test_configuration_docs import EXTERNAL, names_read

    assert config_names.known_variables() == frozenset(names_read())
    assert all(config_names.is_known(name) for name in EXTERNAL)


def test_bad_values_are_named_and_values_that_need_another_are_tried_with_it():
    config = parse_config(
        "[chunk]\nmax_chars = 10\n[gateway]\nport = 'eighty'\n"
        "[env]\nOPENSEARCH_AUTH = 'sigv4'\nAWS_REGION = 'eu-west-1'\n"
    )

    def describe(name):
        return config.entries[name].key

    problems = config_file.bad_values(config.values, describe)
    assert problems == [
        "chunk.max_chars: max_chars must be at least 20, got 10",
        "gateway.port: CHUNKRAG_GATEWAY_PORT='eighty' is not a valid int",
    ]
    # Each valid alone, refused together: the conflict is reported as the settings word it.
    together = config_file.bad_values(
        {"CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD": "0.6", "CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE": "90"}
    )
    assert together == [
        "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD and CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE are both set: "
        "set CHUNKRAG_CHUNK_BREAKPOINT=threshold or =percentile to say which rule breaks chunks"
    ]


def test_secrets_are_masked_and_urls_lose_their_credentials():
    assert config_file.masked("OPENAI_API_KEY", "sk-123") == "***"
    assert config_file.masked("CHUNKRAG_GATEWAY_API_KEYS", "a:abc:docs-*") == "***"
    assert config_file.masked("AWS_SECRET_ACCESS_KEY", "x") == "***"
    assert config_file.masked("AWS_SESSION_TOKEN", "x") == "***"
    assert config_file.masked("SOME_PASSWORD", "x") == "***"
    assert config_file.masked("ES_URL", "https://u:p@a:9200,https://b:9200") == "https://u:***@a:9200,https://b:9200"
    assert config_file.masked("REDIS_URL", "redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert config_file.masked("CHUNKRAG_GATEWAY_PORT", "8400") == "8400"
    assert config_file.masked("ES_API_KEY", "") == ""


def test_secrets_inside_values_are_masked_urls_headers_and_user_password_pairs():
    masked = config_file.masked
    headers = masked("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer tok-1,x-tenant=t")
    assert headers == "authorization=***,x-tenant=***"
    assert masked("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=k") == "api-key=***"
    assert masked("REDIS_URL", "redis://h:6379/0?password=pw&db=1") == "redis://h:6379/0?password=***&db=1"
    assert masked("REDIS_URL", "redis://user:pw@h:6379/0") == "redis://user:***@h:6379/0"
    assert masked("OPENAI_BASE_URL", "https://llm.example/v1?api_key=sk-1") == "https://llm.example/v1?api_key=***"
    assert masked("OPENAI_BASE_URL", "https://llm.example/v1?access_token=t&model=m") == (
        "https://llm.example/v1?access_token=***&model=m"
    )
    assert masked("OPENSEARCH_AUTH", "admin:S3cret!") == "admin:***"
    # What is not a secret stays readable.
    assert masked("OPENSEARCH_AUTH", "sigv4") == "sigv4"
    assert masked("CHUNKRAG_GATEWAY_AUTH", "service") == "service"
    assert masked("CHUNKRAG_POST_SEARCH_FIELDS", "kb-*:body,title") == "kb-*:body,title"
    assert masked("ES_URL", "http://127.0.0.1:9200/?pretty=true") == "http://127.0.0.1:9200/?pretty=true"


def test_config_show_prints_no_secret_held_inside_a_value(tmp_path, monkeypatch, capsys):
    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer tok-shown-nowhere",
        "REDIS_URL": "redis://:pw-shown-nowhere@127.0.0.1:6379/0",
        "OPENAI_BASE_URL": "https://llm.example/v1?api_key=key-shown-nowhere",
        "OPENSEARCH_AUTH": "admin:pass-shown-nowhere",
    }
    code, out = _run(["config", "show"], monkeypatch, capsys, environ, tmp_path)
    assert code == 0 and "shown-nowhere" not in out.out
    assert "OPENSEARCH_AUTH" in out.out and "admin:***" in out.out


def test_config_check_refuses_what_serve_refuses_with_the_same_model(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[gateway]\nauth = "servic"\nmax_body_bytes = -1\nmax_queued = -2\npassthrough = "reed"\n'
        '[otel]\nexporter = "consol"\n'
    )
    code, out = _run(["config", "check", str(bad)], monkeypatch, capsys, {}, tmp_path)
    assert code == 1
    for expected in (
        "gateway.auth (CHUNKRAG_GATEWAY_AUTH): CHUNKRAG_GATEWAY_AUTH must be one of forward, service, got 'servic'",
        "gateway.max_body_bytes (CHUNKRAG_GATEWAY_MAX_BODY_BYTES): CHUNKRAG_GATEWAY_MAX_BODY_BYTES must be a number "
        "of at least 1, got -1",
        "gateway.max_queued (CHUNKRAG_GATEWAY_MAX_QUEUED)",
        "gateway.passthrough (CHUNKRAG_GATEWAY_PASSTHROUGH)",
        "otel.exporter (CHUNKRAG_OTEL_EXPORTER): CHUNKRAG_OTEL_EXPORTER must be one of none, console, otlp",
    ):
        assert expected in out.out, out.out
    # serve builds the same settings: it stops on the same value, before it listens.
    with pytest.raises(SettingsError, match="CHUNKRAG_GATEWAY_MAX_BODY_BYTES"):
        Settings.from_env({"CHUNKRAG_GATEWAY_MAX_BODY_BYTES": "-1"})
    # What the gateway's own start check refuses (keys, their pairing with the mode), check refuses too.
    keyless = tmp_path / "keyless.toml"
    keyless.write_text('[gateway]\nauth = "service"\n')
    code, out = _run(["config", "check", str(keyless)], monkeypatch, capsys, {}, tmp_path)
    assert code == 1 and "CHUNKRAG_GATEWAY_AUTH=service needs CHUNKRAG_GATEWAY_API_KEYS" in out.out


def test_show_rows_give_each_value_its_source_and_the_default_from_the_settings_model():
    config = parse_config(EXAMPLE)
    environ = {"CHUNKRAG_GATEWAY_MAX_CANDIDATES": "12", "REDIS_URL": "redis://u:pw@r:6379/0"}
    by_name = {row.name: row for row in config_command.rows(environ, config)}
    assert by_name["CHUNKRAG_GATEWAY_MAX_CANDIDATES"].value == "12"
    assert by_name["CHUNKRAG_GATEWAY_MAX_CANDIDATES"].source == "environment"
    assert by_name["CHUNKRAG_GATEWAY_ACCESS_LOG"].source == "file:<text>"
    assert by_name["ES_URL"].value == "http://elastic:***@10.0.0.1:9200,http://10.0.0.2:9200"
    assert by_name["OPENAI_API_KEY"].value == "***"
    assert by_name["REDIS_URL"].value == "redis://u:***@r:6379/0"
    assert (by_name["CHUNKRAG_GATEWAY_PORT"].value, by_name["CHUNKRAG_GATEWAY_PORT"].source) == ("8400", "default")
    assert by_name["CHUNKRAG_RERANK_MODEL"].value == "rerank-english-v3.0"
    assert by_name["CHUNKRAG_INDEX_SHARDS"].value == "1"
    assert by_name["CHUNKRAG_LLM_THREADS"].source == "default"
    assert set(config_names.settings_defaults()) <= set(by_name)


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys, environ: dict[str, str], cwd: Path):
    monkeypatch.chdir(cwd)
    # A copy of the process environment, without the project's variables: what
    # the command exports from the file stays in the copy.
    keep = {n: v for n, v in os.environ.items() if not config_names.is_known(n) or n == "CHUNKRAG_HOME"}
    monkeypatch.setattr(os, "environ", {**keep, **environ})
    code = main(argv)
    return code, capsys.readouterr()


def test_config_check_exits_zero_on_a_clean_file_and_one_naming_each_problem(tmp_path, monkeypatch, capsys):
    clean = tmp_path / "clean.toml"
    clean.write_text(EXAMPLE)
    code, out = _run(["config", "check", str(clean)], monkeypatch, capsys, {}, tmp_path)
    assert code == 0, out
    assert "ok (8 setting(s) from the file)" in out.out

    bad = tmp_path / "bad.toml"
    bad.write_text("[gateway]\nmax_candidate = 3\n[chunk]\nmax_chars = 10\n[es]\nport = 'x'\n")
    code, out = _run(["config", "check", str(bad)], monkeypatch, capsys, {}, tmp_path)
    assert code == 1
    assert "gateway.max_candidate: unknown" in out.out
    assert "chunk.max_chars (CHUNKRAG_CHUNK_MAX_CHARS): max_chars must be at least 20" in out.out
    assert "CHUNKRAG_ES_PORT='x' is not a TCP port number" in out.out


def test_config_check_without_a_file_checks_the_found_file_under_the_environment(tmp_path, monkeypatch, capsys):
    (tmp_path / "chunkrag.toml").write_text("[retrieval]\nsize = 5\n")
    code, out = _run(["config", "check"], monkeypatch, capsys, {"CHUNKRAG_RETRIEVAL_SIZE": "x"}, tmp_path)
    assert code == 1
    assert "CHUNKRAG_RETRIEVAL_SIZE (environment): CHUNKRAG_RETRIEVAL_SIZE='x' is not a valid int" in out.out


def test_config_show_lists_values_with_sources_and_no_secret(tmp_path, monkeypatch, capsys):
    (tmp_path / "chunkrag.toml").write_text(EXAMPLE)
    environ = {"CHUNKRAG_GATEWAY_PORT": "8500"}
    code, out = _run(["config", "show", "--json"], monkeypatch, capsys, environ, tmp_path)
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out.out)}
    assert rows["CHUNKRAG_GATEWAY_PORT"]["source"] == "environment"
    assert rows["CHUNKRAG_GATEWAY_MAX_CANDIDATES"]["source"] == f"file:{tmp_path / 'chunkrag.toml'}"
    assert "sk-not-shown" not in out.out and "secret" not in out.out
    code, out = _run(["config", "show", "--changed"], monkeypatch, capsys, environ, tmp_path)
    assert code == 0
    assert "CHUNKRAG_GATEWAY_MAX_CANDIDATES  30  (file:" in out.out.replace("   ", "  ")
    assert "(default)" not in out.out


def test_a_command_runs_with_the_file_and_stops_on_a_file_that_does_not_map(tmp_path, monkeypatch, capsys):
    (tmp_path / "chunkrag.toml").write_text("[chunk]\nmax_chars = 10\n")
    code, out = _run(["cluster"], monkeypatch, capsys, {}, tmp_path)
    assert code == 2
    assert "configuration error: max_chars must be at least 20" in out.err
    assert os.environ["CHUNKRAG_CHUNK_MAX_CHARS"] == "10"  # exported (into the test's copy)
    (tmp_path / "chunkrag.toml").write_text("[gateway]\nport = [[1]]\n")
    code, out = _run(["cluster"], monkeypatch, capsys, {}, tmp_path)
    assert code == 2
    assert "gateway.port: an array of strings" in out.err


def test_the_example_file_in_the_docs_is_clean():
    example = Path(__file__).resolve().parents[2] / "docs" / "chunkrag.example.toml"
    config = config_file.read_config(example)
    assert config_command.problems({}, config) == []
    assert config.values["CHUNKRAG_GATEWAY_MAX_CANDIDATES"] == "50"
