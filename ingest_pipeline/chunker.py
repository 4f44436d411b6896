"""Turning documents into embedded chunks (no Elasticsearch here).

Sentences of a whole batch of documents are embedded in one call so the
embedder can length-sort them into tight batches. How a chunk then gets its
vector is a setting (``ChunkingSettings.vectors``):

- "mix": from the vectors at hand, the mean of its sentences' vectors
  (weighted by their word counts with ``mix_pooling`` "length") plus its
  header's vector (each distinct header embedded once, in the same call
  as the sentences), so each sentence goes through the model once;
- "reembed": a chunk of one sentence without a header reuses that
  sentence's vector, and other chunks are embedded again (with their
  contextual header in front, when they have one).

Chunks of the larger ensembling scales are always embedded again: their
vector should see their text as one passage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from chunkrag_core import cancellation
from chunkrag_core.chunk import BASE_SCALE, Chunk
from chunkrag_core.providers import Embedder
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.chunking import consecutive_similarities, group_sentences, percentile_threshold
from ingest_pipeline.context_cache import cache_key
from ingest_pipeline.headers import chunk_header, embedded_text, mixed_vector, word_count
from ingest_pipeline.scales import group_to_size, target_chars
from ingest_pipeline.sentences import (
    Span,
    bounded_sentence_spans,
    dense_script_rule,
    length_caps,
    resolved_language,
)
from ingest_pipeline.sources import Document


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    document: Document
    # Base chunks first (in position order), then each larger scale's.
    chunks: tuple[Chunk, ...]
    sentence_count: int
    fingerprint: str


def document_fingerprint(document: Document, shaping: str) -> str:
    """Changes when the document or anything that shapes its chunks changes
    (chunking settings, embedding model)."""
    # The same JSON-then-sha256 as the context cache's keys (an array of the
    # parts), cut to 32 hex digits: stored in every index, so it must not change.
    sections = [(s.path, s.start, s.end) for s in document.sections]
    # Chinese and Japanese documents' shorter caps (sentences.length_caps),
    # in their fingerprints alone: no other document is chunked again.
    shaping += dense_script_rule(document.text, shaping)
    return cache_key(document.title, document.text, sections, dict(document.metadata), shaping)[:32]


def _thresholds(documents, sections, section_similarities, settings: ChunkingSettings) -> list[float]:
    """Each document's break threshold: θ, or the percentile of its own
    consecutive similarities (over all its sections together)."""
    if settings.breakpoint == "threshold":
        return [settings.similarity_threshold] * len(documents)
    per_doc: list[list[float]] = [[] for _ in documents]
    for (doc_index, _, _), similarities in zip(sections, section_similarities):
        per_doc[doc_index].extend(float(s) for s in similarities)
    return [percentile_threshold(values, settings.breakpoint_percentile) for values in per_doc]


def span_chunk(
    document: Document,
    *,
    position: int,
    span: tuple[int, int],
    previous_end: int,
    section: tuple[str, ...],
    sentence_count: int,
    header: str,
    metadata: Mapping[str, Any],
    scale: int,
    **more: Any,
) -> Chunk:
    """The chunk of ``document`` between the offsets of ``span``: its text,
    and its lead from ``previous_end`` (the end of the chunk before it on the
    same scale; 0 for the first). Post-search rebuilds a companion's chunks
    with it from their stored offsets, so both make a chunk the same way.
    ``more``: further Chunk fields (vector, score, ...)."""
    start, end = span
    return Chunk(
        doc_id=document.doc_id,
        position=position,
        text=document.text[start:end],
        start=start,
        end=end,
        title=document.title,
        section=section,
        sentence_count=sentence_count,
        metadata=metadata,
        lead=document.text[previous_end:start],
        header=header,
        scale=scale,
        **more,
    )


def chunk_documents(
    documents: Sequence[Document], embedder: Embedder, settings: ChunkingSettings, shaping: str = ""
) -> list[ChunkedDocument]:
    # (document index, section path, sentence spans) for each section
    sections: list[tuple[int, tuple[str, ...], list[Span]]] = []
    caps: list[tuple[int, int]] = []  # each document's longest and shortest chunk
    for doc_index, document in enumerate(documents):
        cancellation.check()  # passages built for a request gone: stop between documents
        # One language per document, whatever its sections hold.
        language = resolved_language(document.text, settings.language)
        caps.append(length_caps(language, settings.max_chars, settings.min_chars))
        for section in document.sections:
            spans = bounded_sentence_spans(document.text, section.start, section.end, caps[-1][0], language)
            if spans:
                sections.append((doc_index, section.path, spans))

    headers = [
        chunk_header(documents[d].title, path, settings.headers, documents[d].summary) for d, path, _ in sections
    ]
    mixing = settings.vectors == "mix"
    # Each distinct header once (a document's title is the header of all its
    # chunks), embedded in the sentences' call so it shares their batches.
    header_texts = list(dict.fromkeys(h for h in headers if h)) if mixing and settings.header_weight > 0 else []
    sentence_texts = [documents[d].text[s:e] for d, _, spans in sections for s, e in spans]
    embedded = embedder.embed(sentence_texts + header_texts)
    sentence_vectors = embedded[: len(sentence_texts)]
    header_vectors = dict(zip(header_texts, embedded[len(sentence_texts) :]))

    section_vectors, section_similarities, offset = [], [], 0
    for _, _, spans in sections:
        section_vectors.append(sentence_vectors[offset : offset + len(spans)])
        section_similarities.append(consecutive_similarities(section_vectors[-1]))
        offset += len(spans)
    thresholds = _thresholds(documents, sections, section_similarities, settings)

    # (document index, scale, section path, span, sentences, reusable vector, header)
    drafts: list[tuple[int, int, tuple[str, ...], Span, int, np.ndarray | None, str]] = []
    for (doc_index, path, spans), header, vectors, similarities in zip(
        sections, headers, section_vectors, section_similarities
    ):
        for group in group_sentences(spans, similarities, thresholds[doc_index], *caps[doc_index]):
            span = (spans[group.start][0], spans[group.stop - 1][1])
            if mixing:
                text = documents[doc_index].text
                words = (
                    [word_count(text[s:e]) for s, e in spans[group.start : group.stop]]
                    if settings.mix_pooling == "length"
                    else None
                )
                ready = mixed_vector(
                    vectors[group.start : group.stop], header_vectors.get(header), settings.header_weight, words
                )
            else:
                ready = vectors[group.start] if len(group) == 1 and not header else None
            drafts.append((doc_index, BASE_SCALE, path, span, len(group), ready, header))
    # Larger scales for ensembling: the same sentences, grouped by length only.
    for scale in settings.scales:
        for (doc_index, path, spans), header in zip(sections, headers):
            for group in group_to_size(spans, target_chars(scale)):
                drafts.append(
                    (
                        doc_index,
                        scale,
                        path,
                        (spans[group.start][0], spans[group.stop - 1][1]),
                        len(group),
                        None,
                        header,
                    )
                )

    multi = [i for i, draft in enumerate(drafts) if draft[5] is None]
    multi_vectors = embedder.embed(
        [embedded_text(drafts[i][6], documents[drafts[i][0]].text[drafts[i][3][0] : drafts[i][3][1]]) for i in multi]
    )
    vector_of = {i: multi_vectors[j] for j, i in enumerate(multi)}

    # Positions and leads count within one scale of one document.
    per_track: dict[tuple[int, int], list[Chunk]] = {}
    metadata = [{**d.metadata, **d.stamp} if d.stamp else d.metadata for d in documents]
    for i, (doc_index, scale, path, (start, end), n_sentences, single, header) in enumerate(drafts):
        document = documents[doc_index]
        track = per_track.setdefault((doc_index, scale), [])
        previous_end = track[-1].end if track else 0
        track.append(
            span_chunk(
                document,
                position=len(track),
                span=(start, end),
                previous_end=previous_end,
                section=path,
                sentence_count=n_sentences,
                header=header,
                metadata=metadata[doc_index],
                scale=scale,
                vector=single if single is not None else vector_of[i],
            )
        )
    per_doc: dict[int, list[Chunk]] = {i: [] for i in range(len(documents))}
    for (doc_index, _), chunks in per_track.items():
        per_doc[doc_index].extend(chunks)
    sentences_per_doc = [0] * len(documents)
    for doc_index, _, spans in sections:
        sentences_per_doc[doc_index] += len(spans)
    return [
        ChunkedDocument(document, tuple(per_doc[i]), sentences_per_doc[i], document_fingerprint(document, shaping))
        for i, document in enumerate(documents)
    ]
