"""How a chunk is laid out in an Elasticsearch index, as plain values.

The mapping, the chunk -> document and hit -> chunk conversions live here so
the ingest pipeline (which writes) and the search extension (which reads)
cannot disagree about a field name. Nothing here calls a cluster.
"""

from __future__ import annotations

import base64
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.engines.base import hidden_settings
from chunkrag_core.settings import VectorIndexSettings

TEXT = "text"
TITLE = "title"
VECTOR = "vector"
DOC_ID = "doc_id"
POSITION = "position"
SECTION = "section"
# The contextual chunk header (title, section path): its own BM25 field.
HEADER = "header"
# Document text between the previous chunk and this one, kept only in
# _source so segments rebuild the document text exactly.
LEAD = "lead"
# Multi-scale ensembling: BASE_SCALE (0) for the semantic chunks, else the
# target size in tokens. Indices made before it existed hold base chunks
# without the field, so base-only searches filter with BASE_SCALE_FILTER.
SCALE = "scale"
START = "start"
END = "end"
SENTENCE_COUNT = "sentence_count"
METADATA = "metadata"
# Fingerprint of the document text and of everything that shaped its chunks;
# re-ingesting a document whose fingerprint is unchanged is skipped.
DOC_FINGERPRINT = "doc_fingerprint"
DOC_CHUNK_COUNT = "doc_chunk_count"

# Custom analyzer name used on every cluster so queries never depend on which
# analyzer the cluster happened to have.
TEXT_ANALYZER = "chunk_text"


def text_analyzer(has_english: bool) -> dict[str, Any]:
    """English stemming where the cluster has it; otherwise the standard
    tokenizer with English stop words (built into the server itself)."""
    if has_english:
        return {"type": "english"}
    return {"type": "standard", "stopwords": "_english_"}


def index_body(
    *,
    dims: int,
    has_english: bool,
    vectors: VectorIndexSettings,
    shards: int = 1,
    replicas: int = 0,
    hidden: bool = False,
) -> dict[str, Any]:
    """The settings and mapping of a chunk index; ``hidden``: one a wildcard
    does not reach (`base.hidden_settings`: a companion `chunkrag sync` makes)."""
    return {
        "settings": {
            "number_of_shards": shards,
            "number_of_replicas": replicas,
            "analysis": {"analyzer": {TEXT_ANALYZER: text_analyzer(has_english)}},
            **(hidden_settings() if hidden else {}),
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                DOC_ID: {"type": "keyword"},
                POSITION: {"type": "integer"},
                START: {"type": "integer"},
                END: {"type": "integer"},
                SENTENCE_COUNT: {"type": "short"},
                TITLE: {
                    "type": "text",
                    "analyzer": TEXT_ANALYZER,
                    "fields": {"raw": {"type": "keyword", "ignore_above": 512}},
                },
                SECTION: {"type": "keyword"},
                TEXT: {"type": "text", "analyzer": TEXT_ANALYZER},
                **added_properties(),
                VECTOR: {
                    "type": "dense_vector",
                    "dims": dims,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": vectors.type, "m": vectors.m, "ef_construction": vectors.ef_construction},
                },
                DOC_FINGERPRINT: {"type": "keyword"},
                DOC_CHUNK_COUNT: {"type": "integer"},
                # User metadata keeps whatever shape it has; only keywords are
                # inferred, so filters work without a mapping per field.
                METADATA: {"type": "object", "dynamic": True},
            },
        },
    }


def added_properties() -> dict[str, Any]:
    """Fields added after the first release: an existing chunk index gets
    them with an (additive) mapping update before new chunks are written."""
    return {
        HEADER: {"type": "text", "analyzer": TEXT_ANALYZER},
        LEAD: {"type": "text", "index": False},
        SCALE: {"type": "integer"},
    }


