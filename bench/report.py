"""bench/REPORT.md from the result files: what is true now, by area.

    python -m bench.report            # writes bench/REPORT.md
    python -m bench.report --stdout   # prints it instead

What goes in is declared as data in bench/report.toml: areas, each a list of
figures (a result file, a field in it, how to print it, its baseline), the
retired studies (one line each, with the commit their code last was in) and the
README's figures. Adding a figure or a result file to the report is one line
there. A declared file that is missing, a field that is absent and a result
file no entry names are listed at the end of the report, never an error.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.common import RESULTS

HERE = Path(__file__).resolve().parent
DECLARED = HERE / "report.toml"
SCENARIOS = HERE / "scenarios.toml"
REPORT = HERE / "REPORT.md"
README = HERE.parent / "README.md"
MAX_LINES = 250


class Absent(LookupError):  # a declared result file or field that is not there
    pass


def _saving(value: float, baseline: float) -> float:
    return 1 - value / baseline


def _rag_on_judged(dataset: dict, _baseline: Any = None) -> float:
    """All retrieved's accuracy on the questions the judge row answered
    (that row runs on the first questions only)."""
    judged = {q["item_id"] for q in dataset["questions"] if q["row"] == "filter_judge"}
    rag = [q["correct"] for q in dataset["questions"] if q["row"] == "rag" and q["item_id"] in judged]
    return sum(rag) / len(rag)


# Figures computed from a field (and its baseline) rather than read: name -> (value, baseline) -> figure.
DERIVED: dict[str, Callable[[Any, Any], float]] = {"saving": _saving, "rag_on_judged": _rag_on_judged}


def declared(path: Path = DECLARED) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _keys(field: str | list[str]) -> list[str]:
    return field if isinstance(field, list) else field.split(".")


def lookup(document: Any, field: str | list[str]) -> tuple[Any, dict[str, Any]]:
    """The value at ``field`` and the run that measured it: the command and
    date of the innermost object on the way that records them."""
    run = {k: document.get(k) for k in ("command", "date") if isinstance(document, dict) and document.get(k)}
    node = document
    for key in _keys(field):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
            continue
        if not isinstance(node, dict) or key not in node:
            raise Absent(f"no field {'.'.join(_keys(field))!r}")
        node = node[key]
        if isinstance(node, dict) and (node.get("command") or node.get("date")):
            run = {k: node.get(k) or run.get(k) for k in ("command", "date")}
    return node, run


@dataclass(frozen=True)
class Figure:
    label: str
    file: str
    text: str
    baseline: str
    command: str
    date: str


class Results:
    """The result files, each read once; their dates from git when they record none."""

    def __init__(self, directory: Path = RESULTS):
        self.directory = directory
        self._cache: dict[str, Any] = {}

    def load(self, name: str) -> Any:
        if name not in self._cache:
            path = self.directory / name
            if not path.exists():
                raise Absent(f"{name} missing")
            self._cache[name] = json.loads(path.read_text(encoding="utf-8"))
        return self._cache[name]

    def git_date(self, name: str) -> str:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%ad", "--date=short", "--", str(self.directory / name)],
            capture_output=True,
            text=True,
            cwd=self.directory,
        )
        return out.stdout.strip() or "not committed"


def render_value(value: Any, spec: dict[str, Any]) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = value * spec.get("scale", 1)
        if "round" in spec:  # to tens and the like: "about 90"
            value = round(value, spec["round"])
        shown = format(value, spec.get("format", "g"))
        return shown + spec.get("unit", "")
    return str(value)


def figure(results: Results, spec: dict[str, Any]) -> Figure:
    document = results.load(spec["file"])
    value, run = lookup(document, spec["field"])
    if "run" in spec:  # the object that records the command and date, when it is not on the field's path
        run = lookup(document, spec["run"])[1]
    baseline_value = lookup(document, spec["baseline"])[0] if "baseline" in spec else None
    if "derive" in spec:
        value = DERIVED[spec["derive"]](value, baseline_value)
    baseline = ""
    if baseline_value is not None and "derive" not in spec:
        baseline = f"{render_value(baseline_value, spec)} {spec.get('baseline_label', '')}".strip()
    elif "baseline_label" in spec:
        baseline = spec["baseline_label"]
    return Figure(
        label=spec.get("label") or spec["quote"],
        file=spec["file"],
        text=render_value(value, spec),
        baseline=baseline,
        command=(spec.get("command") or run.get("command") or "not recorded").replace("|", "\\|"),
        date=str(run.get("date") or results.git_date(spec["file"]))[:10],
    )


def area_lines(results: Results, area: dict[str, Any], problems: list[str]) -> list[str]:
    lines = [f"## {area['title']}", ""]
    if area.get("note"):
        lines += [" ".join(area["note"].split()), ""]
    rows = []
    for spec in area.get("figures", []):
        try:
            f = figure(results, spec)
        except (Absent, KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            problems.append(f"{area['title']}: {spec.get('label')} ({spec.get('file')}): {error}")
            continue
        rows.append(
            f"| {f.label} | **{f.text}** | {f.baseline} | `{f.file}` | `{f.command.replace('|', '/')}` | {f.date} |"
        )
    if rows:
        lines += ["| figure | now | baseline | result file | command | date |", "|---|---|---|---|---|---|", *rows, ""]
    return lines


def recorded_minutes(results: Results, scenario: dict[str, Any]) -> float | None:
    """How long the scenario's last run took, as bench.run recorded it."""
    try:
        return results.load(scenario["result"])["scenario_runs"][scenario["name"]]["minutes"]
    except (Absent, KeyError, TypeError):
        return None


