"""Post-search processors: pure functions from chunks to chunks.

Each takes the frozen chunk records and returns new ones (with scores and
decisions attached); model calls come in through injected providers.
"""
