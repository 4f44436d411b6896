"""Every relative link in README.md and docs/*.md points to a file or folder
that exists (the part before any #anchor; anchors are not checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Inline links and images: [text](target) / ![alt](target), up to a space or ")".
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [
        m["target"]
        for m in LINK.finditer(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", m["target"]) and not m["target"].startswith("#")
    ]


def test_the_pages_have_links():
    assert sum(len(relative_links(page)) for page in PAGES) > 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"
