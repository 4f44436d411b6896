"""The configuration file: a TOML file whose keys are environment variables.

The project is configured by environment variables (``Settings.from_env``
and the few modules that read their own, such as the local services' ports).
The file is one more layer under them, mapped mechanically onto the same
names, so every variable, present or future, can be set in it without a table
kept by hand and without a second place that parses or validates values:

- ``[section]`` key ``name`` is ``CHUNKRAG_<SECTION>_<NAME>``: ``[gateway]
  max_candidates = 50`` is ``CHUNKRAG_GATEWAY_MAX_CANDIDATES``; a nested
  section joins its parts (``[es.cluster] port`` is ``CHUNKRAG_ES_CLUSTER_PORT``,
  as is ``[es] cluster_port``);
- a top-level key ``name`` is ``CHUNKRAG_<NAME>`` (``scales = [128, 512]``);
- ``[env]`` holds raw variable names as they are written in the environment,
  for those outside ``CHUNKRAG_`` (``ES_URL``, ``REDIS_URL``, ``OPENAI_API_KEY``)
  and for a ``CHUNKRAG_`` name TOML cannot also hold as a top-level key
  because a section has its name (``CHUNKRAG_INDEX`` beside ``[index] shards``).

Values become the strings the environment would hold (``true``/``false``,
numbers as written, arrays joined with commas), and are then parsed and
validated by the code that reads the variable, as if exported. A variable set
to a non-empty value in the environment overrides the file.

The file is ``$CHUNKRAG_CONFIG`` when set (it must exist; ``none`` reads no
file), else ``chunkrag.toml`` in the working directory when there is one. It
is read by entry points only (the ``chunkrag`` command, `load_settings`),
never at import time, and checked as it is read: `problems` is the one
check of a configuration (`chunkrag config check` adds the gateway's and the
local services' own checks to it, and every other command runs that before
it starts).

This module lies above the settings and the names of the variables
(``config_names``): it reads them, they never read it.

Why not pydantic-settings: its sources fill a pydantic model, and the
project's model is the set of variables the frozen dataclasses of
``settings.py`` (and a few modules of their own) read and validate. Using it
would mean declaring every variable a second time as a pydantic field, the
per-variable table this layer exists to avoid, or rewriting the parsing of
``settings.py``. Reading TOML is ``tomllib`` (standard library); what is
written here is only the name mapping, provenance and the check; what of
a value may be printed is ``redaction``'s.
"""

from __future__ import annotations

import datetime
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from chunkrag_core import config_names, tracing
from chunkrag_core.settings import Settings, SettingsError

# The variable naming the file, and the file used when it is not set.
CONFIG_VARIABLE = "CHUNKRAG_CONFIG"
DEFAULT_FILE_NAME = "chunkrag.toml"
# The table holding raw environment variable names.
RAW_TABLE = "env"

_PART = re.compile(r"^[A-Za-z0-9_]+$")
_RAW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigFileError(SettingsError):
    """The configuration file cannot be read or holds a key that maps to no
    variable name (its path and key named)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One variable the file sets: its value as the environment would hold
    it, and the key as written in the file (``gateway.max_candidates``)."""

    value: str
    key: str


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A configuration file read: the variables it sets and the problems
    found while mapping it (empty when it maps cleanly)."""

    path: Path
    entries: Mapping[str, Entry]
    problems: tuple[str, ...] = ()

    @property
    def values(self) -> dict[str, str]:
        return {name: entry.value for name, entry in self.entries.items()}

    def raise_problems(self) -> None:
        if self.problems:
            raise ConfigFileError(f"{self.path}: " + "; ".join(self.problems))


def config_path(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """The configuration file to read: ``$CHUNKRAG_CONFIG`` (which must
    exist; ``none`` for no file), else ``./chunkrag.toml`` if it exists, else
    None."""
    env = os.environ if environ is None else environ
    named = env.get(CONFIG_VARIABLE, "").strip()
    if named.lower() == "none":
        return None
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigFileError(f"{CONFIG_VARIABLE}={named!r} names no file")
        return path
    default = (cwd or Path.cwd()) / DEFAULT_FILE_NAME
    return default if default.is_file() else None


def read_config(path: Path) -> ConfigFile:
    """The file at ``path`` read and mapped onto variable names; a file that
    is not TOML gives a ConfigFile with that one problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return parse_config(text, Path(path))


