"""Document rankings with the filter's rerank stage on: the retrieval's
top chunks re-ordered by a reranker (``rerank: local``: the project's
relevance model), as the filter's rerank stage orders the chunks it keeps.

A benchmark whose judgements are per document (SciFact's qrels) ranks each
document by its best chunk: here, its best chunk in the reranked order.
Documents none of whose chunks were among the reranked ones follow, in the
retrieval's own document ranking (one best chunk per document), so the
depth and the recall of the plain ranking are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence


def documents_after_rerank(
    chunk_docs: Sequence[str], order: Sequence[tuple[int, float]], rest: Sequence[str]
) -> list[str]:
    """Document ids by their best chunk in ``order`` ((index into
    ``chunk_docs``, score) best first, as a reranker returns them), then the
    documents of ``rest`` not among them, in its order."""
    ranked = [chunk_docs[index] for index, _ in order] + list(rest)
    return list(dict.fromkeys(ranked))  # each document at its first place


@dataclass(frozen=True, slots=True)
class RerankedSearch:
    documents: list[str]
    search_ms: float  # the search for the chunks to rerank (the engine's part)
    rerank_ms: float  # the reranker on those chunks
    reranked_documents: int  # distinct documents among the reranked chunks


def reranked_search(
    retriever, reranker, text: str, *, top: int, depth: int, mode: str | None = None, **options: Any
) -> RerankedSearch:
    """``text``'s documents after the retrieval's ``top`` chunks are
    reranked, to ``depth`` documents. ``retriever``: a
    :class:`~search_extension.retriever.HybridRetriever`; ``reranker``: a
    :class:`~chunkrag_core.providers.rerank.Reranker`."""
    plain = retriever.search(text, mode=mode, size=depth, collapse_field="doc_id", **options)
    found = retriever.search(text, mode=mode, size=top, **options)
    began = time.perf_counter()
    order = reranker.rerank(text, [chunk.text for chunk in found.chunks])
    rerank_ms = (time.perf_counter() - began) * 1000
    chunk_docs = [chunk.doc_id for chunk in found.chunks]
    documents = documents_after_rerank(chunk_docs, order, [chunk.doc_id for chunk in plain.chunks])
    return RerankedSearch(documents[:depth], found.took_ms, round(rerank_ms, 2), len(set(chunk_docs)))
