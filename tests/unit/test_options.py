"""The filter's options, declared once: the CLI flags made from the
declaration, the rules resolve() holds, and the defaults by surface."""

import dataclasses

import pytest

from chunkrag_cli.main import build_parser, filter_options_from_args, main
from chunkrag_filter.pipeline import FilterOptions
from chunkrag_filter.processors.calibration import CONFIGURED
from chunkrag_filter.processors.relevance import ScoringOptions
from search_extension.options import ANSWER_BY_DEFAULT, OptionsModel, ScoringModel, SegmentsModel, parse_options


def flags(*argv):
    args = build_parser().parse_args(list(argv))
    return filter_options_from_args(args, argv[0])


def test_unset_flags_keep_the_filter_defaults_and_ask_answers_by_default():
    assert flags("ask", "q").filter == FilterOptions()
    assert flags("ask", "q").candidates is None
    assert flags("eval", "dev.jsonl").filter == dataclasses.replace(FilterOptions(), answer=False)
    assert flags("search", "q").mode is None


def test_every_ask_flag_keeps_its_name_and_reaches_its_option():
    resolved = flags(
        "ask",
        "q",
        "--candidates",
        "5",
        "--threshold",
        "dynamic",
        "--fixed-threshold",
        "0.5",
        "--fallback",
        "not_found",
        "--no-answer",
        "--judge-top",
        "4",
        "--calibration",
        "off",
        "--method",
        "multistage",
        "--orders",
        "2",
        "--passages",
        "quoted",
    )
    assert resolved.candidates == 5
    assert resolved.filter == dataclasses.replace(
        FilterOptions(),
        threshold="dynamic",
        fixed_threshold=0.5,
        fallback="not_found",
        answer=False,
        judge_top=4,
        calibration=None,
        scoring=dataclasses.replace(FilterOptions().scoring, method="multistage", orders=2, passages="quoted"),
    )


def test_every_eval_flag_keeps_its_name_and_reaches_its_option():
    resolved = flags(
        "eval",
        "dev.jsonl",
        "--redundancy",
        "0.85",
        "--threshold",
        "relative",
        "--fixed-threshold",
        "0.6",
        "--prior-weight",
        "0.25",
        "--judge-top",
        "0",
        "--calibration",
        "default",
        "--method",
        "yes_no",
        "--orders",
        "1",
        "--passages",
        "numbered",
    ).filter
    assert (
        resolved.redundancy_threshold == 0.85 and resolved.threshold == "relative" and resolved.fixed_threshold == 0.6
    )
    assert resolved.prior_weight == 0.25 and resolved.judge_top == 0 and resolved.calibration is CONFIGURED
    assert resolved.scoring.method == "yes_no" and not resolved.answer
    assert flags("search", "q", "--mode", "bm25").mode == "bm25"


def test_ask_and_eval_choose_what_scores_the_candidates_and_the_gate():
    for command, operand in (("ask", "q"), ("eval", "dev.jsonl")):
        resolved = flags(command, operand, "--relevance", "crossencoder", "--gate", "off").filter
        assert (resolved.relevance, resolved.gate) == ("crossencoder", "off")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["search", "q", "--relevance", "crossencoder"])


def test_segment_and_ensemble_flags_are_made_from_their_options():
    from search_extension.segments import SegmentSettings

    assert flags("ask", "q").segments is None and flags("ask", "q").ensemble is None
    assert flags("ask", "q", "--segments").segments == parse_options({"segments": True}).segments == SegmentSettings()
    assert flags("ask", "q", "--segments", "--segment-chars", "900").segments == SegmentSettings(max_total_chars=900)
    assert (
        flags("ask", "q", "--segment-chars", "900").segments
        == parse_options({"segments": {"max_total_chars": 900}}).segments
    )
    assert flags("eval", "dev.jsonl", "--segments").segments == SegmentSettings()
    for command, operand in (("search", "q"), ("ask", "q"), ("eval", "dev.jsonl")):
        assert flags(command, operand, "--ensemble").ensemble == parse_options({"ensemble": True}).ensemble == ()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["search", "q", "--segments"])


def test_ensemble_true_means_the_configured_scales_else_the_defaults():
    from chunkrag_cli.main import ensemble_scales
    from chunkrag_core.settings import ChunkingSettings, Settings

    configured = Settings(chunking=ChunkingSettings(scales=(256,)))
    assert ensemble_scales(flags("ask", "q", "--ensemble"), configured) == (256,)
    assert ensemble_scales(flags("ask", "q", "--ensemble"), Settings()) == (128, 512, 2000)
    assert ensemble_scales(flags("ask", "q"), configured) is None


