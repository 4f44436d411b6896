"""Retrieval over a chunk index, and (next) the gateway and its post-search
processors. ``queries`` and ``fusion`` are pure; ``retriever`` runs them."""
