"""Which variables the code reads, and the settings model's defaults for them,
both derived from the code rather than listed by hand.

The code reads a variable in one of two ways, and both are collected, by the
same rule as ``tests/unit/test_configuration_docs.py`` (which checks that
``docs/configuration.md`` documents each):

- by name, as a whole string literal (``env.get("REDIS_URL")``): a regex over
  the project's Python files (its installed packages; in a source checkout,
  every package beside this one and the test support that reads variables);
- by prefix, in ``Settings.from_env``, which builds ``CHUNKRAG_GATEWAY_<FIELD>``
  and the like from dataclass fields: the names it asks its environment for,
  recorded.

`config check` calls a key that maps to none of these unknown.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from chunkrag_core.settings import Settings

DISTRIBUTION = "chunkrag-es"
PREFIXES = ("CHUNKRAG", "ES", "OPENSEARCH", "AWS", "OPENAI", "REDIS", "CO", "SEARCH", "MALLOC", "XDG", "HF")
# A whole string literal that is a variable name: "CHUNKRAG_HOME", not
# "CHUNKRAG_GATEWAY_" (an overlay prefix) nor "OPENSEARCH_AUTH=sigv4 ..." (a message).
NAME_LITERAL = re.compile(r"""(?<![\w])["'](?P<name>(?:%s)_[A-Z0-9_]*[A-Z0-9])["']""" % "|".join(PREFIXES))
# Literals that are written for a child process, not read.
WRITTEN_NOT_READ = frozenset({"ES_PATH_CONF", "OPENSEARCH_PATH_CONF"})
# Variables of the libraries the project uses, read by them and not by its
# own code: botocore's credential chain for sigv4 (AWS_ACCESS_KEY_ID,
# AWS_PROFILE...), huggingface_hub's (HF_HUB_OFFLINE), OpenTelemetry's
# exporters' (OTEL_EXPORTER_OTLP_ENDPOINT...). Any name under these prefixes
# is known: each library reads more of them than the project could list.
LIBRARY_PREFIXES = ("AWS_", "HF_", "OTEL_")
# Beside the packages in a source checkout: test support that reads variables.
CHECKOUT_EXTRAS = ("tests/support", "tests/integration", "tests/conftest.py")


class RecordingEnv(Mapping[str, str]):
    """An environment that remembers every name it was asked for, in order."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.asked: dict[str, None] = {}

    def __getitem__(self, name: str) -> str:
        self.asked[name] = None
        return self.values[name]

    def get(self, name: str, default=None):
        self.asked[name] = None
        return self.values.get(name, default)

    def __contains__(self, name: object) -> bool:
        self.asked[str(name)] = None
        return name in self.values

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def names_settings_asks_for() -> list[str]:
    """Every name ``Settings.from_env`` asks for, in the order asked."""
    asked: dict[str, None] = {}
    # Some names are read only on a branch (the OpenAI embedder's base URL and key).
    for values in ({}, {"CHUNKRAG_EMBED_PROVIDER": "openai"}):
        env = RecordingEnv(values)
        Settings.from_env(env)
        asked |= env.asked
    return list(asked)


def source_files(package_root: Path | None = None) -> list[Path]:
    """The project's Python files: in a source checkout (``pyproject.toml``
    beside the packages) every package there and the test support; in an
    installed package, the distribution's top-level packages."""
    root = package_root or Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file():
        packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file() and p.name != "tests")
        entries = [*packages, *CHECKOUT_EXTRAS]
    else:
        distributions = importlib.metadata.packages_distributions()
        entries = sorted(name for name, owners in distributions.items() if DISTRIBUTION in owners)
    files: list[Path] = []
    for entry in entries:
        path = root / entry
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(sorted(path.rglob("*.py")))
    return files


def names_in_literals(files: list[Path]) -> set[str]:
    return {m["name"] for path in files for m in NAME_LITERAL.finditer(path.read_text(encoding="utf-8"))} - set(
        WRITTEN_NOT_READ
    )


@functools.cache
def known_variables() -> frozenset[str]:
    """Every variable the code reads (``is_known`` also accepts the names
    of the libraries' own, ``LIBRARY_PREFIXES``)."""
    return frozenset(names_in_literals(source_files()) | set(names_settings_asks_for()))


def is_known(name: str, known: frozenset[str] | None = None) -> bool:
    return name in (known_variables() if known is None else known) or name.startswith(LIBRARY_PREFIXES)


def settings_defaults() -> dict[str, str]:
    """The settings model's default for each variable it maps a field to, as
    the environment would write it. Derived from the declaration: a field of
    ``Settings`` is ``<FIELD>`` or ``CHUNKRAG_<FIELD>`` when ``from_env`` asks
    for that name; a section (a dataclass field such as ``gateway``) has the
    prefix under which ``from_env`` asks for most of its fields
    (``CHUNKRAG_GATEWAY_``). A variable read elsewhere has no entry."""
    asked = names_settings_asks_for()
    base = Settings()
    defaults: dict[str, str] = {}
    for field in dataclasses.fields(Settings):
        if not field.init:
            continue
        value = getattr(base, field.name)
        if dataclasses.is_dataclass(value):
            prefix = _section_prefix(value, asked)
            if prefix:
                for inner in dataclasses.fields(value):
                    if prefix + inner.name.upper() in asked:
                        defaults[prefix + inner.name.upper()] = environment_text(getattr(value, inner.name))
            continue
        for name in (field.name.upper(), "CHUNKRAG_" + field.name.upper()):
            if name in asked:
                defaults[name] = environment_text(value)
    return defaults


def _section_prefix(section, asked: list[str]) -> str | None:
    """The prefix ``P`` for which ``P<FIELD>`` was asked for the most of
    ``section``'s fields (at least half of them); between two such (the
    embedder's and the reranker's share four field names), the one with the
    fewest names asked that are not the section's fields."""
    names = {f.name.upper() for f in dataclasses.fields(section)}
    prefixes = {asked_name[: -len(name)] for asked_name in asked for name in names if asked_name.endswith("_" + name)}
    best: tuple[int, int, str] | None = None
    for prefix in sorted(prefixes):
        under = {asked_name[len(prefix) :] for asked_name in asked if asked_name.startswith(prefix)}
        score = (len(under & names), -len(under - names), prefix)
        if best is None or score[:2] > best[:2]:
            best = score
    return best[2] if best is not None and 2 * best[0] >= len(names) else None


def environment_text(value: object) -> str:
    """A setting's value as an environment variable would write it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)