def test_a_judging_flag_turns_the_judge_on_for_nine_as_a_scoring_option_does():
    for argv in (("--method", "listwise"), ("--orders", "2"), ("--passages", "quoted")):
        cli = flags("ask", "q", *argv).filter
        assert cli.judge_top == 9 and cli.calibration is CONFIGURED, argv
    key, value = "method", "listwise"
    assert flags("ask", "q", "--method", value).filter == parse_options({"scoring": {key: value}}).filter
    assert flags("ask", "q", "--method", "listwise", "--judge-top", "0").filter.judge_top == 0
    assert (
        flags("ask", "q", "--method", "listwise", "--calibration", "off").filter
        == parse_options({"scoring": {"method": "listwise"}, "calibrated": False}).filter
    )


def test_an_invalid_flag_value_is_refused_with_the_options_reason(capsys):
    assert main(["ask", "q", "--fixed-threshold", "1.5"]) == 2
    assert "options.fixed_threshold must be a number from 0 to 1, got 1.5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ask", "q", "--threshold", "median"])


def test_answer_defaults_by_surface():
    assert ANSWER_BY_DEFAULT == {"search": False, "ask": True, "eval": False}
    assert parse_options({}, surface="search").filter.answer is False
    assert parse_options({"answer": True}, surface="search").filter.answer is True
    assert parse_options({}, surface="ask").filter.answer is True
    assert parse_options({"answer": False}, surface="ask").filter.answer is False


def test_the_declaration_holds_the_library_defaults_and_a_help_line_for_every_option():
    schema = OptionsModel.model_json_schema()
    filter_defaults = FilterOptions()
    for name in (
        "threshold",
        "fixed_threshold",
        "fallback",
        "fallback_k",
        "min_score",
        "prior_weight",
        "rerank",
        "lost_in_the_middle",
        "judge_top",
        "redundancy_threshold",
    ):
        assert schema["properties"][name].get("default") == getattr(filter_defaults, name), name
    scoring = schema["$defs"]["ScoringModel"]["properties"]
    assert scoring["method"]["default"] == filter_defaults.scoring.method == "listwise"
    assert tuple(scoring["reflect_band"]["default"]) == filter_defaults.scoring.reflect_band
    for model in (OptionsModel, ScoringModel, SegmentsModel):
        for name, field in model.model_fields.items():
            assert field.description and "\n" not in field.description, (model.__name__, name)


def test_resolved_values_are_the_frozen_library_dataclasses():
    resolved = parse_options(
        {"scoring": {"weights": [1, 0, 0], "reflect_band": [0.2, 0.8]}, "segments": True, "ensemble": [512, 128, 128]}
    )
    assert isinstance(resolved.filter.scoring, ScoringOptions) and resolved.filter.scoring.weights == (1.0, 0.0, 0.0)
    assert resolved.filter.scoring.reflect_band == (0.2, 0.8) and resolved.ensemble == (128, 512)
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.filter.answer = False


def test_the_reference_table_lists_every_option_with_its_flag():
    from search_extension.options import OPTION_KEYS, SCORING_KEYS, SEGMENT_KEYS, reference

    table = reference()
    for key in (*OPTION_KEYS, *(f"scoring.{k}" for k in SCORING_KEYS), *(f"segments.{k}" for k in SEGMENT_KEYS)):
        assert table.count(f"| `{key}` |") == 1, key
    assert "| `calibrated` | true or false | `true` | `--calibration` |" in table
    assert "| `scoring.orders` | an integer from 1 to 2 | `1` | `--orders` |" in table


def test_the_gateway_docs_hold_the_table_made_from_the_declaration():
    from pathlib import Path

    from search_extension.options import reference

    docs = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text(encoding="utf-8")
    generated = docs.split("<!-- options:begin", 1)[1].split("-->", 1)[1].split("<!-- options:end -->", 1)[0]
    assert generated.strip() == reference().strip(), "regenerate it: python -m search_extension.options"


def test_the_declaration_imports_neither_the_gateway_nor_the_cli_nor_the_workers():
    import subprocess
    import sys

    code = (
        "import sys, search_extension.options; "
        "print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('fastapi', 'starlette', 'workers', 'chunkrag_cli', 'celery')"
        " or m.startswith('chunkrag_gateway')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
