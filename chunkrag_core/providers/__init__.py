"""Model providers behind small protocols, chosen by name from settings.

Each provider is created lazily by :func:`make_embedder` (and, later, the chat
and rerank factories), once per process, so importing this package costs
nothing and a worker loads its model on first use.
"""

from chunkrag_core.providers.embedding import Embedder, EmbeddingError, make_embedder

__all__ = ["Embedder", "EmbeddingError", "make_embedder"]