def base_scale_filter() -> dict[str, Any]:
    """Base chunks only: scale 0, or no scale at all (chunks written before
    the field existed). One clause: nothing above the base scale (a range
    on a field an old index lacks matches nothing, so none is excluded)."""
    return {"bool": {"must_not": [{"range": {SCALE: {"gt": BASE_SCALE}}}]}}


def scale_filter(scale: int) -> dict[str, Any]:
    """The chunks of one scale (the base one including chunks without the field)."""
    return base_scale_filter() if scale == BASE_SCALE else {"term": {SCALE: scale}}


# A hit's vector read from its doc values as raw bytes (big-endian float32,
# base64: Elasticsearch 9.3 and later; an earlier one ignores the format and
# answers floats): under a third of the float text `_source` carries, and
# nothing to format on the node or to parse here. OpenSearch has no vector
# doc values: its dialect reads `_source` instead (`opensearch_dialect`).
VECTOR_DOCVALUE: Mapping[str, str] = MappingProxyType({"field": VECTOR, "format": "binary"})


def vector_read() -> dict[str, Any]:
    """The parts of a search body that bring each hit's vector (as doc
    values, `VECTOR_DOCVALUE`) and the rest of its `_source`: the vector
    itself is left out of `_source`. `chunk_from_hit` reads both."""
    return {"_source": {"excludes": [VECTOR]}, "docvalue_fields": [dict(VECTOR_DOCVALUE)]}


def hit_vector(hit: Mapping[str, Any]) -> Any:
    """The vector of a hit: from its doc values (raw bytes in base64, or the
    floats an engine that ignores the format answers), else its `_source`;
    None when neither brought it."""
    values = (hit.get("fields") or {}).get(VECTOR)
    if values:
        value = values[0]
        if isinstance(value, str):
            vector = np.frombuffer(base64.b64decode(value), dtype=">f4").astype(np.float32)
            vector.flags.writeable = False  # as a Chunk keeps it: no second copy
            return vector
        return value
    return (hit.get("_source") or {}).get(VECTOR)


def chunk_to_source(chunk: Chunk, *, fingerprint: str, doc_chunk_count: int) -> dict[str, Any]:
    if chunk.vector is None:
        raise ValueError(f"chunk {chunk.chunk_id} has no vector")
    return {
        DOC_ID: chunk.doc_id,
        POSITION: chunk.position,
        START: chunk.start,
        END: chunk.end,
        SENTENCE_COUNT: chunk.sentence_count,
        TITLE: chunk.title,
        SECTION: list(chunk.section),
        TEXT: chunk.text,
        HEADER: chunk.header,
        **({LEAD: chunk.lead} if chunk.lead is not None else {}),
        SCALE: chunk.scale,
        VECTOR: chunk.vector.tolist(),
        DOC_FINGERPRINT: fingerprint,
        DOC_CHUNK_COUNT: doc_chunk_count,
        METADATA: dict(chunk.metadata),
    }


def chunk_from_hit(
    hit: Mapping[str, Any], *, score: float | None = None, stage_scores: Mapping[str, float] | None = None
) -> Chunk:
    """A chunk from a search hit; the vector comes along when it was fetched.
    Its score is the hit's unless ``score`` is given."""
    source = hit.get("_source") or {}
    return Chunk(
        doc_id=source[DOC_ID],
        position=int(source[POSITION]),
        text=source.get(TEXT, ""),
        start=int(source.get(START, 0)),
        end=int(source.get(END, 0)),
        title=source.get(TITLE, ""),
        section=tuple(source.get(SECTION) or ()),
        sentence_count=int(source.get(SENTENCE_COUNT, 1)),
        metadata=source.get(METADATA) or {},
        vector=hit_vector(hit),
        score=hit.get("_score") if score is None else score,
        stage_scores=stage_scores or {},
        header=source.get(HEADER) or "",
        lead=source.get(LEAD),
        scale=int(source.get(SCALE) or BASE_SCALE),
        index=str(hit.get("_index") or ""),
    )
