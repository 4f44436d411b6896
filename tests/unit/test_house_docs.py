"""The README stays short and shows how the parts fit; no page or source file
speaks of the project's internal history (work sessions, tracker numbers),
which means nothing to a reader: findings are told by date and command."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
# "stop 12", "session 3", "issue 7": references a reader cannot follow.
HISTORY = re.compile(r"\b(?:stop|session|issue) [0-9]+\b", re.IGNORECASE)


# Installed or generated, not written by the project.
SKIPPED = {".git", ".venv", ".venv-train", ".cache", ".chunkrag", "tests", "node_modules", "build", "dist"}


def project_files(*suffixes: str) -> list[Path]:
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED and not name.endswith(".egg-info")]
        found += [Path(folder, name) for name in names if name.endswith(suffixes)]
    return found


def test_the_readme_is_short_and_draws_the_flow_with_its_packages():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    diagram = next(block for block in text.split("```")[1::2] if "ingest_pipeline/" in block)
    for package in ("ingest_pipeline/", "chunkrag_gateway/", "workers/", "chunkrag_filter/", "answer"):
        assert package in diagram, package


def test_no_page_or_source_file_speaks_of_internal_history():
    files = project_files(".md", ".py")
    assert any(path.name == "REPORT.md" for path in files)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, "\n".join(found)
