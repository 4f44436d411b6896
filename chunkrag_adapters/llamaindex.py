"""The chunk filter in LlamaIndex (``pip install "chunkrag-es[llamaindex]"``).

:class:`ChunkragPostprocessor` is a ``BaseNodePostprocessor``: give it to a
query engine (``index.as_query_engine(llm=..., node_postprocessors=[...])``:
without ``llm=`` LlamaIndex loads OpenAI's, which needs
``llama-index-llms-openai``) or call ``postprocess_nodes(nodes, query_str=...)``
on a retriever's nodes. Each kept passage comes back as a ``TextNode`` holding
the passage's text, the source node's metadata and, under
``metadata["chunkrag"]``, the filter's scores and decision; its score is the
filter's combined score.
"""

from __future__ import annotations

from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, QueryBundle, TextNode

from chunkrag_adapters.core import METADATA_KEY, ChunkFilter


class ChunkragPostprocessor(BaseNodePostprocessor):
    """The chunk filter as a LlamaIndex node postprocessor. ``options``:
    ``ext.chunkrag``'s (default: the calibrated cut, no model call;
    ``{"judge_top": 9}``: the LLM judge on the best nine passages).
    ``split``: each node is split into passages (default) or kept or
    dropped whole. ``title_key``: the metadata key whose value heads a
    node's passages."""

    options: Optional[dict[str, Any]] = Field(default=None, description="ext.chunkrag's options")
    split: bool = Field(default=True, description="split each node into passages")
    title_key: str = Field(default="title", description="metadata key of a node's title")
    settings: Any = Field(default=None, exclude=True)
    model: Any = Field(default=None, exclude=True)
    embedder: Any = Field(default=None, exclude=True)
    _filter: Optional[ChunkFilter] = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "ChunkragPostprocessor"

    @property
    def chunk_filter(self) -> ChunkFilter:
        if self._filter is None:
            self._filter = ChunkFilter(
                self.options, split=self.split, settings=self.settings, model=self.model, embedder=self.embedder
            )
        return self._filter

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("the chunk filter needs the query: pass query_bundle or query_str")
        if not nodes:
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        titles = [str(n.node.metadata.get(self.title_key) or "") for n in nodes]
        filtered = self.chunk_filter.filter(query_bundle.query_str, texts, titles=titles)
        out = []
        for passage in filtered.kept:
            source = nodes[passage.source].node
            # Offsets in the source node's document, where the node knows its own.
            offset = source.start_char_idx or 0
            node = TextNode(
                text=passage.text,
                id_=f"{source.node_id}#{passage.start}" if self.split else source.node_id,
                metadata={**source.metadata, METADATA_KEY: passage.metadata()},
                relationships={NodeRelationship.SOURCE: source.as_related_node_info()},
                start_char_idx=offset + passage.start,
                end_char_idx=offset + passage.end,
            )
            # The filter's view is for the caller, not for the model's prompt nor the embedding.
            node.excluded_llm_metadata_keys = [*source.excluded_llm_metadata_keys, METADATA_KEY]
            node.excluded_embed_metadata_keys = [*source.excluded_embed_metadata_keys, METADATA_KEY]
            out.append(NodeWithScore(node=node, score=passage.score))
        return out


class ChunkragEmbedding(BaseEmbedding):
    """The project's embedder (``CHUNKRAG_EMBED_*``; by default the packaged
    all-MiniLM-L6-v2, offline) as a LlamaIndex embedding model."""

    embedder: Any = Field(default=None, exclude=True)

    @classmethod
    def class_name(cls) -> str:
        return "ChunkragEmbedding"

    def _model(self):
        if self.embedder is None:
            from chunkrag_core.config_file import load_settings
            from chunkrag_core.providers import make_embedder

            self.embedder = make_embedder(load_settings().embedder)
        return self.embedder

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        return [[float(x) for x in row] for row in self._model().embed(list(texts))] if texts else []

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)
