"""The chunk filter in LangChain (``pip install "chunkrag-es[langchain]"``).

:class:`ChunkragCompressor` is a ``BaseDocumentCompressor``: put it in a
``ContextualCompressionRetriever`` over any retriever (an
``ElasticsearchStore``'s, say) and only the kept passages reach the model.
:class:`ChunkragRetriever` searches an index with the filter itself: a chunk
index (`chunkrag ingest`) or any other index (post-search).

Each returned ``Document`` holds the kept passage as ``page_content`` and,
under ``metadata["chunkrag"]``, the filter's scores and decision (see
``chunkrag_adapters.core.Passage.metadata``), beside the source document's
own metadata.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.callbacks.manager import CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from chunkrag_adapters.core import METADATA_KEY, ChunkFilter, Filtered, IndexSearch, hit_metadata


class ChunkragCompressor(BaseDocumentCompressor):
    """The chunk filter as a LangChain document compressor.

    ``options``: ``ext.chunkrag``'s (default: the calibrated cut, no model
    call; ``{"judge_top": 9}`` sends the best nine passages to the LLM judge,
    the chat model of ``CHUNKRAG_CHAT_BASE_URL``). ``split``: each document
    is split into passages (default) or kept or dropped whole.
    ``title_key``: the metadata key whose value heads a document's passages."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    options: Optional[dict[str, Any]] = None
    split: bool = True
    title_key: str = "title"
    settings: Any = None
    model: Any = None
    embedder: Any = None
    _filter: ChunkFilter | None = PrivateAttr(default=None)

    @property
    def chunk_filter(self) -> ChunkFilter:
        if self._filter is None:
            self._filter = ChunkFilter(
                self.options, split=self.split, settings=self.settings, model=self.model, embedder=self.embedder
            )
        return self._filter

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Optional[Callbacks] = None
    ) -> Sequence[Document]:
        if not documents:
            return []
        titles = [str(d.metadata.get(self.title_key) or "") for d in documents]
        filtered = self.chunk_filter.filter(query, [d.page_content for d in documents], titles=titles)
        return documents_of(filtered, [dict(d.metadata) for d in documents], [d.id for d in documents], self.split)


class ChunkragRetriever(BaseRetriever):
    """Search ``index`` with the filter: a chunk index by its hybrid
    retrieval, any other index by a ``multi_match`` over its text fields (or
    ``body_of(query)``), then the filter over its hits' passages. The
    cluster is the one of ``ES_URL`` (or ``OPENSEARCH_URL``) unless a
    ``backend`` (``chunkrag_core.engines.make_backend``) is given."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: str
    options: Optional[dict[str, Any]] = None
    size: int = 10
    settings: Any = None
    backend: Any = None
    model: Any = None
    embedder: Any = None
    body_of: Any = None
    _search: IndexSearch | None = PrivateAttr(default=None)

    @property
    def index_search(self) -> IndexSearch:
        if self._search is None:
            self._search = IndexSearch(
                self.index,
                self.options,
                size=self.size,
                settings=self.settings,
                backend=self.backend,
                model=self.model,
                embedder=self.embedder,
                body_of=self.body_of,
            )
        return self._search

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits, filtered = self.index_search.search(query)
        metadata = [hit_metadata(h) for h in hits]
        return documents_of(filtered, metadata, [str(h.get("_id")) for h in hits])


class ChunkragEmbeddings(Embeddings):
    """The project's embedder (``CHUNKRAG_EMBED_*``; by default the packaged
    all-MiniLM-L6-v2, offline) as LangChain embeddings, for a store whose
    vectors should match the filter's."""

    def __init__(self, embedder=None, settings=None):
        self._embedder, self._settings = embedder, settings

    @property
    def embedder(self):
        if self._embedder is None:
            from chunkrag_core.config_file import load_settings
            from chunkrag_core.providers import make_embedder

            self._embedder = make_embedder((self._settings or load_settings()).embedder)
        return self._embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self.embedder.embed(list(texts))] if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def documents_of(
    filtered: Filtered, metadata: Sequence[Mapping[str, Any]], ids: Sequence[Any], split: bool = True
) -> list[Document]:
    """One ``Document`` per kept passage: its text, its source's metadata
    and the filter's view of it under ``metadata["chunkrag"]``; a whole
    document (``split`` False) keeps its id."""
    out = []
    for passage in filtered.kept:
        source = passage.source
        # A passage of a split document gets an id of its own: the source's and its offset.
        own = ids[source] if ids[source] is None or not split else f"{ids[source]}#{passage.start}"
        out.append(
            Document(
                page_content=passage.text,
                metadata={**metadata[source], METADATA_KEY: passage.metadata()},
                id=own,
            )
        )
    return out
