"""The chunk filter inside LangChain, LlamaIndex and Haystack.

``core`` runs the filter over the texts a framework retrieved (post-search's
path: ``search_extension.post_search`` and ``chunkrag_filter.pipeline``);
``langchain``, ``llamaindex`` and ``haystack`` each wrap it in their
framework's own types, and are imported only with their extra installed
(``pip install "chunkrag-es[langchain]"``, ``[llamaindex]``, ``[haystack]``).
docs/frameworks.md shows each one.
"""
