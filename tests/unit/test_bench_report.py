"""bench/REPORT.md is generated from the result files, and every figure the
README quotes is the one a result file holds (bench/report.toml [readme])."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from bench import report
from bench.report import Results, build, declared, readme_checks

ROOT = Path(__file__).resolve().parents[2]


def test_every_readme_figure_matches_its_result_file():
    failures = readme_checks(Results(), declared(), (ROOT / "README.md").read_text(encoding="utf-8"))
    assert failures == []


def test_a_changed_figure_or_an_unmatched_number_is_caught():
    data = declared()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    changed = readme.replace("nDCG@10 0.707", "nDCG@10 0.717")
    assert any("0.717" in f or "nDCG@10 0.707" in f for f in readme_checks(Results(), data, changed))
    added = readme.replace("## What the measurements say\n", "## What the measurements say\n\nIt is 37.5% faster.\n")
    assert any("'37.5'" in f for f in readme_checks(Results(), data, added))


def test_the_report_is_built_from_the_results_within_its_length():
    text = build()
    assert text.count("\n") <= report.MAX_LINES
    assert "declared, not found" not in text, text[text.index("## Not in the report") :]


def full_history() -> bool:
    found = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    return found.returncode == 0 and found.stdout.strip() == "false"


# A result file that records no date is dated by its last commit: a shallow clone would date it otherwise.
@pytest.mark.skipif(not full_history(), reason="needs the repository's whole git history")
def test_the_committed_report_is_the_one_the_results_make():
    # `python -m bench.report` writes it: a figure, a result file or report.toml changed without it fails here.
    assert (ROOT / "bench" / "REPORT.md").read_text(encoding="utf-8") == build()


def test_the_bench_code_stays_within_its_room():
    # `cat bench/*.py | wc -l`: the harnesses, not one script per question (retired studies live in git).
    lines = sum(path.read_text(encoding="utf-8").count("\n") for path in (ROOT / "bench").glob("*.py"))
    assert lines <= 4000, lines


def test_a_missing_file_or_field_and_an_unknown_file_are_listed_not_raised(tmp_path):
    (tmp_path / "gateway.json").write_text(
        json.dumps({"command": "python -m x", "date": "2026-01-02", "a": {"b": 1.5}})
    )
    (tmp_path / "frameworks_new.json").write_text("{}")
    (tmp_path / "old.json").write_text("{}")
    data = {
        "preamble": "p",
        "area": [
            {
                "title": "Gateway",
                "figures": [
                    {"label": "present", "file": "gateway.json", "field": "a.b", "format": ".2f"},
                    {"label": "no such field", "file": "gateway.json", "field": "a.c"},
                    {"label": "no such file", "file": "crossencoder_heldout.json", "field": "x"},
                ],
            }
        ],
        "study": [
            {
                "title": "Old",
                "module": "m",
                "mode": "--x",
                "commit": "abc1234",
                "date": "2026-01-01",
                "result": ["old.json"],
                "conclusion": "It  was\n so.",
            }
        ],
    }
    text = build(Results(tmp_path), data)
    assert "- **Old** (`bench/m.py --x`, abc1234, 2026-01-01, `old.json`). It was so." in text
    assert "`old.json`" not in text[text.index("## Not in the report") :]
    assert "| present | **1.50** |  | `gateway.json` | `python -m x` | 2026-01-02 |" in text
    assert "no field 'a.c'" in text
    assert "crossencoder_heldout.json missing" in text
    assert "`frameworks_new.json`" in text


def test_lookup_takes_the_innermost_command_and_date():
    document = {
        "command": "outer",
        "date": "2026-01-01",
        "rows": {"r": {"command": "inner", "date": "2026-02-02", "x": 3}},
    }
    value, run = report.lookup(document, ["rows", "r", "x"])
    assert value == 3 and run == {"command": "inner", "date": "2026-02-02"}


def test_derived_figures():
    assert report.DERIVED["saving"](513.0, 529.9) == 1 - 513.0 / 529.9
    dataset = {
        "questions": [
            {"item_id": "0", "row": "filter_judge", "correct": True},
            {"item_id": "0", "row": "rag", "correct": True},
            {"item_id": "1", "row": "rag", "correct": False},
        ]
    }
    assert report.DERIVED["rag_on_judged"](dataset, None) == 1.0
    assert report.render_value(93.27, {"format": ".0f", "round": -1}) == "90"
    assert report.render_value(0.7483, {"format": ".0%"}) == "75%"


def test_every_scenario_names_a_runner_and_a_result_file():
    scenarios = tomllib.loads(report.SCENARIOS.read_text(encoding="utf-8"))["scenario"]
    names = [s["name"] for s in scenarios]
    assert len(names) == len(set(names))
    for s in scenarios:
        assert s["kind"] in {"ingest", "retrieval", "filter", "gateway", "scale"}
        assert s["command"][0] in {"python", "chunkrag"} and s["result"].endswith(".json")
        if s["command"][0] == "python":
            runner = ROOT / (s["command"][2].replace(".", "/") + ".py")
            assert runner.exists(), s["command"]
            # Every option it passes is one its runner declares (a retired option failed only when run).
            declared = runner.read_text(encoding="utf-8")
            assert [f for f in s["command"][3:] if f.startswith("--") and f'"{f}"' not in declared] == [], s["name"]
    assert sum(s["minutes"] for s in scenarios if s.get("headline")) <= 30
