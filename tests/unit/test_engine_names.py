"""Engine differences live in ``chunkrag_core/engines`` only: no product
module elsewhere branches on an engine's name. It asks the engine's profile
(``engines/profile.py``) or its backend instead.

Read from the source (not imported): comparisons with an engine's name
(``== "opensearch"``, ``in ("elasticsearch", ...)``), any comparison of
``search_backend``, dictionaries keyed by engine names, ``case "opensearch":``.
The local services included: they find each distribution's node through
``local_services/distributions.py``, keyed by the name it runs under."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from chunkrag_core.engines.profile import PROFILES, SEARCH_BACKENDS

ROOT = Path(__file__).resolve().parents[2]
# Where engine names are the subject itself.
ALLOWED = (Path("chunkrag_core", "engines"),)
NAMES = frozenset(SEARCH_BACKENDS)


def product_packages() -> list[Path]:
    """The packages the project installs (pyproject's ``packages.find``)."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = found["tool"]["setuptools"]["packages"]["find"]["include"]
    return [Path(pattern.rstrip("*")) for pattern in patterns]


def product_modules() -> list[Path]:
    modules = []
    for package in product_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if not any(relative.is_relative_to(allowed) for allowed in ALLOWED):
                modules.append(relative)
    return modules


def _names_an_engine(node: ast.AST) -> bool:
    """A string constant that is an engine's name (any case), or a tuple,
    list or set holding one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower() in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_engine(element) for element in node.elts)
    return False


def _is_search_backend(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "search_backend") or (
        isinstance(node, ast.Name) and node.id == "search_backend"
    )


def engine_branches(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` tells engines apart by name."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_an_engine(operand) for operand in operands):
                found.append((node.lineno, "compares with an engine's name"))
            elif any(_is_search_backend(operand) for operand in operands):
                found.append((node.lineno, "compares search_backend"))
        elif isinstance(node, ast.Dict):
            if any(key is not None and _names_an_engine(key) for key in node.keys):
                found.append((node.lineno, "a dictionary keyed by engine names"))
        elif isinstance(node, ast.MatchValue) and _names_an_engine(node.value):
            found.append((node.lineno, "a case of an engine's name"))
    return found


def test_no_product_module_outside_the_engines_branches_on_an_engine_name():
    modules = product_modules()
    assert Path("chunkrag_gateway", "passthrough.py") in modules and Path("chunkrag_core", "settings.py") in modules
    found = [
        f"{path}:{line}: {what}"
        for path in modules
        for line, what in engine_branches((ROOT / path).read_text(encoding="utf-8"), str(path))
    ]
    assert not found, "ask chunkrag_core.engines.profile instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source, line",
    [
        ('if settings.search_backend == "opensearch": pass', 1),
        ('x = a if backend != "elasticsearch" else b', 1),
        ('ok = engine in ("elasticsearch", "OpenSearch")', 1),
        ("same = settings.search_backend == OTHER", 1),
        ('PATHS = {"elasticsearch": "/_security/_authenticate", "opensearch": "/authinfo"}', 1),
        ('match engine:\n    case "opensearch":\n        pass', 2),
    ],
)
def test_each_way_of_branching_on_a_name_is_found(source, line):
    assert [found for found, _ in engine_branches(source)] == [line]


@pytest.mark.parametrize(
    "source",
    [
        'log.warning("OpenSearch is not reachable")',
        'product = "Elasticsearch"',
        "if engine.derived_keys: pass",
        'if auth == "sigv4": pass',
        'headers = {"x-elastic-product": "Elasticsearch"}',
    ],
)
def test_prose_and_profile_questions_are_not_branches(source):
    assert engine_branches(source) == []


def test_the_declared_engines_are_the_profiles():
    assert SEARCH_BACKENDS == tuple(profile.name for profile in PROFILES)
    assert len(set(SEARCH_BACKENDS)) == len(SEARCH_BACKENDS)
