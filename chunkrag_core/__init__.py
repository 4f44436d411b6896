"""What the ingest pipeline, the search extension and the workers share.

The chunk record that flows through every stage, the settings read from the
environment, the pinned model artifacts, the provider adapters (embedders,
chat models, rerankers) and the search engine backends (``engines``: the one
seam to Elasticsearch and OpenSearch). Importing it connects to nothing.
"""

from chunkrag_core.chunk import Chunk, chunk_id_for
from chunkrag_core.settings import ChunkingSettings, Settings

__all__ = ["Chunk", "ChunkingSettings", "Settings", "chunk_id_for"]