def parse_config(text: str, path: Path = Path("<text>")) -> ConfigFile:
    """TOML ``text`` mapped onto variable names (module docstring)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return ConfigFile(path, MappingProxyType({}), (f"not valid TOML: {exc}",))
    entries: dict[str, Entry] = {}
    problems: list[str] = []
    for name, key, value in _flatten(data, problems):
        try:
            text_value = environment_value(value)
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
            continue
        if name == CONFIG_VARIABLE:
            problems.append(f"{key}: {CONFIG_VARIABLE} names the file; it has no effect inside one")
            continue
        if name in entries:
            problems.append(f"{key} and {entries[name].key} both set {name}")
            continue
        entries[name] = Entry(text_value, key)
    return ConfigFile(path, MappingProxyType(entries), tuple(problems))


def _flatten(data: Mapping, problems: list[str]) -> Iterator[tuple[str, str, object]]:
    """(variable name, key as written, TOML value) of every setting in ``data``."""
    for key, value in data.items():
        if key == RAW_TABLE and isinstance(value, dict):
            for name, raw in value.items():
                if not _RAW_NAME.match(name):
                    problems.append(f"{RAW_TABLE}.{name}: not an environment variable name")
                else:
                    yield name, f"{RAW_TABLE}.{name}", raw
            continue
        yield from _section((key,), value, problems)


def _section(parts: tuple[str, ...], value: object, problems: list[str]) -> Iterator[tuple[str, str, object]]:
    key = ".".join(parts)
    if not _PART.match(parts[-1]):
        problems.append(f"{key}: a key is letters, digits and underscores (it becomes part of a variable name)")
        return
    if isinstance(value, dict):
        for child, child_value in value.items():
            yield from _section((*parts, child), child_value, problems)
        return
    yield "CHUNKRAG_" + "_".join(parts).upper(), key, value


def environment_value(value: object) -> str:
    """A TOML value as the string an environment variable would hold; the
    code reading the variable parses and validates it as it does the
    environment's."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, list):
        if any(isinstance(item, (list, dict)) for item in value):
            raise ValueError("an array of strings, numbers or booleans only (it becomes a comma-separated list)")
        return ",".join(environment_value(item) for item in value)
    if isinstance(value, (datetime.date, datetime.time)):
        raise ValueError("a date or time; write it as a string")
    raise ValueError(f"not a string, number, boolean or array ({type(value).__name__})")


