"""The configuration's modules read one way (the file over the names of the
variables, over the settings, over the engines' profiles, over AWS signing,
over the settings' error and the redaction): the import-linter contract in
pyproject.toml checks every import, lazy ones included; here each module is
imported first in a fresh interpreter, and what sits below is seen not to
load what sits above."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Top to bottom, as the contract lists them.
LAYERS = (
    "chunkrag_core.config_file",
    "chunkrag_core.config_names",
    "chunkrag_core.settings",
    "chunkrag_core.engines.profile",
    "chunkrag_core.engines.aws_signing",
    "chunkrag_core.settings_error",
    "chunkrag_core.redaction",
)
# After importing any one of them first: the whole configuration works.
USE = (
    "from chunkrag_core import config_file; from chunkrag_core.settings import Settings; "
    "from chunkrag_core.engines.aws_signing import opensearch_sigv4; "
    "s = config_file.load_settings({'CHUNKRAG_CONFIG': 'none'}); "
    "assert s == Settings() and opensearch_sigv4(s) is None and s.search_url == 'http://127.0.0.1:9200'"
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


@functools.cache
def _loaded_by_the_package() -> frozenset[str]:
    """The layers ``import chunkrag_core`` loads (its init reads the settings)."""
    ran = _run(f"import sys, chunkrag_core; print([m for m in {LAYERS!r} if m in sys.modules])")
    assert ran.returncode == 0, ran.stderr
    return frozenset(ast.literal_eval(ran.stdout.strip()))


def test_the_package_loads_the_settings_and_never_the_file():
    loaded = _loaded_by_the_package()
    assert "chunkrag_core.settings" in loaded
    assert not loaded & {"chunkrag_core.config_file", "chunkrag_core.config_names"}, loaded


@pytest.mark.parametrize("first", LAYERS)
def test_each_module_imports_first_and_loads_nothing_above_it(first):
    # What the package's init loads anyway is not told apart by importing first.
    above = tuple(name for name in LAYERS[: LAYERS.index(first)] if name not in _loaded_by_the_package())
    code = f"import sys, {first}; loaded = [m for m in {above!r} if m in sys.modules]; print(loaded); {USE}"
    ran = _run(code)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]", (first, ran.stdout)


def test_the_gateways_start_check_is_read_without_the_web_stack():
    """Every command runs the gateway's start check before it starts
    (`chunkrag_cli.config_command.check_before_running`): it does not load
    the gateway's app, FastAPI or the filter."""
    code = (
        "import sys; from chunkrag_gateway.start_check import check_settings; "
        "from chunkrag_core.settings import Settings; check_settings(Settings()); "
        "print([m for m in ('fastapi', 'starlette', 'chunkrag_gateway.app', 'chunkrag_filter') if m in sys.modules])"
    )
    ran = _run(code)
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", (ran.stdout, ran.stderr)
