"""The relevance studies' pure parts, with literal values: two models'
scores compared, and documents ranked after the rerank stage."""

import pytest

from chunkrag_eval.relevance_study import score_differences
from chunkrag_eval.reranked_retrieval import documents_after_rerank


def test_score_differences_give_the_largest_and_mean_gap_and_changed_best_candidates():
    mine = [[0.9, 0.1, 0.2], [0.3, 0.6]]
    theirs = [[0.8, 0.1, 0.2], [0.7, 0.6]]
    assert score_differences(mine, theirs) == {
        "candidates": 5,
        "max_abs": 0.4,
        "mean_abs": pytest.approx(0.1),
        "best_candidate_differs": 0.5,
    }
    assert score_differences([], []) == {"candidates": 0}


def test_documents_are_ranked_by_their_best_reranked_chunk_then_the_retrievals_own_ranking():
    chunk_docs = ["a", "b", "a", "c"]  # the retrieval's top chunks
    order = [(2, 0.9), (3, 0.8), (0, 0.5), (1, 0.1)]  # the reranker's: best first
    rest = ["b", "a", "d", "c", "e"]  # the retrieval's documents, one best chunk each
    assert documents_after_rerank(chunk_docs, order, rest) == ["a", "c", "b", "d", "e"]
    assert documents_after_rerank([], [], rest) == rest