def load(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> ConfigFile | None:
    """The configuration file `config_path` finds, read; None when there is
    none. A file that does not map cleanly raises ConfigFileError."""
    path = config_path(environ, cwd)
    if path is None:
        return None
    config = read_config(path)
    config.raise_problems()
    return config


def layered(environ: Mapping[str, str], config: ConfigFile | None) -> dict[str, str]:
    """The environment with the file's variables under it: a variable the
    environment sets to a non-empty value keeps it (an empty one counts as
    unset, as the settings read it)."""
    if config is None:
        return dict(environ)
    return {**environ, **{name: value for name, value in config.values.items() if not environ.get(name)}}


def export_to_environment(environ=None, cwd: Path | None = None) -> ConfigFile | None:
    """At a program's start: the file's variables put into the process
    environment, for those it does not set. The environment is the one
    channel every reader already follows (the settings, the local services'
    ports, the tracing exporter, the calibration file read per query) and
    the one child processes inherit (the workers `chunkrag workers` execs,
    the model server and nodes `chunkrag services up` starts), so each sees
    the file without being told about it. The `chunkrag` command calls it
    once, before any command runs."""
    target = os.environ if environ is None else environ
    config = load(target, cwd)
    if config is not None:
        for name, value in config.values.items():
            if not target.get(name):
                target[name] = value
    return config


def source_of(name: str, environ: Mapping[str, str], config: ConfigFile | None) -> str:
    """Where a variable's effective value comes from: ``environment``,
    ``file:<path>`` or ``default``."""
    if environ.get(name):
        return "environment"
    if config is not None and name in config.entries:
        return f"file:{config.path}"
    return "default"


def unknown_keys(config: ConfigFile, known: frozenset[str] | None = None) -> list[str]:
    """A problem for each key of the file that maps to no variable the code
    reads (`config_names.known_variables`)."""
    return [
        f"{entry.key}: unknown ({name} is read nowhere)"
        for name, entry in config.entries.items()
        if not config_names.is_known(name, known)
    ]


def bad_values(values: Mapping[str, str], describe=lambda name: name) -> list[str]:
    """A problem for each value the settings refuse, named by
    ``describe(name)``; validation is the settings' own (``Settings.from_env``).
    Each variable is tried alone, and one refused alone is tried again with
    the others (``OPENSEARCH_AUTH=sigv4`` needs ``AWS_REGION``); then all
    together, for a conflict between values each valid alone."""
    read = set(config_names.names_settings_asks_for())
    alone: dict[str, str] = {}
    for name, value in values.items():
        if name in read:
            try:
                Settings.from_env({name: value})
            except SettingsError as exc:
                alone[name] = str(exc)
    others = {name: value for name, value in values.items() if name not in alone}
    found = []
    for name, message in alone.items():
        try:
            Settings.from_env({**others, name: values[name]})
        except SettingsError:
            found.append(f"{describe(name)}: {message}")
    if not found:
        try:
            Settings.from_env(dict(values))
        except SettingsError as exc:
            found.append(str(exc))
    return found


def problems(environ: Mapping[str, str], config: ConfigFile | None) -> list[str]:
    """Everything the core can tell is wrong with ``config`` under
    ``environ``: keys that do not map to a name, keys that map to no name
    the code reads, values the settings refuse, a tracing exporter the
    programs that trace would refuse; each value named by its key in the
    file, or as an environment variable. The ``chunkrag`` command adds the
    gateway's and the local services' own checks (`chunkrag_cli.config_command`)."""
    found = list(config.problems) if config is not None else []
    if config is not None:
        found += unknown_keys(config)
    values = layered(environ, config)

    def describe(name: str) -> str:
        if source_of(name, environ, config) == "environment":
            return f"{name} (environment)"
        return f"{config.entries[name].key} ({name})" if config is not None else name

    found += bad_values(values, describe)
    found += _tracing_problems(values, describe)
    return found


def _tracing_problems(values: Mapping[str, str], describe) -> list[str]:
    """The tracing exporter, checked as the programs that start tracing check it."""
    try:
        tracing.exporter_from_env(values)
    except tracing.TracingError as exc:
        return [f"{describe(tracing.EXPORTER_VARIABLE)}: {exc}"]
    return []


def refusal(path: Path | None, found: list[str]) -> ConfigFileError:
    """The error a program stops with when its configuration has ``found``
    problems: the file's path (or the environment), then each problem."""
    where = str(path) if path is not None else "the environment"
    return ConfigFileError(f"{where}: " + "; ".join(found))


def load_settings(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """The settings of the environment over the configuration file
    (``$CHUNKRAG_CONFIG`` or ``./chunkrag.toml``), checked as `problems`
    checks them: what a program that builds its own settings calls (the
    framework adapters). Raises ConfigFileError naming every problem, a key
    that maps to no variable the code reads included."""
    env = os.environ if environ is None else environ
    path = config_path(env, cwd)
    config = read_config(path) if path is not None else None
    found = problems(env, config)
    if found:
        raise refusal(path, found)
    return Settings.from_env(layered(env, config))
