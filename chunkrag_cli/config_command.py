"""``chunkrag config show|check``: the effective configuration and where each
value came from; a configuration file's unknown keys and bad values.

The file's rules (names, values, which file) are `chunkrag_core.config_file`'s;
the known variables and the settings' defaults, `chunkrag_core.config_names`'s;
what of a value may be printed, `chunkrag_core.redaction`'s. `problems` is
the check: `config check` prints it, and every other command runs it before
it starts (`check_before_running`), `serve` included.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chunkrag_core import config_file, config_names
from chunkrag_core.redaction import redacted
from chunkrag_core.settings import VARIABLE_CHOICES


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
        found.append(Row(name, redacted(name, value, VARIABLE_CHOICES.get(name, ())), source, note))
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
    """Everything wrong with ``config`` under ``environ``: the core's check
    (`config_file.problems`: keys that do not map, unknown keys, values the
    settings or the tracing refuse), then what `chunkrag serve` would refuse
    at its start and what the local services refuse."""
    values = config_file.layered(environ, config)
    return config_file.problems(environ, config) + _gateway_problems(values) + _local_service_problems(values)


def check_before_running(environ=None) -> config_file.ConfigFile | None:
    """What every command but ``config`` runs before anything else: the
    configuration `config check` would check (the file ``$CHUNKRAG_CONFIG``
    or ./chunkrag.toml names, under the environment), checked by the same
    `problems`; raises ConfigFileError naming every problem. Then the
    file's variables go into the environment for those it does not set:
    every reader (and every process a command starts) finds them there."""
    target = os.environ if environ is None else environ
    path = config_file.config_path(target)
    config = config_file.read_config(path) if path is not None else None
    found = problems(dict(target), config)
    if found:
        raise config_file.refusal(path, found)
    return config_file.export_to_environment(target)


def _gateway_problems(values: Mapping[str, str]) -> list[str]:
    """What `chunkrag serve` would refuse at its start beyond the settings'
    own checks, by the gateway's own start check (``check_settings``);
    nothing when the settings themselves are refused (named already)."""
    from chunkrag_core.settings import Settings, SettingsError
    from chunkrag_gateway.start_check import check_settings

    try:
        settings = Settings.from_env(values)
    except SettingsError:
        return []
    try:
        check_settings(settings)
    except ValueError as exc:
        return [str(exc)]
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
