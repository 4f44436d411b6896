"""Figures the docs quote are the ones the result files hold: each
``[[doc]]`` entry of bench/report.toml names a page, a section and quotes
(the README's measurements have their own, stricter check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import Results, declared, figure, numbers, readme_section

ROOT = Path(__file__).resolve().parents[2]
DOCS = declared().get("doc", [])


def doc_failures(results: Results, doc: dict, text: str) -> list[str]:
    section = " ".join(readme_section(text, doc["section"]).split())
    failures = []
    for spec in doc["figure"]:
        quote = " ".join(spec["quote"].split())
        if quote not in section:
            failures.append(f"{doc['path']} no longer says {quote!r}")
            continue
        shown = figure(results, spec).text
        if not set(numbers(shown)) <= set(numbers(quote)):
            failures.append(f"{doc['path']} {quote!r}: {spec['file']} {spec['field']} gives {shown}")
    return failures


@pytest.mark.parametrize("doc", DOCS, ids=[d["path"] for d in DOCS])
def test_every_quoted_figure_matches_its_result_file(doc):
    assert doc_failures(Results(), doc, (ROOT / doc["path"]).read_text(encoding="utf-8")) == []


def test_a_changed_figure_is_caught():
    doc = next(d for d in DOCS if d["path"] == "docs/filter.md")
    text = (
        (ROOT / doc["path"])
        .read_text(encoding="utf-8")
        .replace("| NQ-open, 500 | 2 | 32 |", "| NQ-open, 500 | 1 | 32 |")
    )
    assert any("NQ-open" in f for f in doc_failures(Results(), doc, text))
