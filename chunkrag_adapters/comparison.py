"""The frameworks' own chunk filters beside the adapters', run over the same
documents (``python -m bench.frameworks_bench``; docs/frameworks.md).

Each question's pool is split as a LangChain user splits text
(``RecursiveCharacterTextSplitter``, 500 characters, no overlap), the pieces
stored in LangChain's ``InMemoryVectorStore`` with the project's MiniLM
(``ChunkragEmbeddings``) and all of them retrieved by its retriever, best
first (:func:`retrieved`); then every row of :data:`ROWS` filters the same
documents (:func:`run_row`), recording the documents kept, model calls and
seconds. ``chunkrag_eval.filter_comparison`` scores the outcomes. Needs the
langchain and llamaindex extras; the ``llm_chain_filter`` row also needs
langchain-openai (the bench extra).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

# Each row: what filters, with which settings. "rule" thresholds are chosen
# by the shipped cut's rule over the cosine candidates on the run's questions
# (chunkrag_eval.filter_comparison.choose_threshold).
ROWS: tuple[dict[str, Any], ...] = (
    {"name": "all", "kind": "none"},
    {"name": "embeddings_filter_default", "kind": "embeddings_filter", "threshold": None},
    {"name": "embeddings_filter_rule", "kind": "embeddings_filter", "threshold": "rule"},
    {"name": "similarity_postprocessor_default", "kind": "similarity_postprocessor", "cutoff": None},
    {"name": "similarity_postprocessor_rule", "kind": "similarity_postprocessor", "cutoff": "rule"},
    {"name": "llm_chain_filter", "kind": "llm_chain_filter", "llm": True},
    {"name": "chunkrag_default", "kind": "chunkrag", "options": {}, "split": False},
    {"name": "chunkrag_default_split", "kind": "chunkrag", "options": {}, "split": True},
    {"name": "chunkrag_judge", "kind": "chunkrag", "options": {"judge_top": 9}, "split": False, "llm": True},
)
# How a LangChain user splits a pool: its recursive splitter's common size.
SPLIT_CHARS = 500


@dataclass
class Outcome:
    """One row on one question: the documents kept (by number), calls, seconds."""

    kept_text: str
    chars: int
    calls: int = 0
    seconds: float = 0.0
    failed: bool = False
    kept: list[int] = field(default_factory=list)


def retrieved(items, embeddings) -> list[list[tuple[str, float]]]:
    """Each question's pool split and retrieved by LangChain's own store: (text, cosine), best first."""
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=SPLIT_CHARS, chunk_overlap=0)
    out = []
    for item in items:
        pieces = splitter.split_text(item.pool)
        store = InMemoryVectorStore(embeddings)
        store.add_texts(pieces)
        found = store.similarity_search_with_score(item.question, k=len(pieces))
        out.append([(doc.page_content, float(score)) for doc, score in found])
    return out


def make_parts(rows: Sequence[dict[str, Any]], settings) -> dict[str, Any]:
    """What the rows filter with: the embeddings, a compressor per chunkrag row, and LLMChainFilter on the
    settings' chat model when a row asks for it."""
    from chunkrag_adapters.langchain import ChunkragCompressor, ChunkragEmbeddings

    parts: dict[str, Any] = {"embeddings": ChunkragEmbeddings(settings=settings)}
    for row in rows:
        if row["kind"] == "chunkrag":
            parts[f"chunkrag:{row['name']}"] = ChunkragCompressor(options=row["options"], split=row["split"])
    if any(r["kind"] == "llm_chain_filter" for r in rows):
        from langchain_classic.retrievers.document_compressors import LLMChainFilter
        from langchain_openai import ChatOpenAI

        chat = settings.chat
        llm = ChatOpenAI(base_url=chat.base_url, model=chat.model, api_key="local", temperature=0, max_tokens=16)
        parts["llm_chain_filter"] = LLMChainFilter.from_llm(llm)
    return parts


class CallCounter:
    """Counts the chat model calls a LangChain chain makes (a callback handler)."""

    def __new__(cls):
        from langchain_core.callbacks import BaseCallbackHandler

        class Counter(BaseCallbackHandler):
            calls = 0

            def on_chat_model_start(self, *args, **kwargs):
                self.calls += 1

            def on_llm_start(self, *args, **kwargs):
                self.calls += 1

        return Counter()


