"""The ingest run: read, chunk, embed and write, with bounded memory.

Embedding (CPU-bound) runs on the calling thread while a writer thread sends
the previous batch to Elasticsearch, so the network never idles the model.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from chunkrag_core.chunk import BASE_SCALE
from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.engines.errors import EngineError
from chunkrag_core.providers import ChatModel, Embedder, make_chat
from chunkrag_core.providers.chat import ChatError
from chunkrag_core.providers.embedding import EmbeddingError
from chunkrag_core.settings import Settings
from ingest_pipeline.chunker import ChunkedDocument, chunk_documents, document_fingerprint
from ingest_pipeline.context_cache import ContextCache, default_cache_dir
from ingest_pipeline.document_context import ContextFailure, ContextOutcome, add_context, wants_context
from ingest_pipeline.sentences import splitter_id
from ingest_pipeline.sources import Document, Skipped, read_sources
from ingest_pipeline.writer import (
    BulkOutcome,
    StoredDocument,
    bulk_write,
    document_actions,
    ensure_index_for,
    stored_documents,
)

# Documents chunked and embedded together: enough sentences for well-filled
# length-sorted batches, few enough to bound memory and show progress.
DOCS_PER_BATCH = 64
# Batches waiting for the writer; beyond this the embedder waits (back-pressure).
WRITE_QUEUE_DEPTH = 4


@dataclass(frozen=True, slots=True)
class ChunkLengthStats:
    count: int
    mean_chars: float
    p10: int
    p50: int
    p90: int
    max: int
    single_sentence_share: float
    sentences_per_chunk: float

    @classmethod
    def of(cls, lengths: Sequence[int], sentence_counts: Sequence[int]) -> ChunkLengthStats:
        if not lengths:
            return cls(0, 0.0, 0, 0, 0, 0, 0.0, 0.0)
        values = np.asarray(lengths)
        counts = np.asarray(sentence_counts)
        p10, p50, p90 = (int(v) for v in np.percentile(values, [10, 50, 90]))
        return cls(
            count=len(values),
            mean_chars=round(float(values.mean()), 1),
            p10=p10,
            p50=p50,
            p90=p90,
            max=int(values.max()),
            single_sentence_share=round(float((counts == 1).mean()), 4),
            sentences_per_chunk=round(float(counts.mean()), 3),
        )


@dataclass(frozen=True, slots=True)
class IngestReport:
    index: str
    documents: int
    unchanged: int
    sentences: int
    chunks: int
    deleted: int
    skipped: tuple[Skipped, ...]
    errors: tuple[str, ...]
    seconds: float
    # Base (semantic) chunks only; the larger-scale chunks of ensembling
    # are counted in scaled_chunks.
    chunk_lengths: ChunkLengthStats = field(default_factory=lambda: ChunkLengthStats.of([], []))
    scaled_chunks: int = 0
    # Document context written by the chat model (titles, summaries,
    # sections; off by default): documents that went through it, model
    # calls made, answers taken from the cache, "<doc_id>: <part>: <why>"
    # for each answer that could not be used, and the seconds spent there.
    context_documents: int = 0
    context_calls: int = 0
    context_cache_hits: int = 0
    context_fallbacks: tuple[str, ...] = ()
    context_seconds: float = 0.0
    # On the workers: batches sent again because the worker holding them
    # died or the broker lost their message (each counted once all the same).
    resent: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


def ingest(
    paths: Iterable[str | Path],
    *,
    client: SearchBackend,
    embedder: Embedder,
    settings: Settings,
    index: str | None = None,
    progress: bool | None = None,
    chat: ChatModel | None = None,
    context_cache: Path | None = None,
) -> IngestReport:
    """Ingest every document under ``paths``; see :func:`ingest_documents`."""
    return ingest_documents(
        read_sources(paths),
        client=client,
        embedder=embedder,
        settings=settings,
        index=index,
        progress=progress,
        chat=chat,
        context_cache=context_cache,
    )


def ingest_documents(
    items: Iterable[Document | Skipped],
    *,
    client: SearchBackend,
    embedder: Embedder,
    settings: Settings,
    index: str | None = None,
    progress: bool | None = None,
    chat: ChatModel | None = None,
    context_cache: Path | None = None,
    stored: Mapping[str, StoredDocument] | None = None,
    index_ready: bool = False,
) -> IngestReport:
    """``chat`` and ``context_cache`` serve the document context the
    chunking settings may ask for (default: the settings' chat model, made
    on first need, and a cache under CHUNKRAG_HOME). ``stored``: what the
    index holds of every document of ``items``, read by the caller just
    before (one absent holds nothing), so it is not read again.
    ``index_ready``: the caller made the index and holds its periodic
    refresh paused over a longer run (a sync pass), so neither is done
    here; the refresh that shows what was written still is."""
    index = index or settings.index
    began = time.perf_counter()
    if not index_ready:
        ensure_index_for(client, index, settings)
    shaping = shaping_of(settings)

    skipped: list[Skipped] = []
    lengths: list[int] = []
    sentence_counts: list[int] = []
    totals = {"documents": 0, "unchanged": 0, "sentences": 0, "scaled_chunks": 0}
    context = _ContextStage(settings, chat, context_cache)
    writer = _BackgroundWriter(client)
    bar = progress_bar(progress)
    previous_refresh = None if index_ready else pause_refresh(client, index)
    try:
        for batch in document_batches(items, skipped):
            held, chunked, unchanged, rejected = _chunk_batch(
                batch, client, index, embedder, settings, context, shaping, stored
            )
            skipped.extend(rejected)
            totals["documents"] += len(batch)
            totals["unchanged"] += unchanged
            for item in chunked:
                totals["sentences"] += item.sentence_count
                base = [c for c in item.chunks if c.scale == BASE_SCALE]
                totals["scaled_chunks"] += len(item.chunks) - len(base)
                lengths.extend(len(c.text) for c in base)
                sentence_counts.extend(c.sentence_count for c in base)
            writer.submit(
                [action for item in chunked for action in document_actions(index, item, held.get(item.document.doc_id))]
            )
            bar.update(len(batch))
    finally:
        try:
            outcome = writer.close()
        finally:
            bar.close()
            if not index_ready:
                restore_refresh(client, index, previous_refresh)
    client.refresh(index)
    return IngestReport(
        index=index,
        documents=totals["documents"],
        unchanged=totals["unchanged"],
        sentences=totals["sentences"],
        chunks=len(lengths),
        deleted=outcome.deleted,
        skipped=tuple(skipped),
        errors=context.errors + outcome.errors,
        seconds=round(time.perf_counter() - began, 3),
        chunk_lengths=ChunkLengthStats.of(lengths, sentence_counts),
        scaled_chunks=totals["scaled_chunks"],
        **context.report(),
    )


def shaping_of(settings: Settings) -> str:
    """Everything besides the document that shapes its chunks, for the
    fingerprint: chunking settings and model, and the ensembling scales
    when there are any (so fingerprints made before scales existed, and
    with them off, stay as they were)."""
    shaping = f"{settings.chunking}|{settings.embedder.provider}:{settings.embedder.model}"
    if settings.chunking.scales:
        shaping += "|scales=" + ",".join(str(s) for s in settings.chunking.scales)
    # The sentence splitter, unless it is the English one every earlier
    # fingerprint was made with: a new language rule re-chunks what it changes.
    if splitter := splitter_id(settings.chunking.language):
        shaping += "|sentences=" + splitter
    if settings.chunking.vectors != "reembed":
        shaping += f"|vectors={settings.chunking.vectors}:{settings.chunking.header_weight:g}"
        # mean pooling came first: its fingerprints stay as they were
        if settings.chunking.mix_pooling != "mean":
            shaping += f":{settings.chunking.mix_pooling}"
    # Likewise the document context, only when some is asked for. The chat
    # model's name is not in it: switching models does not redo the stored
    # documents (a document re-ingested for another reason asks the new one).
    asked = [
        name
        for name, on in (
            ("titles", settings.chunking.llm_titles),
            ("summaries", settings.chunking.summaries),
            ("sections", settings.chunking.sectioning == "llm"),
        )
        if on
    ]
    if asked:
        shaping += "|context=" + ",".join(asked)
    return shaping


def pause_refresh(client, index: str) -> str | None:
    """Stop periodic refreshes while writing: each refresh cuts a small
    segment, and merging those rebuilds HNSW graphs, CPU the embedder needs.
    Returns the index's own setting to restore (None: the default)."""
    previous = client.refresh_interval(index)
    client.set_refresh_interval(index, "-1")
    # "-1" found here is most likely left by a run that was killed before it
    # could restore the setting: restore the default rather than keep it.
    return None if previous == "-1" else previous


