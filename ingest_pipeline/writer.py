"""Writing chunks into the search engine (through the backend seam): index
creation, idempotent upserts, deletion of chunks a shorter new version no
longer has."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from chunkrag_core.chunk import BASE_SCALE, chunk_id_for
from chunkrag_core.engines import schema
from chunkrag_core.engines.base import ClusterCapabilities, SearchBackend
from chunkrag_core.engines.opensearch_dialect import vector_dims
from chunkrag_core.settings import IndexLayoutSettings, Settings, VectorIndexSettings
from ingest_pipeline.chunker import ChunkedDocument

# Scales a document may be stored at (the base one included): far more than
# any configuration uses, so the aggregation never truncates.
MAX_SCALES_PER_DOCUMENT = 32


class IndexMismatch(RuntimeError):
    """The index exists with a mapping these chunks cannot go into."""


def ensure_index_for(backend: SearchBackend, index: str, settings: Settings, *, hidden: bool = False) -> bool:
    """:func:`ensure_index` with what ``settings`` say of the index (the
    embedder's dims, the vector type, shards and replicas) and the cluster's
    own capabilities: the call every ingest, in process or on workers, makes."""
    return ensure_index(
        backend,
        index,
        dims=settings.embedder.dims,
        vectors=settings.vector_index,
        capabilities=backend.capabilities(),
        layout=settings.index_layout,
        hidden=hidden,
    )


def ensure_index(
    backend: SearchBackend,
    index: str,
    *,
    dims: int,
    vectors: VectorIndexSettings,
    capabilities: ClusterCapabilities,
    layout: IndexLayoutSettings = IndexLayoutSettings(),
    hidden: bool = False,
) -> bool:
    """Create the chunk index if missing (True if created), with the shards
    and replicas of ``layout``, hidden from wildcards when ``hidden``; check
    an existing one can take vectors of ``dims``."""
    if backend.index_exists(index):
        properties = backend.mapping_properties(index)
        found = vector_dims(properties.get(schema.VECTOR, {}))
        if found != dims or schema.DOC_FINGERPRINT not in properties:
            raise IndexMismatch(
                f"index {index!r} exists but is not a chunk index for {dims}-dim vectors "
                f"(vector dims {found}); choose another --index or delete it"
            )
        lacking = {name: spec for name, spec in schema.added_properties().items() if name not in properties}
        if lacking:
            backend.add_mapping_properties(index, lacking)
        return False
    body = schema.index_body(
        dims=dims,
        has_english=capabilities.has_english_analyzer,
        vectors=vectors,
        shards=layout.shards,
        replicas=layout.replicas,
        hidden=hidden,
    )
    backend.create_index(index, body)
    return True


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """What the index holds for one document before this run."""

    fingerprints: tuple[str, ...]
    chunk_count: int  # all scales together
    max_position: int  # of the base scale
    declared_count: int  # doc_chunk_count as written, for completeness checks
    # Highest position held at each scale (the base one included); empty:
    # base chunks only, up to max_position.
    scale_max_positions: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        held = dict(self.scale_max_positions) or {BASE_SCALE: self.max_position}
        object.__setattr__(self, "scale_max_positions", MappingProxyType(held))

    def is_complete(self, fingerprint: str) -> bool:
        expected = sum(top + 1 for top in self.scale_max_positions.values())
        return self.fingerprints == (fingerprint,) and self.chunk_count == self.declared_count == expected


def stored_documents(backend: SearchBackend, index: str, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
    """The stored state of ``doc_ids``, in one aggregation request."""
    if not doc_ids:
        return {}
    body = {
        "size": 0,
        "query": {"terms": {schema.DOC_ID: list(doc_ids)}},
        "aggs": {
            "docs": {
                "terms": {"field": schema.DOC_ID, "size": len(doc_ids)},
                "aggs": {
                    "fingerprints": {"terms": {"field": schema.DOC_FINGERPRINT, "size": 4}},
                    "declared": {"max": {"field": schema.DOC_CHUNK_COUNT}},
                    # Chunks written before scales existed have no scale: base.
                    "scales": {
                        "terms": {"field": schema.SCALE, "missing": BASE_SCALE, "size": MAX_SCALES_PER_DOCUMENT},
                        "aggs": {"max_position": {"max": {"field": schema.POSITION}}},
                    },
                },
            }
        },
    }
    response = backend.search(index, body)
    state = {}
    for bucket in response["aggregations"]["docs"]["buckets"]:
        tops = {int(b["key"]): int(b["max_position"]["value"]) for b in bucket["scales"]["buckets"]}
        state[bucket["key"]] = StoredDocument(
            fingerprints=tuple(sorted(b["key"] for b in bucket["fingerprints"]["buckets"])),
            chunk_count=bucket["doc_count"],
            max_position=tops.get(BASE_SCALE, -1),
            declared_count=int(bucket["declared"]["value"]),
            scale_max_positions=tops,
        )
    return state


def document_actions(index: str, chunked: ChunkedDocument, stored: StoredDocument | None) -> Iterator[dict[str, Any]]:
    """Bulk actions that make the index hold exactly ``chunked``: every chunk
    (overwritten by id), then deletes for the positions, at each scale, that
    the new version lacks (a scale no longer asked for loses all of its)."""
    count = len(chunked.chunks)
    per_scale: dict[int, int] = {}
    for chunk in chunked.chunks:
        per_scale[chunk.scale] = per_scale.get(chunk.scale, 0) + 1
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": chunk.chunk_id,
            "_source": schema.chunk_to_source(chunk, fingerprint=chunked.fingerprint, doc_chunk_count=count),
        }
    if stored is not None:
        for scale, top in sorted(stored.scale_max_positions.items()):
            for position in range(per_scale.get(scale, 0), top + 1):
                yield {
                    "_op_type": "delete",
                    "_index": index,
                    "_id": chunk_id_for(chunked.document.doc_id, position, scale),
                }


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    indexed: int
    deleted: int
    errors: tuple[str, ...]
    # The status of each error, in order, when asked for (keep_status).
    statuses: tuple[Any, ...] = ()


# Elasticsearch answers 429 when its write queue is full; these retry that
# with exponential backoff (2 s, 4 s, … up to 60 s) before giving up.
BULK_MAX_RETRIES = 6
BULK_INITIAL_BACKOFF_S = 2
BULK_ACTIONS_PER_REQUEST = 500


def bulk_write(backend: SearchBackend, actions: Iterable[dict[str, Any]], keep_status: bool = False) -> BulkOutcome:
    indexed = deleted = 0
    errors: list[str] = []
    statuses: list[Any] = []
    for ok, item in backend.bulk(
        actions,
        chunk_size=BULK_ACTIONS_PER_REQUEST,
        max_retries=BULK_MAX_RETRIES,
        initial_backoff=BULK_INITIAL_BACKOFF_S,
    ):
        op, result = next(iter(item.items()))
        if op == "delete":
            # Deleting a position that was never written is not an error.
            if ok or result.get("status") == 404:
                deleted += int(ok)
                continue
        elif ok:
            indexed += 1
            continue
        errors.append(f"{op} {result.get('_id')}: {result.get('status')} {result.get('error')}")
        statuses.append(result.get("status"))
    return BulkOutcome(indexed, deleted, tuple(errors), tuple(statuses) if keep_status else ())
