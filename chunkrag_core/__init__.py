"""What the ingest pipeline, the search extension and the workers share.

The chunk record that flows through every stage, the settings read from the
environment, the pinned model artifacts, and the provider adapters (embedders
today; chat models and rerankers next). Nothing here talks to Elasticsearch.
"""

from chunkrag_core.chunk import Chunk, chunk_id_for
from chunkrag_core.settings import ChunkingSettings, Settings

__all__ = ["Chunk", "ChunkingSettings", "Settings", "chunk_id_for"]
