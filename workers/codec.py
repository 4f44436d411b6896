"""Judgements and scoring options as JSON-safe dicts, for Celery's JSON
serializer (pickle is refused: a broker message must never run code).

JSON has no tuples, so tuple fields come back as lists; decoding rebuilds
them so a decoded value equals the original.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from chunkrag_core.settings import ChunkingSettings, SettingsError
from chunkrag_filter.judging import Judgement, ScoringOptions
from ingest_pipeline.pipeline import BatchOutcome
from ingest_pipeline.sources import Document, Section, Skipped
from ingest_pipeline.sync import SyncReport


class CodecError(ValueError):
    """A message did not hold a judgement or scoring options."""


def encode_options(options: ScoringOptions) -> dict[str, Any]:
    return _to_dict(options)


def decode_options(data: Mapping[str, Any]) -> ScoringOptions:
    return _from_dict(ScoringOptions, data)


def encode_judgement(judgement: Judgement) -> dict[str, Any]:
    return _to_dict(judgement)


def decode_judgement(data: Mapping[str, Any]) -> Judgement:
    return _from_dict(Judgement, data)


def decode_texts(query: Any, texts: Any) -> tuple[str, list[str]]:
    """A relevance task's query and texts; CodecError unless a string and
    a list of strings."""
    if not isinstance(query, str) or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise CodecError("a relevance task takes a query (a string) and texts (a list of strings)")
    return query, texts


def decode_scores(data: Any, count: int) -> list[float]:
    """A relevance task's result: ``count`` probabilities, in order."""
    if not isinstance(data, list) or len(data) != count:
        size = len(data) if isinstance(data, list) else type(data).__name__
        raise CodecError(f"expected {count} relevance scores, got {size}")
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p <= 1.0 for p in data):
        raise CodecError("a relevance score is not a probability between 0 and 1")
    return [float(p) for p in data]


def encode_document(document: Document) -> dict[str, Any]:
    return {
        "doc_id": document.doc_id,
        "title": document.title,
        "text": document.text,
        "sections": [[list(s.path), s.start, s.end] for s in document.sections],
        "metadata": dict(document.metadata),
        "origin": document.origin,
        "summary": document.summary,
        "stamp": dict(document.stamp),
    }


def decode_document(data: Any) -> Document:
    """A document as :func:`encode_document` wrote it; CodecError naming
    what is wrong with anything else."""
    if not isinstance(data, Mapping):
        raise CodecError(f"expected a document as a JSON object, got {type(data).__name__}")
    try:
        texts = {name: data[name] for name in ("doc_id", "title", "text")}
        sections = tuple(Section(tuple(path), int(start), int(end)) for path, start, end in data["sections"])
        metadata, origin, summary = data.get("metadata", {}), data.get("origin", ""), data.get("summary", "")
        stamp = data.get("stamp", {})
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"not a valid document: {type(exc).__name__}: {exc}") from exc
    if not all(isinstance(value, str) for value in (*texts.values(), origin, summary)) or not texts["doc_id"]:
        raise CodecError("not a valid document: doc_id, title, text, origin and summary must be strings, doc_id set")
    if not isinstance(metadata, Mapping) or not isinstance(stamp, Mapping):
        raise CodecError("not a valid document: metadata and stamp must be JSON objects")
    length = len(texts["text"])
    if any(not 0 <= s.start <= s.end <= length for s in sections):
        raise CodecError(f"not a valid document: a section lies outside its {length} characters of text")
    return Document(**texts, sections=sections, metadata=metadata, origin=origin, summary=summary, stamp=stamp)


def encode_chunking(settings: ChunkingSettings) -> dict[str, Any]:
    return _to_dict(settings)


def decode_chunking(data: Mapping[str, Any]) -> ChunkingSettings:
    try:
        return _from_dict(ChunkingSettings, data)
    except SettingsError as exc:
        raise CodecError(f"not valid chunking settings: {exc}") from exc


def encode_outcome(outcome: BatchOutcome) -> dict[str, Any]:
    data = _to_dict(outcome)
    data["skipped"] = [[s.origin, s.reason] for s in outcome.skipped]
    data["context"] = {k: _json_safe(v) for k, v in outcome.context.items()}
    return data


def decode_outcome(data: Mapping[str, Any]) -> BatchOutcome:
    if not isinstance(data, Mapping) or not isinstance(data.get("skipped"), list):
        raise CodecError(f"expected a batch outcome as a JSON object, got {type(data).__name__}")
    skipped = [Skipped(origin, reason) for origin, reason in data["skipped"]]
    return _from_dict(BatchOutcome, {**data, "skipped": skipped})


def encode_sync_report(report: SyncReport) -> dict[str, Any]:
    return _to_dict(report)


def decode_sync_report(data: Mapping[str, Any]) -> SyncReport:
    return _from_dict(SyncReport, data)


def _to_dict(value) -> dict[str, Any]:
    return {f.name: _json_safe(getattr(value, f.name)) for f in dataclasses.fields(value)}


def _json_safe(value):
    if isinstance(value, tuple):
        return [_json_safe(v) for v in value]
    return value


def _from_dict(cls, data: Mapping[str, Any]):
    if not isinstance(data, Mapping):
        raise CodecError(f"expected a {cls.__name__} as a JSON object, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        # A newer sender's field would be silently dropped; say so instead.
        raise CodecError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    values = {name: tuple(value) if isinstance(value, list) else value for name, value in data.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"not a valid {cls.__name__}: {exc}") from exc
