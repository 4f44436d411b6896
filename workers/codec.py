"""Judgements and scoring options as JSON-safe dicts, for Celery's JSON
serializer (pickle is refused: a broker message must never run code).

JSON has no tuples, so tuple fields come back as lists; decoding rebuilds
them so a decoded value equals the original.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from chunkrag_filter.judging import Judgement, ScoringOptions


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
