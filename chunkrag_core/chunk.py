"""The chunk record: one frozen value that every stage reads and returns.

A stage never edits a chunk; it returns a new one with ``dataclasses.replace``
(or :meth:`Chunk.with_score`), so a chunk seen by the gateway is exactly what
the stage before it produced.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

# Elasticsearch caps `_id` at 512 bytes; the chunk id appends
# ":<position>" (and "@<scale>" for a larger-scale chunk).
MAX_DOC_ID_BYTES = 400
# The scale of the semantic chunks themselves; larger scales (multi-scale
# ensembling) are named by their approximate size in tokens.
BASE_SCALE = 0


def chunk_id_for(doc_id: str, position: int, scale: int = BASE_SCALE) -> str:
    """The deterministic id of the chunk at ``position`` in ``doc_id`` at
    ``scale``.

    Ids depend on the document, scale and position only, so re-ingesting a
    document overwrites its chunks in place and the ones past its new length
    can be found and deleted. Base chunks keep the plain ``<doc_id>:<position>``
    of indices made before scales existed; a larger scale appends
    ``@<scale>``, which no base id ends with (after its last colon a base id
    holds digits only), so ids stay unique across scales.
    """
    if scale == BASE_SCALE:
        return f"{doc_id}:{position}"
    return f"{doc_id}:{position}@{scale}"


def _frozen_vector(vector: Any) -> np.ndarray | None:
    if vector is None:
        return None
    array = np.asarray(vector, dtype=np.float32)
    if array.flags.writeable:
        array = array.copy()
        array.flags.writeable = False
    return array


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous run of sentences of one document.

    ``start``/``end`` are character offsets into the document's text, so
    ``document.text[start:end] == text`` and neighbours or whole segments can
    be rebuilt from positions alone.
    """

    doc_id: str
    position: int
    text: str
    start: int
    end: int
    title: str = ""
    section: tuple[str, ...] = ()
    sentence_count: int = 1
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)
    # Retrieval score and the per-stage scores later stages attach.
    score: float | None = field(default=None, compare=False)
    stage_scores: Mapping[str, float] = field(default_factory=dict, compare=False)
    # Context for ranking models (document title, section path), stored and
    # embedded alongside the text but never part of it: offsets stay exact.
    header: str = ""
    # The document text between the previous chunk's end (or the document's
    # start) and this chunk's start, so a run of neighbouring chunks rebuilds
    # the document text exactly. None where it was not stored.
    lead: str | None = field(default=None, compare=False, repr=False)
    # BASE_SCALE for the semantic chunks; for a larger-scale chunk of
    # multi-scale ensembling, its target size in tokens. Positions count
    # within one scale of one document.
    scale: int = BASE_SCALE
    # The concrete index the chunk was read from ("" for one not read from
    # an index): a search over several indices answers each hit with its own.
    index: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.doc_id:
            raise ValueError("a chunk needs a non-empty doc_id")
        if len(self.doc_id.encode("utf-8")) > MAX_DOC_ID_BYTES:
            raise ValueError(f"doc_id is longer than {MAX_DOC_ID_BYTES} bytes: {self.doc_id[:60]!r}…")
        if self.scale < 0:
            raise ValueError(f"a chunk's scale is not negative, got {self.scale}")
        if self.position < 0 or self.start < 0 or self.end < self.start:
            raise ValueError(f"bad chunk bounds: position={self.position} start={self.start} end={self.end}")
        object.__setattr__(self, "section", tuple(self.section))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        object.__setattr__(self, "stage_scores", MappingProxyType(dict(self.stage_scores)))
        object.__setattr__(self, "vector", _frozen_vector(self.vector))

    @property
    def chunk_id(self) -> str:
        return chunk_id_for(self.doc_id, self.position, self.scale)

    def with_vector(self, vector: Any) -> Chunk:
        return dataclasses.replace(self, vector=vector)

    def with_score(self, score: float | None = None, **stage_scores: float) -> Chunk:
        """A copy carrying a new retrieval score and/or more per-stage scores.

        Every other field is this chunk's, already checked and frozen, so the
        copy is made without ``__post_init__``: the filter scores every
        candidate this way (hundreds per post-search), and re-checking and
        re-freezing each record was a sixth of a companion post-search's
        Python time."""
        copied = object.__new__(Chunk)
        for name in _FIELD_NAMES:
            object.__setattr__(copied, name, getattr(self, name))
        object.__setattr__(copied, "score", self.score if score is None else score)
        object.__setattr__(copied, "stage_scores", MappingProxyType({**self.stage_scores, **stage_scores}))
        return copied


# Chunk's fields, in order, for copies made without re-checking (with_score).
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Chunk))
