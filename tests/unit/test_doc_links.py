"""Every relative link in README.md and docs/*.md points to a file or folder
that exists, and an #anchor into one of those pages names one of its
headings as GitHub spells it."""

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


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation
    but hyphens and underscores dropped, spaces as hyphens, a repeat numbered."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", FENCE.sub("", page.read_text(encoding="utf-8")), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_anchors_are_spelled_as_github_spells_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## The open corpus: `--open-corpus`\n\n```\n# not a heading\n```\n\n## Title\n")
    assert heading_anchors(page) == {"title", "the-open-corpus---open-corpus", "title-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_anchors_into_the_pages_name_a_heading(page):
    # Only anchors into these pages: bench/REPORT.md is written by bench/report.py; links into it are not checked.
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if anchor and linked in {p.resolve() for p in PAGES} and anchor not in heading_anchors(linked):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing headings: {broken}"