def restore_refresh(client, index: str, previous: str | None) -> None:
    client.set_refresh_interval(index, previous)


def _unchanged(document: Document, stored, shaping: str) -> bool:
    state = stored.get(document.doc_id)
    return state is not None and state.is_complete(document_fingerprint(document, shaping))


def document_batches(
    items: Iterable[Document | Skipped], skipped: list[Skipped], size: int = DOCS_PER_BATCH
) -> Iterator[list[Document]]:
    """``items`` in batches of ``size`` documents; what cannot be ingested
    (unreadable, or an id met before in this run) goes to ``skipped``."""
    seen: set[str] = set()
    batch: list[Document] = []
    for item in items:
        if isinstance(item, Skipped):
            skipped.append(item)
            continue
        if item.doc_id in seen:
            # Two versions of one id in one run would race each other's writes.
            skipped.append(
                Skipped(item.origin, f"duplicate document id {item.doc_id!r} in this run; the first one was kept")
            )
            continue
        seen.add(item.doc_id)
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# Errors that say nothing about one document but about a service the whole
# batch needs: never blamed on a document, raised for the caller to retry.
SERVICE_ERRORS: tuple[type[BaseException], ...] = (EngineError, EmbeddingError, ChatError, OSError)


def _chunk_batch(
    batch: Sequence[Document],
    client: SearchBackend,
    index: str,
    embedder: Embedder,
    settings: Settings,
    context: _ContextStage,
    shaping: str,
    known: Mapping[str, StoredDocument] | None = None,
) -> tuple[Mapping[str, StoredDocument], list[ChunkedDocument], int, list[Skipped]]:
    """One batch through the stored-state check, the document context and
    chunking: (stored state, chunked documents, how many were unchanged,
    documents that could not be chunked, each with its reason). ``known``:
    the stored state the caller already read (else it is read here)."""
    if known is None:
        stored: Mapping[str, StoredDocument] = stored_documents(client, index, [d.doc_id for d in batch])
    else:
        stored = {d.doc_id: known[d.doc_id] for d in batch if d.doc_id in known}
    todo = [d for d in batch if not _unchanged(d, stored, shaping)]
    unchanged = len(batch) - len(todo)
    chunked, rejected = _chunk_isolating(context.apply(todo, shaping), embedder, settings, shaping)
    return stored, context.fingerprinted(chunked), unchanged, rejected