def scenario_lines(results: Results, scenarios: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## The scenarios (`bench/scenarios.toml`, run by `python -m bench.run`)",
        "",
        "`make bench` runs the headline set (`python -m bench.run --headline`); minutes are the time one",
        "run took on this machine, from its result file or, where marked ~, estimated.",
        "",
        "| scenario | kind | headline | minutes | command | result file |",
        "|---|---|---|---|---|---|",
    ]
    headline_minutes = 0.0
    for s in scenarios:
        recorded = recorded_minutes(results, s)
        took = recorded if recorded is not None else s["minutes"]
        minutes = f"{took}" if s.get("measured") or recorded is not None else f"~{took}"
        headline = "yes" if s.get("headline") else ""
        headline_minutes += took if s.get("headline") else 0
        command = " ".join(s["command"])
        lines.append(f"| {s['name']} | {s['kind']} | {headline} | {minutes} | `{command}` | `{s['result']}` |")
    return lines + ["", f"The headline set: about {headline_minutes:.0f} minutes.", ""]


def study_results(study: dict[str, Any]) -> list[str]:
    result = study.get("result", [])
    return [result] if isinstance(result, str) else result


def study_lines(studies: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Retired studies",
        "",
        "One-off studies whose code (a module, or a mode of one) has left the tree: `git show",
        "COMMIT:bench/MODULE.py` brings it back as it last was, and the result files named stay in",
        "`bench/results/`, the evidence for a setting. A command in the tables above that names a module or",
        "an option no longer in bench/ ran one of these.",
        "",
    ]
    for s in studies:
        code = f"`bench/{s['module']}.py{' ' + s['mode'] if s.get('mode') else ''}`"
        evidence = "".join(f", `{name}`" for name in study_results(s))
        lines.append(
            f"- **{s['title']}** ({code}, {s['commit']}, {s['date']}{evidence}). " + " ".join(s["conclusion"].split())
        )
    return lines + [""]


def build(results: Results | None = None, data: dict[str, Any] | None = None) -> str:
    results = results or Results()
    data = data or declared()
    scenarios = tomllib.loads(SCENARIOS.read_text(encoding="utf-8")).get("scenario", [])
    problems: list[str] = []
    lines = ["# Benchmarks: what is true now", ""] + [" ".join(data["preamble"].split()), ""]
    for area in data.get("area", []):
        lines += area_lines(results, area, problems)
    lines += scenario_lines(results, scenarios) + study_lines(data.get("study", []))
    named = {spec["file"] for area in data.get("area", []) for spec in area.get("figures", [])}
    named |= {name for s in data.get("study", []) for name in study_results(s)}
    named |= {s["result"] for s in scenarios} | set(data.get("kept_unreported", []))
    unknown = sorted(p.name for p in results.directory.glob("*.json") if p.name not in named)
    lines += ["## Not in the report", ""]
    lines += [f"- declared, not found: {p}" for p in problems]
    lines += [f"- result file no entry names (add it to bench/report.toml): `{name}`" for name in unknown]
    if not problems and not unknown:
        lines.append("Every declared figure was found and every result file is named.")
    return "\n".join(lines).rstrip() + "\n"


# --- the README's figures -----------------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def readme_section(readme: str, heading: str) -> str:
    start = readme.index(heading)
    end = readme.find("\n## ", start + len(heading))
    return readme[start : end if end >= 0 else len(readme)]


def readme_checks(results: Results, data: dict[str, Any], readme: str) -> list[str]:
    """What does not hold between the README's measurements section and the
    result files: a declared quote missing from it, a quote whose number
    is not the result file's, or a number in it no quote accounts for."""
    section = " ".join(readme_section(readme, data["readme"]["section"]).split())
    failures, covered = [], " ".join(data["readme"].get("not_figures", []))
    for spec in data["readme"]["figure"]:
        quote = " ".join(spec["quote"].split())
        covered += " " + quote
        if quote not in section:
            failures.append(f"the README no longer says {quote!r}")
            continue
        try:
            shown = figure(results, spec).text
        except (Absent, KeyError) as error:
            failures.append(f"{quote!r}: {error}")
            continue
        if not set(numbers(shown)) <= set(numbers(quote)):
            failures.append(f"{quote!r}: {spec['file']} {spec['field']} gives {shown}")
    left = [n for n in numbers(section) if n not in numbers(covered)]
    failures += [f"README figure {n!r} is matched to no result file (bench/report.toml [readme])" for n in left]
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stdout", action="store_true", help="print the report instead of writing it")
    args = parser.parse_args(argv)
    text = build()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    REPORT.write_text(text, encoding="utf-8")
    print(f"{REPORT} ({text.count(chr(10))} lines)")
    return 0 if text.count("\n") <= MAX_LINES else 1


if __name__ == "__main__":
    sys.exit(main())
