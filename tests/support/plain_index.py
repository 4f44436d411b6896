"""An index of plain documents (the caller's own mapping, not chunks), made
for a test on one engine and removed after it, whatever the test did."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any


@contextlib.contextmanager
def plain_index(
    engine, prefix: str, mapping: Mapping[str, Any], docs: Mapping[str, Mapping[str, Any]]
) -> Iterator[str]:
    """``docs`` (id → source) written to a new one-shard index named
    ``<prefix>-<random>`` with ``mapping``, refreshed; yields its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    engine.create_index(name, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": mapping})
    try:
        actions = ({"_op_type": "index", "_index": name, "_id": doc_id, "_source": doc} for doc_id, doc in docs.items())
        assert all(ok for ok, _ in engine.bulk(actions, chunk_size=100, max_retries=0, initial_backoff=1))
        engine.refresh(name)
        yield name
    finally:
        engine.delete_index(name)
