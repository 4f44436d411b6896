"""docs/configuration.md documents every environment variable the code reads,
and nothing the code does not read.

The code reads variables in two ways, and both are collected:

- by name, as a whole string literal (``env.get("REDIS_URL")``,
  ``PORT_VARIABLE = "CHUNKRAG_ES_PORT"``, a tuple of names): a regex over the
  project's Python files, test doubles in ``tests/unit`` excepted (they set
  names, some invalid on purpose);
- by prefix, in ``chunkrag_core/settings.py``'s ``_overlay``, which builds
  ``CHUNKRAG_GATEWAY_<FIELD>`` and the like from dataclass fields: the names
  ``Settings.from_env`` asks its environment for, recorded.

When this fails after a setting was added or renamed, add or fix its row in
docs/configuration.md (one variable per row, the name in backticks in the
first column).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from chunkrag_core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
# Every top-level package of the project (a new one is scanned without being listed here).
PACKAGES = tuple(sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"))
SCANNED = (
    *PACKAGES,
    "tests/support",
    "tests/integration",
    "tests/conftest.py",
)
PREFIXES = ("CHUNKRAG", "ES", "OPENSEARCH", "AWS", "OPENAI", "REDIS", "CO", "SEARCH", "MALLOC", "XDG", "HF")
# A whole string literal that is a variable name: "CHUNKRAG_HOME", not
# "CHUNKRAG_GATEWAY_" (an overlay prefix) nor "OPENSEARCH_AUTH=sigv4 ..." (a message).
NAME_LITERAL = re.compile(r"""(?<![\w])["'](?P<name>(?:%s)_[A-Z0-9_]*[A-Z0-9])["']""" % "|".join(PREFIXES))
DOCUMENTED_ROW = re.compile(r"^\|\s*`(?P<name>[A-Z][A-Z0-9_]*[A-Z0-9])`\s*\|", re.MULTILINE)

# Names that appear as literals but are written, not read: the environment
# local_services gives the Elasticsearch and OpenSearch scripts.
WRITTEN_NOT_READ = {"ES_PATH_CONF", "OPENSEARCH_PATH_CONF"}

# Documented because they change what the project does, but read by a
# library or by make, never by the project's own code.
EXTERNAL = {
    # botocore's default credential chain, for OPENSEARCH_AUTH=sigv4
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    # huggingface_hub; the Makefile sets it so nothing reaches a model hub
    "HF_HUB_OFFLINE",
}


class RecordingEnv(Mapping[str, str]):
    """An environment that remembers every name it was asked for."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        return self.values[name]

    def get(self, name: str, default=None):
        self.asked.add(name)
        return self.values.get(name, default)

    def __contains__(self, name: object) -> bool:
        self.asked.add(str(name))
        return name in self.values

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def python_files() -> Iterator[Path]:
    for entry in SCANNED:
        path = ROOT / entry
        yield from [path] if path.is_file() else sorted(path.rglob("*.py"))


def names_in_literals() -> set[str]:
    return {
        m["name"] for path in python_files() for m in NAME_LITERAL.finditer(path.read_text(encoding="utf-8"))
    } - WRITTEN_NOT_READ


def names_settings_asks_for() -> set[str]:
    asked = set()
    # Some names are read only on a branch (the OpenAI embedder's base URL and key).
    for values in ({}, {"CHUNKRAG_EMBED_PROVIDER": "openai"}):
        env = RecordingEnv(values)
        Settings.from_env(env)
        asked |= env.asked
    return asked


def names_read() -> set[str]:
    return names_in_literals() | names_settings_asks_for()


def names_documented() -> set[str]:
    return set(DOCUMENTED_ROW.findall(REFERENCE.read_text(encoding="utf-8")))


def test_the_scan_covers_every_package():
    assert {"chunkrag_core", "ingest_pipeline", "chunkrag_filter", "workers", "search_extension"} <= set(PACKAGES)
    assert {"chunkrag_eval", "local_services", "chunkrag_cli", "bench"} <= set(PACKAGES)


def test_the_scan_finds_both_kinds_of_read():
    read = names_read()
    assert {"CHUNKRAG_HOME", "REDIS_URL", "CHUNKRAG_LLM_THREADS", "MALLOC_ARENA_MAX"} <= read  # literals
    assert {"CHUNKRAG_GATEWAY_PORT", "CHUNKRAG_WORKER_CACHE_TTL_S", "CHUNKRAG_VECTOR_M"} <= read  # overlay fields
    assert "CHUNKRAG_GATEWAY_" not in read and "ES_PATH_CONF" not in read


def test_every_variable_the_code_reads_is_documented():
    missing = sorted(names_read() - names_documented())
    assert not missing, f"read by the code but not in docs/configuration.md: {missing}"


def test_every_documented_variable_is_read():
    stale = sorted(names_documented() - names_read() - EXTERNAL)
    assert not stale, f"in docs/configuration.md but read nowhere (renamed or removed?): {stale}"


def test_external_variables_are_documented_and_not_read_by_the_project():
    assert EXTERNAL <= names_documented()
    assert not EXTERNAL & names_read(), "now read by the project: move it out of EXTERNAL"
