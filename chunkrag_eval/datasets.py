"""Reading evaluation files in the formats of ``shared/eval``: PopQA, PubHealth
(both with CRAG's context pools) and FActScore bio (Self-RAG's passages);
and NQ-open with its gold passages (:func:`nq_gold`).

Every record becomes an :class:`EvalItem`; a record that cannot be used is
reported with its line number, and reading goes on.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

FORMATS = ("popqa", "pubhealth", "bio")
POOLS = ("ambiguous", "correct", "incorrect")
# CRAG joins its knowledge pieces with this marker; each piece is a paragraph.
_PIECE_SEPARATOR = " [sep] "


class EvalDataError(ValueError):
    """An evaluation file that cannot be read as the requested format."""


@dataclass(frozen=True, slots=True)
class EvalItem:
    item_id: str
    question: str
    pool: str  # the text whose chunks are candidates for this question
    answers: tuple[str, ...] = ()  # PopQA: any one, case-insensitive substring
    label: str | None = None  # PubHealth: "true" / "false"
    # PopQA: whom or what the question is about (s_wiki_title without its
    # parenthesis): a question the index cannot answer names it nowhere.
    subject: str | None = None


@dataclass(frozen=True, slots=True)
class BadRecord:
    line: int
    reason: str


def detect_format(record: dict) -> str:
    if "passages" in record and "topic" in record:
        return "bio"
    if "claim" in record and "label" in record:
        return "pubhealth"
    if "question" in record and "answers" in record:
        return "popqa"
    raise EvalDataError(
        f"cannot tell the format from the fields {sorted(record)}; pass --format ({', '.join(FORMATS)})"
    )


def pool_text(raw: str) -> str:
    """CRAG's pool with each knowledge piece as its own paragraph, so no chunk
    spans two sources."""
    return "\n\n".join(piece.strip() for piece in raw.split(_PIECE_SEPARATOR) if piece.strip())


def subject_of(title: str | None) -> str | None:
    """A Wikipedia title without its disambiguating parenthesis:
    "Henry Feilden (Conservative politician)" -> "Henry Feilden"."""
    if not title:
        return None
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip() or None


def item_from_record(record: dict, fmt: str, pool: str = "ambiguous") -> EvalItem:
    if fmt == "popqa":
        return EvalItem(
            str(record.get("question_id", record.get("id"))),
            record["question"],
            pool_text(record["contexts"][pool]),
            answers=tuple(record["answers"]),
            subject=subject_of(record.get("s_wiki_title")),
        )
    if fmt == "pubhealth":
        label = str(record["label"]).strip().lower()
        if label not in ("true", "false"):
            raise KeyError(f"label {record['label']!r} is neither true nor false")
        return EvalItem(str(record["id"]), record["claim"], pool_text(record["contexts"][pool]), label=label)
    if fmt == "bio":
        passages = "\n\n".join(f"{p['title']}: {p['text']}".strip() for p in record["passages"])
        return EvalItem(str(record["id"]), record["question"], passages)
    raise EvalDataError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def read_items(
    path: str | Path, fmt: str = "auto", pool: str = "ambiguous", limit: int | None = None
) -> tuple[str, list[EvalItem], list[BadRecord]]:
    """The items of ``path`` (JSON lines) in file order, the format used, and
    the records that could not be used."""
    if pool not in POOLS:
        raise EvalDataError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}")
    items: list[EvalItem] = []
    bad: list[BadRecord] = []
    for line_number, record in _records(Path(path), bad):
        if fmt == "auto":
            fmt = detect_format(record)
        try:
            item = item_from_record(record, fmt, pool)
        except (KeyError, TypeError, AttributeError) as exc:
            bad.append(BadRecord(line_number, f"missing or malformed field: {exc}"))
            continue
        if not item.question.strip() or not item.pool.strip():
            bad.append(BadRecord(line_number, "empty question or empty context pool"))
            continue
        items.append(item)
        if limit is not None and len(items) >= limit:
            break
    if fmt == "auto":
        raise EvalDataError(f"{path} holds no usable record")
    return fmt, items, bad


def _records(path: Path, bad: list[BadRecord]) -> Iterator[tuple[int, dict]]:
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise EvalDataError(f"cannot read {path}: {exc.strerror}") from exc
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                bad.append(BadRecord(number, f"not JSON: {exc.msg}"))
                continue
            if not isinstance(record, dict):
                bad.append(BadRecord(number, "not a JSON object"))
                continue
            yield number, record


@dataclass(frozen=True, slots=True)
class NqRecord:
    """An NQ-open question with its gold passage. ``doc_id`` names the
    passage's text by the first record that has it ("nq-<number>"): several
    questions share a passage, and an index holds each text once."""

    number: int  # the record's line in the file, from 0
    question: str
    answers: tuple[str, ...]
    gold_text: str
    gold_title: str
    doc_id: str


def nq_gold(path: Path) -> Iterator[NqRecord]:
    """Every record of NQ-open's oracle file (``nq-open-oracle.jsonl.gz``)
    that has a gold passage, in file order."""
    first_of_text: dict[str, str] = {}
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            record = json.loads(line)
            gold = next((c for c in record.get("ctxs", ()) if c.get("isgold")), None)
            if gold is None:
                continue
            doc_id = first_of_text.setdefault(gold["text"], f"nq-{number}")
            yield NqRecord(
                number, record["question"], tuple(record["answers"]), gold["text"], gold.get("title", ""), doc_id
            )