def _chunk_isolating(
    documents: list[Document], embedder: Embedder, settings: Settings, shaping: str
) -> tuple[list[ChunkedDocument], list[Skipped]]:
    """The documents chunked together; if that fails on something other than
    a service, each alone, so one malformed document is skipped with its
    reason and the rest of its batch goes on."""
    if not documents:
        return [], []
    try:
        return chunk_documents(documents, embedder, settings.chunking, shaping), []
    except SERVICE_ERRORS:
        raise
    except Exception:  # noqa: BLE001 - narrowed to the guilty document below
        if len(documents) == 1:
            return [], [_unchunkable(documents[0], sys.exc_info()[1])]
    chunked: list[ChunkedDocument] = []
    rejected: list[Skipped] = []
    for document in documents:
        try:
            chunked.extend(chunk_documents([document], embedder, settings.chunking, shaping))
        except SERVICE_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as this document's skip reason
            rejected.append(_unchunkable(document, exc))
    return chunked, rejected


def _unchunkable(document: Document, exc: BaseException | None) -> Skipped:
    where = document.origin or document.doc_id
    return Skipped(where, f"document {document.doc_id!r} could not be chunked: {type(exc).__name__}: {exc}")


class BatchNotWritten(RuntimeError):
    """Some chunks of a batch were refused for a reason that may pass (the
    cluster busy, a shard without its primary): the whole batch may be
    written again, ids being deterministic."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What one batch of documents came to, for a distributed run's report."""

    documents: int
    unchanged: int
    sentences: int
    lengths: tuple[int, ...]  # characters of each base chunk
    sentence_counts: tuple[int, ...]  # sentences of each base chunk
    scaled_chunks: int
    deleted: int
    skipped: tuple[Skipped, ...]
    errors: tuple[str, ...]
    context: Mapping[str, Any] = field(default_factory=dict)  # _ContextStage.report()


