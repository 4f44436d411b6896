"""``chunkrag config show|check``: the effective configuration and where each
value came from; a configuration file's unknown keys and bad values.

The file's rules (names, values, which file) are `chunkrag_core.config_file`'s;
the known variables and the settings' defaults, `chunkrag_core.config_names`'s.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chunkrag_core import config_file, config_names


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    value: str  # masked
    source: str  # "environment", "file:<path>" or "default"
    note: str = ""


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    group = commands.add_parser(
        "config",
        help="the configuration: every effective value and its source, or a file's problems",
        description=(
            "The configuration file is $CHUNKRAG_CONFIG, else ./chunkrag.toml; the environment overrides it "
            "(docs/configuration.md#the-configuration-file)."
        ),
    )
    actions = group.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    show = actions.add_parser(
        "show", help="every variable's effective value and where it came from (default, file:PATH, environment)"
    )
    show.add_argument("--file", type=Path, help="this configuration file instead of $CHUNKRAG_CONFIG/chunkrag.toml")
    show.add_argument("--changed", action="store_true", help="only the values the file or the environment set")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_show)
    check = actions.add_parser(
        "check",
        help="name a file's unknown keys and bad values; exit 1 if there is any",
        description=(
            "With FILE: that file's values alone. Without: the file $CHUNKRAG_CONFIG or ./chunkrag.toml names, "
            "under the environment (the configuration a command would run with)."
        ),
    )
    check.add_argument("file", nargs="?", type=Path)
    check.set_defaults(handler=cmd_check)


def rows(environ: Mapping[str, str], config: config_file.ConfigFile | None) -> list[Row]:
    """One row per variable the code reads (and per key the file sets):
    its effective value, masked, and its source."""
    known = config_names.known_variables()
    defaults = config_names.settings_defaults()
    set_by_file = set(config.entries) if config is not None else set()
    names = {n for n in known if not n.startswith(config_names.LIBRARY_PREFIXES)} | set_by_file
    names |= {n for n in environ if environ[n] and config_names.is_known(n, known)}
    found = []
    for name in sorted(names):
        source = config_file.source_of(name, environ, config)
        if source == "environment":
            value = environ[name]
        elif source != "default":
            value = config.entries[name].value
        else:
            value = defaults.get(name, "")
        note = "" if config_names.is_known(name, known) else "unknown: read nowhere"
        found.append(Row(name, config_file.masked(name, value), source, note))
    return found


def cmd_show(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    path = args.file or config_file.config_path(environ)
    config = config_file.read_config(path) if path is not None else None
    if config is not None:
        config.raise_problems()
    shown = [row for row in rows(environ, config) if not args.changed or row.source != "default"]
    if args.json:
        print(json.dumps([_as_dict(row) for row in shown], indent=2))
        return 0
    print(f"configuration file: {path if path is not None else 'none ($CHUNKRAG_CONFIG unset, no ./chunkrag.toml)'}")
    width = max((len(row.name) for row in shown), default=0)
    for row in shown:
        value = row.value if row.value else "(none)"
        note = f"  [{row.note}]" if row.note else ""
        print(f"{row.name:<{width}}  {value}  ({row.source}){note}")
    return 0


def _as_dict(row: Row) -> dict[str, str]:
    return {"name": row.name, "value": row.value, "source": row.source, "note": row.note}


def problems(environ: Mapping[str, str], config: config_file.ConfigFile | None) -> list[str]:
    """Everything wrong with ``config`` under ``environ``: keys that do not
    map to a name, unknown keys, values the settings or the local services
    refuse (each named by its key in the file, or as an environment
    variable)."""
    found = list(config.problems) if config is not None else []
    if config is not None:
        found += config_file.unknown_keys(config)
    values = config_file.layered(environ, config)

    def describe(name: str) -> str:
        if config_file.source_of(name, environ, config) == "environment":
            return f"{name} (environment)"
        return f"{config.entries[name].key} ({name})" if config is not None else name

    settings_problems = config_file.bad_values(values, describe)
    found += settings_problems
    if not settings_problems:
        found += _gateway_problems(values)
    found += _tracing_problems(values, describe)
    found += _local_service_problems(values)
    return found


def _gateway_problems(values: Mapping[str, str]) -> list[str]:
    """What `chunkrag serve` would refuse at its start beyond the settings'
    own checks, by the gateway's own start check (``check_settings``)."""
    from chunkrag_core.settings import Settings
    from chunkrag_gateway.app import check_settings

    try:
        check_settings(Settings.from_env(values))
    except ValueError as exc:
        return [str(exc)]
    return []


def _tracing_problems(values: Mapping[str, str], describe) -> list[str]:
    """The tracing exporter, checked as the programs that start tracing check it."""
    from chunkrag_core.tracing import EXPORTER_VARIABLE, TracingError, exporter_from_env

    try:
        exporter_from_env(values)
    except TracingError as exc:
        return [f"{describe(EXPORTER_VARIABLE)}: {exc}"]
    return []


def _local_service_problems(values: Mapping[str, str]) -> list[str]:
    """The local services' own variables (ports, heaps, the model server's
    runtime), parsed as `chunkrag services` parses them."""
    from local_services.cli import app_environ
    from local_services.llm_server import LlmSettings
    from local_services.process import LocalServiceError

    try:
        app_environ(values)
        LlmSettings.from_environ(values)
    except LocalServiceError as exc:
        return [str(exc)]
    return []


def cmd_check(args: argparse.Namespace) -> int:
    if args.file is not None:
        environ: dict[str, str] = {}
        path = args.file
    else:
        environ = dict(os.environ)
        path = config_file.config_path(environ)
    config = config_file.read_config(path) if path is not None else None
    found = problems(environ, config)
    where = str(path) if path is not None else "the environment (no configuration file)"
    for problem in found:
        print(f"{where}: {problem}")
    if found:
        print(f"{len(found)} problem(s)")
        return 1
    count = len(config.entries) if config is not None else 0
    print(f"{where}: ok ({count} setting(s) from the file)")
    return 0
