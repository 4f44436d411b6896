"""The ``chunkrag`` command: ingest, search, the demo, and local services."""
