"""An Elasticsearch-compatible HTTP gateway: searches pass through to the
cluster unchanged, and a ``_search`` carrying ``ext.chunkrag`` is answered
with the chunks ChunkRAG's LLM filter kept. ``create_app`` builds it."""

from chunkrag_gateway.app import create_app

__all__ = ["create_app"]