def run_row(row: dict[str, Any], question: str, docs: list[tuple[str, float]], parts: dict[str, Any], t) -> Outcome:
    """One row over one question's documents; ``t`` is the row's rule threshold."""
    from langchain_core.documents import Document

    texts = [text for text, _ in docs]
    started = time.perf_counter()
    calls, failed = 0, False
    kind = row["kind"]
    if kind == "none":
        kept = list(range(len(texts)))
    elif kind == "embeddings_filter":
        from langchain_classic.retrievers.document_compressors import EmbeddingsFilter

        threshold = t if row["threshold"] == "rule" else row["threshold"]
        # LangChain's defaults: k=20, no threshold; with a threshold, k=None (every document above it).
        chosen = EmbeddingsFilter(
            embeddings=parts["embeddings"], similarity_fn=cosine, similarity_threshold=threshold, k=None
        )
        if threshold is None:
            chosen = EmbeddingsFilter(embeddings=parts["embeddings"], similarity_fn=cosine)
        found = chosen.compress_documents([Document(page_content=x, id=str(i)) for i, x in enumerate(texts)], question)
        kept = sorted(int(d.id) for d in found)
    elif kind == "similarity_postprocessor":
        from llama_index.core.postprocessor import SimilarityPostprocessor
        from llama_index.core.schema import NodeWithScore, TextNode

        cutoff = t if row["cutoff"] == "rule" else row["cutoff"]
        processor = SimilarityPostprocessor() if cutoff is None else SimilarityPostprocessor(similarity_cutoff=cutoff)
        nodes = [NodeWithScore(node=TextNode(text=x, id_=str(i)), score=s) for i, (x, s) in enumerate(docs)]
        kept = sorted(int(n.node.node_id) for n in processor.postprocess_nodes(nodes, query_str=question))
    elif kind == "llm_chain_filter":
        counter = CallCounter()
        try:
            found = parts["llm_chain_filter"].compress_documents(
                [Document(page_content=x, id=str(i)) for i, x in enumerate(texts)], question, callbacks=[counter]
            )
            kept = sorted(int(d.id) for d in found)
        except Exception as exc:  # an unparsable reply: LLMChainFilter raises, the user gets nothing
            print(f"llm_chain_filter failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            kept, failed = [], True
        calls = counter.calls
    elif kind == "chunkrag":
        compressor = parts[f"chunkrag:{row['name']}"]
        found = compressor.compress_documents(
            [Document(page_content=x, id=str(i)) for i, x in enumerate(texts)], question
        )
        calls = compressor.chunk_filter.last.model_calls
        if row["split"]:  # passages, not whole documents
            kept_text = "\n\n".join(d.page_content for d in found)
            chars = sum(len(d.page_content) for d in found)
            return Outcome(kept_text, chars, calls, time.perf_counter() - started)
        kept = sorted({int(d.id) for d in found})
    else:
        raise ValueError(f"unknown row kind {kind!r}")
    kept_text = "\n\n".join(texts[i] for i in kept)
    chars = sum(len(texts[i]) for i in kept)
    return Outcome(kept_text, chars, calls, time.perf_counter() - started, failed, kept)


def cosine(x, y):
    """EmbeddingsFilter's default similarity (langchain-community's
    cosine_similarity, the package it imports it from), here in numpy so
    nothing needs langchain-community: rows of ``x`` against rows of ``y``."""
    import numpy as np

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1)[:, None] * np.linalg.norm(y, axis=1)[None, :]
    return (x @ y.T) / np.where(norms == 0, 1.0, norms)


def chunkrag_scores(compressor, question: str, texts: Sequence[str]) -> list[float]:
    """The chunk filter's calibrated score of each whole document (kept or not)."""
    filtered = compressor.chunk_filter.filter(question, list(texts))
    scores = [0.0] * len(texts)
    for passage in (*filtered.kept, *filtered.dropped):
        scores[passage.source] = passage.score or 0.0
    return scores