def _retryable_status(status: Any) -> bool:
    # No status: the request never got an answer (a node lost mid-request).
    return not isinstance(status, int) or status == 429 or status >= 500


def ingest_batch(
    documents: Sequence[Document],
    *,
    client: SearchBackend,
    embedder: Embedder,
    settings: Settings,
    index: str,
    rejected: Sequence[Skipped] = (),
    chat: ChatModel | None = None,
    context_cache: Path | None = None,
) -> BatchOutcome:
    """One batch of a distributed ingest, on a worker: the same steps as
    :func:`ingest_documents` (unchanged documents left alone, document
    context, chunking, idempotent writes, stale chunks deleted) into an
    index that exists, written before returning. ``rejected``: documents
    the caller could not even decode, reported with the rest.

    Raises the service's own error, or :class:`BatchNotWritten` when chunks
    were refused with a status that may pass, so the caller can send the
    batch again; chunks refused for good are reported as errors."""
    shaping = shaping_of(settings)
    context = _ContextStage(settings, chat, context_cache)
    stored, chunked, unchanged, not_chunked = _chunk_batch(
        documents, client, index, embedder, settings, context, shaping
    )
    actions = [action for item in chunked for action in document_actions(index, item, stored.get(item.document.doc_id))]
    outcome = bulk_write(client, actions, keep_status=True)
    passing = [error for error, status in zip(outcome.errors, outcome.statuses) if _retryable_status(status)]
    if passing:
        raise BatchNotWritten(f"{len(passing)} of {len(actions)} writes refused, e.g. {passing[0]}")
    base = [c for item in chunked for c in item.chunks if c.scale == BASE_SCALE]
    return BatchOutcome(
        documents=len(documents) + len(rejected),
        unchanged=unchanged,
        sentences=sum(item.sentence_count for item in chunked),
        lengths=tuple(len(c.text) for c in base),
        sentence_counts=tuple(c.sentence_count for c in base),
        scaled_chunks=sum(len(item.chunks) for item in chunked) - len(base),
        deleted=outcome.deleted,
        skipped=(*rejected, *not_chunked),
        errors=context.errors + outcome.errors,
        context=context.report(),
    )


def report_of_batches(
    index: str,
    outcomes: Sequence[BatchOutcome],
    skipped: Sequence[Skipped],
    errors: Sequence[str],
    seconds: float,
    *,
    resent: int = 0,
) -> IngestReport:
    """The report of a run whose batches went to workers: the same figures
    as :func:`ingest_documents` gives, added up over ``outcomes``;
    ``skipped`` and ``errors``: what the caller met itself (unreadable
    sources, batches that failed for good); ``resent``: batches sent again."""
    lengths = [n for o in outcomes for n in o.lengths]
    sentence_counts = [n for o in outcomes for n in o.sentence_counts]
    contexts = [o.context for o in outcomes if o.context]
    return IngestReport(
        index=index,
        documents=sum(o.documents for o in outcomes),
        unchanged=sum(o.unchanged for o in outcomes),
        sentences=sum(o.sentences for o in outcomes),
        chunks=len(lengths),
        deleted=sum(o.deleted for o in outcomes),
        skipped=(*skipped, *(s for o in outcomes for s in o.skipped)),
        errors=(*(e for o in outcomes for e in o.errors), *errors),
        seconds=round(seconds, 3),
        chunk_lengths=ChunkLengthStats.of(lengths, sentence_counts),
        scaled_chunks=sum(o.scaled_chunks for o in outcomes),
        context_documents=sum(c.get("context_documents", 0) for c in contexts),
        context_calls=sum(c.get("context_calls", 0) for c in contexts),
        context_cache_hits=sum(c.get("context_cache_hits", 0) for c in contexts),
        context_fallbacks=tuple(f for c in contexts for f in c.get("context_fallbacks", ())),
        context_seconds=round(sum(c.get("context_seconds", 0.0) for c in contexts), 3),
        resent=resent,
    )


