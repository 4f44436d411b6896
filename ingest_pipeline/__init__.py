"""Documents in, semantic chunks in Elasticsearch out.

``sources`` reads files into documents, ``sentences`` splits them with NLTK
Punkt, ``chunking`` groups sentences (pure), ``writer`` puts chunks into an
index idempotently, and ``pipeline`` runs the lot with bounded memory.
"""
