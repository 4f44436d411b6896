"""Retrieval over a chunk index and the post-search processors; the gateway
(``chunkrag_gateway``) serves them. ``queries`` and ``fusion`` are pure;
``retriever`` runs them."""