class _ContextStage:
    """The document-context stage of one run: passes documents through
    unchanged when nothing is asked; else adds what is asked, keeps the
    fingerprint of each document as read (so the unchanged check, made
    before any model call, matches next time), and totals the cost."""

    def __init__(self, settings: Settings, chat: ChatModel | None, cache_dir: Path | None):
        self._settings = settings
        self._chat = chat
        self._cache_dir = cache_dir
        self._cache: ContextCache | None = None
        self._read_fingerprints: dict[str, str] = {}
        self.errors: tuple[str, ...] = ()
        self._outcomes: list[ContextOutcome] = []

    def apply(self, documents: list[Document], shaping: str) -> list[Document]:
        if not documents or not wants_context(self._settings.chunking):
            return documents
        if self._chat is None:
            self._chat = make_chat(self._settings.chat)  # opens no connection
        if self._cache is None:
            self._cache = ContextCache(self._cache_dir or default_cache_dir())
        results = add_context(
            documents,
            self._settings.chunking,
            model=self._chat,
            model_name=self._settings.chat.model,
            cache=self._cache,
            parallel=self._settings.chat.parallel,
        )
        done = [r for r in results if isinstance(r, ContextOutcome)]
        failed = [r for r in results if isinstance(r, ContextFailure)]
        self.errors += tuple(
            f"{f.document.doc_id}: document context: {f.reason}; not ingested, run again" for f in failed
        )
        self._outcomes.extend(done)
        self._read_fingerprints = {
            o.document.doc_id: document_fingerprint(d, shaping)
            for o, d in zip(results, documents)
            if isinstance(o, ContextOutcome)
        }
        return [o.document for o in done]

    def fingerprinted(self, chunked: list[ChunkedDocument]) -> list[ChunkedDocument]:
        return [
            replace(item, fingerprint=self._read_fingerprints.get(item.document.doc_id, item.fingerprint))
            for item in chunked
        ]

    def report(self) -> dict:
        return {
            "context_documents": len(self._outcomes),
            "context_calls": sum(o.calls for o in self._outcomes),
            "context_cache_hits": sum(o.cache_hits for o in self._outcomes),
            "context_fallbacks": tuple(
                f"{o.document.doc_id}: {reason}" for o in self._outcomes for reason in o.fallbacks
            ),
            "context_seconds": round(sum(o.seconds for o in self._outcomes), 3),
        }


class _BackgroundWriter:
    """Sends action lists to Elasticsearch on one thread, in order."""

    _DONE = object()

    def __init__(self, client) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=WRITE_QUEUE_DEPTH)
        self._outcomes: list[BulkOutcome] = []
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(client,), name="chunk-writer", daemon=True)
        self._thread.start()

    def _actions(self) -> Iterator[dict]:
        while (item := self._queue.get()) is not self._DONE:
            yield from item

    def _run(self, client) -> None:
        try:
            self._outcomes.append(bulk_write(client, self._actions()))
        except BaseException as exc:  # surfaced to the caller in close()
            self._failure = exc
            while self._queue.get() is not self._DONE:  # keep the producer from blocking
                pass

    def submit(self, actions: list[dict]) -> None:
        if self._failure is not None:
            raise self._failure
        if actions:
            self._queue.put(actions)

    def close(self) -> BulkOutcome:
        self._queue.put(self._DONE)
        self._thread.join()
        if self._failure is not None:
            raise self._failure
        return BulkOutcome(
            indexed=sum(o.indexed for o in self._outcomes),
            deleted=sum(o.deleted for o in self._outcomes),
            errors=tuple(e for o in self._outcomes for e in o.errors),
        )


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(progress: bool | None, desc: str = "ingest"):
    """A bar of documents on stderr (``progress`` None: when stderr is a terminal)."""
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(unit="doc", desc=desc, file=sys.stderr)
