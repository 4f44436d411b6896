"""Turning documents into embedded chunks (no Elasticsearch here).

Sentences of a whole batch of documents are embedded in one call so the
embedder can length-sort them into tight batches; a chunk of one sentence
without a header reuses that sentence's vector, and other chunks are embedded
again (with their contextual header in front, when they have one).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers import Embedder
from chunkrag_core.settings import ChunkingSettings
from ingest_pipeline.chunking import consecutive_similarities, group_sentences, percentile_threshold
from ingest_pipeline.headers import chunk_header, embedded_text
from ingest_pipeline.sentences import Span, bounded_sentence_spans
from ingest_pipeline.sources import Document


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    document: Document
    chunks: tuple[Chunk, ...]
    sentence_count: int
    fingerprint: str


def document_fingerprint(document: Document, shaping: str) -> str:
    """Changes when the document or anything that shapes its chunks changes
    (chunking settings, embedding model)."""
    payload = json.dumps(
        [document.title, document.text, [(s.path, s.start, s.end) for s in document.sections], dict(document.metadata), shaping],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def _thresholds(documents, sections, section_similarities, settings: ChunkingSettings) -> list[float]:
    """Each document's break threshold: θ, or the percentile of its own
    consecutive similarities (over all its sections together)."""
    if settings.breakpoint == "threshold":
        return [settings.similarity_threshold] * len(documents)
    per_doc: list[list[float]] = [[] for _ in documents]
    for (doc_index, _, _), similarities in zip(sections, section_similarities):
        per_doc[doc_index].extend(float(s) for s in similarities)
    return [percentile_threshold(values, settings.breakpoint_percentile) for values in per_doc]


def chunk_documents(documents: Sequence[Document], embedder: Embedder, settings: ChunkingSettings, shaping: str = "") -> list[ChunkedDocument]:
    # (document index, section path, sentence spans) for each section
    sections: list[tuple[int, tuple[str, ...], list[Span]]] = []
    for doc_index, document in enumerate(documents):
        for section in document.sections:
            spans = bounded_sentence_spans(document.text, section.start, section.end, settings.max_chars, settings.language)
            if spans:
                sections.append((doc_index, section.path, spans))

    sentence_texts = [documents[d].text[s:e] for d, _, spans in sections for s, e in spans]
    sentence_vectors = embedder.embed(sentence_texts)

    section_vectors, section_similarities, offset = [], [], 0
    for _, _, spans in sections:
        section_vectors.append(sentence_vectors[offset : offset + len(spans)])
        section_similarities.append(consecutive_similarities(section_vectors[-1]))
        offset += len(spans)
    thresholds = _thresholds(documents, sections, section_similarities, settings)

    drafts: list[tuple[int, tuple[str, ...], Span, int, np.ndarray | None, str]] = []
    for (doc_index, path, spans), vectors, similarities in zip(sections, section_vectors, section_similarities):
        header = chunk_header(documents[doc_index].title, path, settings.headers)
        for group in group_sentences(spans, similarities, thresholds[doc_index], settings.max_chars, settings.min_chars):
            span = (spans[group.start][0], spans[group.stop - 1][1])
            single = vectors[group.start] if len(group) == 1 and not header else None
            drafts.append((doc_index, path, span, len(group), single, header))

    multi = [i for i, draft in enumerate(drafts) if draft[4] is None]
    multi_vectors = embedder.embed([embedded_text(drafts[i][5], documents[drafts[i][0]].text[drafts[i][2][0] : drafts[i][2][1]]) for i in multi])
    vector_of = {i: multi_vectors[j] for j, i in enumerate(multi)}

    per_doc: dict[int, list[Chunk]] = {i: [] for i in range(len(documents))}
    for i, (doc_index, path, (start, end), n_sentences, single, header) in enumerate(drafts):
        document = documents[doc_index]
        previous_end = per_doc[doc_index][-1].end if per_doc[doc_index] else 0
        per_doc[doc_index].append(
            Chunk(
                doc_id=document.doc_id,
                position=len(per_doc[doc_index]),
                text=document.text[start:end],
                start=start,
                end=end,
                title=document.title,
                section=path,
                sentence_count=n_sentences,
                metadata=document.metadata,
                vector=single if single is not None else vector_of[i],
                lead=document.text[previous_end:start],
                header=header,
            )
        )
    sentences_per_doc = [0] * len(documents)
    for doc_index, _, spans in sections:
        sentences_per_doc[doc_index] += len(spans)
    return [
        ChunkedDocument(document, tuple(per_doc[i]), sentences_per_doc[i], document_fingerprint(document, shaping))
        for i, document in enumerate(documents)
    ]
