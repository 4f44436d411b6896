"""``chunkrag sync --workers``: the sync's reading and sweeping stay here,
the chunking, embedding and writing of each page's new and changed fields
go to the Celery workers through the distributed ingest
(:func:`workers.ingest_dispatch.ingest_documents_on_workers`), page after
page, so the pass's saved position only ever moves past written pages."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from celery import Celery

from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.settings import Settings
from ingest_pipeline.pipeline import IngestReport
from ingest_pipeline.sources import Document
from ingest_pipeline.sync import SyncReport, companion_name, sync_index
from ingest_pipeline.writer import StoredDocument
from workers.app import make_app
from workers.ingest_dispatch import ingest_documents_on_workers


def sync_on_workers(
    source: str,
    *,
    client: SearchBackend,
    settings: Settings,
    companion: str | None = None,
    app: Celery | None = None,
    **options: Any,
) -> SyncReport:
    """:func:`ingest_pipeline.sync.sync_index` with the workers ingesting;
    ``options``: the rest of its keywords (fields, title_field, batch...).
    Raises what the distributed ingest raises when no worker answers."""
    companion = companion or companion_name(source)
    app = app or make_app(settings)

    def ingest(items: Sequence[Document], stored: Mapping[str, StoredDocument]) -> IngestReport:
        # Each worker reads the stored state of its own batch: ``stored``
        # would have to travel with every task.
        return ingest_documents_on_workers(
            items, client=client, settings=settings, index=companion, progress=False, app=app, index_ready=True
        )

    return sync_index(
        source, client=client, embedder=None, settings=settings, companion=companion, ingest=ingest, **options
    )
