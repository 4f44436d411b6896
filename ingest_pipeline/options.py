"""The options of `chunkrag ingest`, declared once.

Each option names the setting it overrides (a field of ``Settings``' chunking
or workers section) and the environment variable that sets the same field;
:func:`add_arguments` makes the command's flags from the declaration,
:func:`apply` turns the flags given into settings, and :func:`reference`
writes the table in docs/ingest.md. Values are validated once, by the
settings' own records (``ChunkingSettings.__post_init__``), whether they come
from a flag, the environment or the configuration file. The defaults shown
are the settings' own, read here rather than written twice.

Run ``python -m ingest_pipeline.options`` to print the table.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from chunkrag_core.settings import Settings, SettingsError

# ``IngestOption.value`` of a flag that takes a value (rather than setting one).
TAKES_VALUE = object()


@dataclass(frozen=True, slots=True)
class IngestOption:
    """One flag of `chunkrag ingest`: it sets ``section.setting`` (a field of
    `Settings`), as ``variable`` does. A flag that takes a value has ``kind``
    (and ``choices`` when they are few); a store-true flag sets ``value``.
    ``also`` sets other fields of the same section with it."""

    flag: str
    section: str
    setting: str
    variable: str
    help: str
    kind: type = str
    choices: tuple[str, ...] | None = None
    value: Any = TAKES_VALUE
    also: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def takes_value(self) -> bool:
        return self.value is TAKES_VALUE

    def default(self) -> Any:
        return getattr(getattr(Settings(), self.section), self.setting)


INGEST_OPTIONS: tuple[IngestOption, ...] = (
    IngestOption(
        "--similarity-threshold",
        "chunking",
        "similarity_threshold",
        "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD",
        "new chunk where consecutive-sentence cosine drops below this (θ; also CHUNKRAG_CHUNK_BREAKPOINT=threshold)",
        kind=float,
        also=MappingProxyType({"breakpoint": "threshold"}),
    ),
    IngestOption(
        "--max-chars", "chunking", "max_chars", "CHUNKRAG_CHUNK_MAX_CHARS", "longest chunk in characters", kind=int
    ),
    IngestOption(
        "--percentile",
        "chunking",
        "breakpoint_percentile",
        "CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE",
        "break where the distance between consecutive sentences is above this percentile of the document's own"
        " instead of below --similarity-threshold (also CHUNKRAG_CHUNK_BREAKPOINT=percentile)",
        kind=float,
        also=MappingProxyType({"breakpoint": "percentile"}),
    ),
    IngestOption(
        "--min-chars",
        "chunking",
        "min_chars",
        "CHUNKRAG_CHUNK_MIN_CHARS",
        "a chunk shorter than this is not closed at a similarity drop",
        kind=int,
    ),
    IngestOption(
        "--headers",
        "chunking",
        "headers",
        "CHUNKRAG_CHUNK_HEADERS",
        "contextual chunk headers",
        choices=("title+section", "title", "section", "none"),
    ),
    IngestOption(
        "--scales",
        "chunking",
        "scales",
        "CHUNKRAG_SCALES",
        "multi-scale ensembling: also index each document at these chunk sizes in tokens, e.g. 128,512,2000 "
        "('default' for those, 'off' for none)",
    ),
    IngestOption(
        "--llm-titles",
        "chunking",
        "llm_titles",
        "CHUNKRAG_CHUNK_LLM_TITLES",
        "the chat model writes a title for each document that has none (one call per such document; cached)",
        value=True,
    ),
    IngestOption(
        "--summaries",
        "chunking",
        "summaries",
        "CHUNKRAG_CHUNK_SUMMARIES",
        "the chat model writes a short summary of each document into its chunks' headers "
        "(one call per document; cached)",
        value=True,
    ),
    IngestOption(
        "--semantic-sections",
        "chunking",
        "sectioning",
        "CHUNKRAG_CHUNK_SECTIONING",
        "the chat model names the sections of each document without headings (one call per ~8,000 characters; cached)",
        value="llm",
    ),
    IngestOption(
        "--workers",
        "workers",
        "ingest",
        "CHUNKRAG_WORKER_INGEST",
        "send batches of documents to the Celery workers (`chunkrag workers`, broker $REDIS_URL), which chunk, "
        "embed and write them, instead of this process",
        value=True,
    ),
)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def add_arguments(parser: argparse.ArgumentParser, options: tuple[IngestOption, ...] = INGEST_OPTIONS) -> None:
    """The flags of ``options``, each with its help, its default and its variable."""
    for option in options:
        where = f"default: ${option.variable}, else {_shown(option.default())}"
        if option.takes_value:
            parser.add_argument(
                option.flag,
                dest=option.dest,
                type=option.kind,
                choices=option.choices,
                help=f"{option.help} ({where})",
            )
        else:
            parser.add_argument(option.flag, dest=option.dest, action="store_true", help=f"{option.help} ({where})")


def apply(args: argparse.Namespace, settings: Settings, options: tuple[IngestOption, ...] = INGEST_OPTIONS) -> Settings:
    """``settings`` with the options the flags in ``args`` set (an absent or
    unset flag leaves its setting as the environment made it); the section's
    record validates the result."""
    changes: dict[str, dict[str, Any]] = {}
    implied: dict[tuple[str, str], tuple[Any, str]] = {}  # (section, setting) -> (value, the flag implying it)
    for option in options:
        given = getattr(args, option.dest, None)
        if given is None or given is False:
            continue
        section = changes.setdefault(option.section, {})
        section[option.setting] = given if option.takes_value else option.value
        for setting, value in option.also.items():
            earlier = implied.setdefault((option.section, setting), (value, option.flag))
            if earlier[0] != value:
                raise SettingsError(f"{earlier[1]} and {option.flag} set {setting} apart: give one of them")
        section.update(option.also)
    return dataclasses.replace(
        settings,
        **{name: dataclasses.replace(getattr(settings, name), **values) for name, values in changes.items()},
    )


def reference(options: tuple[IngestOption, ...] = INGEST_OPTIONS) -> str:
    """A Markdown table of the ingest flags, from the declaration, for the docs."""
    rows = ["| flag | value | default | variable | what it does |", "|---|---|---|---|---|"]
    for option in options:
        if not option.takes_value:
            value = "(none)"
        elif option.choices:
            value = " or ".join(f"`{choice}`" for choice in option.choices)
        else:
            value = {int: "an integer", float: "a number"}.get(option.kind, "text")
        rows.append(
            f"| `{option.flag}` | {value} | `{_shown(option.default())}` | `{option.variable}` | {option.help} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
