"""The options of `chunkrag ingest`, declared once: each flag sets what its
variable sets, the flags and the docs' table are made from the declaration."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkrag_cli.main import _settings, build_parser, main
from chunkrag_core.config_names import names_settings_asks_for
from chunkrag_core.settings import Settings
from ingest_pipeline.options import INGEST_OPTIONS, reference

# A value for each flag that takes one, as given on the command line and as the variable holds it.
SAMPLES = {
    "--similarity-threshold": "0.6",
    "--max-chars": "300",
    "--percentile": "90",
    "--min-chars": "40",
    "--headers": "title",
    "--scales": "512,128",
}


def ingest_settings(*argv: str) -> Settings:
    return _settings(build_parser().parse_args(["ingest", "docs", *argv]))


def test_every_declared_variable_is_one_the_settings_read():
    read = set(names_settings_asks_for())
    assert {option.variable for option in INGEST_OPTIONS} <= read


@pytest.mark.parametrize("option", INGEST_OPTIONS, ids=lambda option: option.flag)
def test_each_flag_sets_what_its_variable_sets(option, monkeypatch):
    for other in INGEST_OPTIONS:
        monkeypatch.delenv(other.variable, raising=False)
    monkeypatch.delenv("CHUNKRAG_CHUNK_BREAKPOINT", raising=False)
    if option.takes_value:
        from_flag = ingest_settings(option.flag, SAMPLES[option.flag])
        environ = {option.variable: SAMPLES[option.flag]}
    else:
        from_flag = ingest_settings(option.flag)
        environ = {option.variable: str(option.value).lower()}
    environ |= {f"CHUNKRAG_CHUNK_{name.upper()}": value for name, value in option.also.items()}
    assert from_flag == Settings.from_env(environ)
    assert from_flag != Settings.from_env({})


def test_unset_flags_leave_the_settings_as_the_environment_made_them(monkeypatch):
    monkeypatch.setenv("CHUNKRAG_CHUNK_MAX_CHARS", "333")
    monkeypatch.setenv("CHUNKRAG_WORKER_INGEST", "true")
    settings = ingest_settings()
    assert settings.chunking.max_chars == 333 and settings.workers.ingest is True
    assert ingest_settings("--max-chars", "400").chunking.max_chars == 400


def test_a_bad_value_is_refused_by_the_settings_with_its_reason(capsys):
    assert main(["ingest", "nowhere", "--max-chars", "10"]) == 2
    assert "configuration error: max_chars must be at least 20, got 10" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ingest", "docs", "--headers", "everything"])


def test_the_ingest_docs_hold_the_table_made_from_the_declaration():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "ingest.md").read_text(encoding="utf-8")
    generated = docs.split("<!-- ingest-options:begin", 1)[1].split("-->", 1)[1].split("<!-- ingest-options:end -->")[0]
    assert generated.strip() == reference().strip(), "regenerate it: python -m ingest_pipeline.options"
    for option in INGEST_OPTIONS:
        assert f"| `{option.flag}` |" in reference()


def test_naming_theta_or_a_percentile_picks_its_rule_and_naming_both_is_refused(monkeypatch, capsys):
    from chunkrag_core.settings import SettingsError

    theta = Settings.from_env({"CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD": "0.6"}).chunking
    assert (theta.breakpoint, theta.similarity_threshold) == ("threshold", 0.6)
    percentile = Settings.from_env({"CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE": "90"}).chunking
    assert (percentile.breakpoint, percentile.breakpoint_percentile) == ("percentile", 90.0)
    said = Settings.from_env(
        {
            "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD": "0.6",
            "CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE": "90",
            "CHUNKRAG_CHUNK_BREAKPOINT": "threshold",
        }
    ).chunking
    assert said.breakpoint == "threshold"
    with pytest.raises(SettingsError, match="CHUNKRAG_CHUNK_BREAKPOINT=threshold or =percentile"):
        Settings.from_env({"CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD": "0.6", "CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE": "90"})

    for option in INGEST_OPTIONS:
        monkeypatch.delenv(option.variable, raising=False)
    monkeypatch.delenv("CHUNKRAG_CHUNK_BREAKPOINT", raising=False)
    assert ingest_settings("--similarity-threshold", "0.6").chunking.breakpoint == "threshold"
    assert main(["ingest", "nowhere", "--similarity-threshold", "0.6", "--percentile", "90"]) == 2
    assert "--similarity-threshold and --percentile set breakpoint apart: give one of them" in capsys.readouterr().err
