"""The top-k baseline of bench/segments_bench.py: chunks in rank order while
they fit, a chunk that would overflow skipped."""

from bench.segments_bench import top_k_within
from chunkrag_core.chunk import Chunk


def test_top_k_skips_a_chunk_that_would_overflow_and_keeps_filling():
    chunks = [Chunk(doc_id="d", position=i, text="x" * n, start=0, end=n) for i, n in enumerate((300, 400, 150, 60))]
    assert [c.position for c in top_k_within(chunks, 500)] == [0, 2]
    assert [c.position for c in top_k_within(chunks, 900)] == [0, 1, 2]
    assert [c.position for c in top_k_within(chunks, 910)] == [0, 1, 2, 3]
    assert top_k_within(chunks, 50) == []
