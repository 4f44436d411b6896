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
from chunkrag_core.redaction import redacted
from chunkrag_core.settings import VARIABLE_CHOICES, Settings, SettingsError

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


def shown(name: str, value: str) -> str:
    """A value as `config show` prints it."""
    return redacted(name, value, VARIABLE_CHOICES.get(name, ()))


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


def test_load_settings_reads_the_file_and_from_env_does_not(tmp_path: Path):
    named = tmp_path / "c.toml"
    named.write_text("index = 'from-file'\n[retrieval]\nsize = 7\n")
    environ = {"CHUNKRAG_CONFIG": str(named), "CHUNKRAG_RETRIEVAL_SIZE": "3"}
    loaded = config_file.load_settings(environ)
    assert (loaded.index, loaded.retrieval.size) == ("from-file", 3)
    assert Settings.from_env(environ).index == "chunkrag"


def test_load_settings_refuses_what_config_check_refuses(tmp_path: Path):
    """A program building its own settings (the adapters) stops on an
    unknown key as `config check` does, not only on a bad value."""
    named = tmp_path / "c.toml"
    named.write_text("[gateway]\nrate_per_sec = 5\n[chunk]\nmax_chars = 10\n")
    with pytest.raises(ConfigFileError) as refused:
        config_file.load_settings({"CHUNKRAG_CONFIG": str(named)})
    assert "gateway.rate_per_sec: unknown (CHUNKRAG_GATEWAY_RATE_PER_SEC is read nowhere)" in str(refused.value)
    assert "chunk.max_chars (CHUNKRAG_CHUNK_MAX_CHARS): max_chars must be at least 20" in str(refused.value)


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
    assert shown("OPENAI_API_KEY", "sk-123") == "***"
    assert shown("CHUNKRAG_GATEWAY_API_KEYS", "a:abc:docs-*") == "***"
    assert shown("AWS_SECRET_ACCESS_KEY", "x") == "***"
    assert shown("AWS_SESSION_TOKEN", "x") == "***"
    assert shown("SOME_PASSWORD", "x") == "***"
    assert shown("ES_URL", "https://u:p@a:9200,https://b:9200") == "https://u:***@a:9200,https://b:9200"
    assert shown("REDIS_URL", "redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert shown("CHUNKRAG_GATEWAY_PORT", "8400") == "8400"
    assert shown("ES_API_KEY", "") == ""


def test_secrets_inside_values_are_masked_urls_headers_and_user_password_pairs():
    headers = shown("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer tok-1,x-tenant=t")
    assert headers == "authorization=***,x-tenant=***"
    assert shown("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=k") == "api-key=***"
    assert shown("REDIS_URL", "redis://h:6379/0?password=pw&db=1") == "redis://h:6379/0?password=***&db=1"
    assert shown("REDIS_URL", "redis://user:pw@h:6379/0") == "redis://user:***@h:6379/0"
    assert shown("OPENAI_BASE_URL", "https://llm.example/v1?api_key=sk-1") == "https://llm.example/v1?api_key=***"
    assert shown("OPENAI_BASE_URL", "https://llm.example/v1?access_token=t&model=m") == (
        "https://llm.example/v1?access_token=***&model=m"
    )
    assert shown("OPENSEARCH_AUTH", "admin:S3cret!") == "admin:***"
    # What is not a secret stays readable.
    assert shown("OPENSEARCH_AUTH", "sigv4") == "sigv4"
    assert shown("CHUNKRAG_GATEWAY_AUTH", "service") == "service"
    assert shown("CHUNKRAG_POST_SEARCH_FIELDS", "kb-*:body,title") == "kb-*:body,title"
    assert shown("ES_URL", "http://127.0.0.1:9200/?pretty=true") == "http://127.0.0.1:9200/?pretty=true"


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
        # A variable named like credentials shows no value it does not accept (it may be credentials).
        "gateway.auth (CHUNKRAG_GATEWAY_AUTH): CHUNKRAG_GATEWAY_AUTH must be one of forward, service, got '***'",
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
    assert "configuration error: " in out.err
    assert "chunk.max_chars (CHUNKRAG_CHUNK_MAX_CHARS): max_chars must be at least 20" in out.err
    assert "CHUNKRAG_CHUNK_MAX_CHARS" not in os.environ  # stopped before anything was exported
    (tmp_path / "chunkrag.toml").write_text("[gateway]\nport = [[1]]\n")
    code, out = _run(["cluster"], monkeypatch, capsys, {}, tmp_path)
    assert code == 2
    assert "gateway.port: an array of strings" in out.err
    # A clean file is exported for the command and what it starts.
    (tmp_path / "chunkrag.toml").write_text("[chunk]\nmax_chars = 300\n")
    monkeypatch.setattr(config_command, "problems", lambda environ, config: [])
    assert config_command.check_before_running(os.environ) is not None
    assert os.environ["CHUNKRAG_CHUNK_MAX_CHARS"] == "300"


@pytest.mark.parametrize("command", [["serve"], ["cluster"], ["search", "anything"], ["services", "status"]])
def test_every_command_stops_on_what_config_check_refuses(command, tmp_path, monkeypatch, capsys):
    """A typo'd key (`rate_per_sec` for `rate_per_s`: no rate limit at all)
    stops `serve` and every other command as it fails `config check`, with
    the same words, before the command does anything."""
    (tmp_path / "chunkrag.toml").write_text("[gateway]\nrate_per_sec = 5\n")
    code, checked = _run(["config", "check"], monkeypatch, capsys, {}, tmp_path)
    assert code == 1
    problem = "gateway.rate_per_sec: unknown (CHUNKRAG_GATEWAY_RATE_PER_SEC is read nowhere)"
    assert problem in checked.out

    def ran(args):
        raise AssertionError("the command ran with a configuration `config check` refuses")

    for name in ("cmd_serve", "cmd_cluster", "cmd_search"):
        monkeypatch.setattr(f"chunkrag_cli.main.{name}", ran)
    code, out = _run(command, monkeypatch, capsys, {}, tmp_path)
    assert code == 2 and problem in out.err, out


SECRET = "Hunter2Secret"


def _leaks(text: str) -> bool:
    return SECRET.lower() in text.lower()


def test_a_secret_in_a_variable_named_like_credentials_is_never_echoed(tmp_path, monkeypatch, capsys):
    """`OPENSEARCH_AUTH=Admin:Hunter2Secret` (credentials in the mode's
    variable) was echoed, lower-cased, by `config check` and by every
    command's configuration error, `serve` included."""
    environ = {"OPENSEARCH_AUTH": f"Admin:{SECRET}"}
    for argv in (["config", "check"], ["config", "show"], ["serve"], ["cluster"], ["ingest", "x"]):
        code, out = _run(argv, monkeypatch, capsys, environ, tmp_path)
        assert not _leaks(out.out + out.err), (argv, out)
        if argv != ["config", "show"]:
            assert code in (1, 2) and "OPENSEARCH_AUTH='Admin:***'; choose one of basic, sigv4" in out.out + out.err
    code, out = _run(["serve"], monkeypatch, capsys, {"OPENSEARCH_AUTH": SECRET}, tmp_path)
    assert code == 2 and not _leaks(out.err) and "OPENSEARCH_AUTH='***'" in out.err


def _secret_values(name: str) -> list[str]:
    from chunkrag_core.redaction import CREDENTIAL_WORDS, is_secret

    named = [SECRET, f"Admin:{SECRET}"] if is_secret(name) or any(word in name for word in CREDENTIAL_WORDS) else []
    return [
        *named,
        f"admin:{SECRET}@h:9200",  # no scheme
        f"http://admin:{SECRET}@h:9200/?sig={SECRET}&X-Amz-Signature={SECRET}#{SECRET}",
        f"http://admin:{SECRET}@[h:9200/?sig={SECRET}",  # too broken to split
        f"http://admin:{SECRET}@h:port/",  # a port that is not a number
        f"http://admin:p@{SECRET}:w#{SECRET}@h:9200",  # @ : # in the password, not encoded
        f"http://admin:{SECRET},{SECRET}@h:9200",  # a comma in the password
        f"admin:p/{SECRET}?{SECRET}@h:9200",  # no scheme, / ? in the password
    ]


def test_no_check_echoes_a_secret_of_any_variable_named_like_one():
    """Every variable the code reads whose name marks a secret or
    credentials, and every URL variable, set to secrets in each shape: no
    problem `config check` (and so every command) names holds the secret."""
    from chunkrag_core.redaction import CREDENTIAL_WORDS, is_secret

    names = [
        name
        for name in config_names.known_variables()
        if is_secret(name) or any(word in name for word in CREDENTIAL_WORDS) or name.endswith("_URL")
    ]
    assert {"OPENSEARCH_AUTH", "ES_URL", "ES_API_KEY", "CHUNKRAG_GATEWAY_API_KEYS", "REDIS_URL"} <= set(names)
    for name in names:
        for value in _secret_values(name):
            for problem in config_command.problems({name: value}, None):
                assert not _leaks(problem), (name, value, problem)
            row = next(row for row in config_command.rows({name: value}, None) if row.name == name)
            assert not _leaks(row.value), (name, value, row.value)


def test_urls_lose_passwords_signatures_and_fragments_and_keep_the_rest():
    assert (
        redacted("ES_URL", "https://u:p@h:9200/p?sig=abc&se=2030&x=1#frag")
        == "https://u:***@h:9200/p?sig=***&se=2030&x=1#***"
    )
    assert redacted("X", "https://h/?X-Amz-Signature=a&X-Amz-Date=d") == "https://h/?X-Amz-Signature=***&X-Amz-Date=d"
    assert redacted("X", "https://h/?design=1&sig_v=2") == "https://h/?design=1&sig_v=***"
    assert redacted("X", "https://h/#access_token=t") == "https://h/#***"
    # A URL no parser splits is read like any other: the redaction reads text, it does not parse.
    assert redacted("X", "http://u:p@[h:9200/?a=b&token=t") == "http://u:***@[h:9200/?a=b&token=***"
    assert redacted("X", "http://u:p@h:port/") == "http://u:***@h:port/"
    assert redacted("X", "https://h:9200") == "https://h:9200"
    assert redacted("ES_URL", "elastic:pw@h:9200,h2:9200") == "elastic:***@h:9200,h2:9200"


def test_a_mode_is_shown_and_anything_else_in_its_variable_is_not():
    assert redacted("OPENSEARCH_AUTH", "SigV4", ("basic", "sigv4")) == "SigV4"
    assert redacted("OPENSEARCH_AUTH", "Hunter2Secret", ("basic", "sigv4")) == "***"
    assert redacted("OPENSEARCH_AUTH", "sigv4") == "***"  # no choices named: nothing to tell a mode by
    assert redacted("CHUNKRAG_GATEWAY_AUTH", "servic", ("forward", "service")) == "***"
    assert redacted("SEARCH_BACKEND", "elastic") == "elastic"  # not named like a secret


def test_the_example_file_in_the_docs_is_clean():
    example = Path(__file__).resolve().parents[2] / "docs" / "chunkrag.example.toml"
    config = config_file.read_config(example)
    assert config_command.problems({}, config) == []
    assert config.values["CHUNKRAG_GATEWAY_MAX_CANDIDATES"] == "50"
