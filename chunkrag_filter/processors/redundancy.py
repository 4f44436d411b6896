"""Redundancy filter (Algorithm 1, lines 5-10): walk the chunks in rank order
and drop one whose cosine similarity to a chunk already kept exceeds the
threshold. Uses the vectors stored in the index; nothing is re-embedded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from chunkrag_core.chunk import Chunk

# The paper's λ_dup: above 0.9 two chunks say the same thing (it removed 8.5%
# of chunks at 0.9 and 20.5% at 0.5).
DEFAULT_REDUNDANCY_THRESHOLD = 0.9


@dataclass(frozen=True, slots=True)
class Redundant:
    chunk: Chunk
    duplicate_of: str  # chunk id of the kept chunk it repeats
    similarity: float


def drop_redundant(
    chunks: Sequence[Chunk], threshold: float = DEFAULT_REDUNDANCY_THRESHOLD
) -> tuple[list[Chunk], list[Redundant]]:
    """Kept chunks in their original order, and the dropped ones with why.

    A chunk without a vector is kept (it cannot be compared)."""
    kept: list[Chunk] = []
    dropped: list[Redundant] = []
    # The kept chunks' unit vectors, row by row, in one array filled as they
    # are kept (stacking a list again for every chunk is quadratic in copies:
    # post-search filters hundreds of passages at once).
    width = next((c.vector.shape[-1] for c in chunks if c.vector is not None), 0)
    kept_vectors = np.empty((sum(c.vector is not None for c in chunks), width), dtype=np.float32)
    kept_ids: list[str] = []  # the chunk id of each row
    for chunk in chunks:
        if chunk.vector is None:
            kept.append(chunk)
            continue
        unit = _unit(np.asarray(chunk.vector, dtype=np.float32))
        if kept_ids:
            similarities = kept_vectors[: len(kept_ids)] @ unit
            best = int(np.argmax(similarities))
            if similarities[best] > threshold:
                dropped.append(Redundant(chunk, kept_ids[best], float(similarities[best])))
                continue
        kept.append(chunk)
        kept_vectors[len(kept_ids)] = unit
        kept_ids.append(chunk.chunk_id)
    return kept, dropped


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector
