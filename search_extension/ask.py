"""Ask a question of a chunk index: hybrid retrieval, then the chunk filter,
in-process. (The gateway and the Celery workers run the same two calls.)"""

from __future__ import annotations

from dataclasses import dataclass

from chunkrag_core.providers.chat import ChatModel
from search_extension.chunk_filter import FilterOptions, FilterResult, judge_in_threads, run_filter
from search_extension.retriever import HybridRetriever, RetrievalResult

# Candidates handed to the filter: each costs at least one model call.
DEFAULT_CANDIDATES = 8


@dataclass(frozen=True, slots=True)
class AskResult:
    question: str
    retrieval: RetrievalResult
    filtered: FilterResult


def ask(question: str, *, retriever: HybridRetriever, model: ChatModel, options: FilterOptions = FilterOptions(), candidates: int = DEFAULT_CANDIDATES, parallel: int = 2, model_name: str = "") -> AskResult:
    # Vectors come along for the redundancy filter: nothing is re-embedded.
    retrieval = retriever.search(question, size=candidates, include_vectors=True)
    filtered = run_filter(question, retrieval.chunks, model=model, options=options, judge_many=judge_in_threads(model, threads=parallel, model_name=model_name))
    return AskResult(question, retrieval, filtered)
