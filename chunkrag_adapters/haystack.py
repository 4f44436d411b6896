"""The chunk filter in Haystack (``pip install "chunkrag-es[haystack]"``).

:class:`ChunkragFilter` is a component: connect a retriever's ``documents``
and the query to it, and its ``documents`` output holds the kept passages,
each a ``Document`` whose ``content`` is the passage's text, whose ``meta``
is the source document's plus the filter's scores and decision under
``meta["chunkrag"]``, and whose ``score`` is the filter's combined score.
It serialises with the pipeline (``to_dict`` / ``from_dict``: its options
and split); the embedder loads in ``warm_up``.
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from chunkrag_adapters.core import METADATA_KEY, ChunkFilter


@component
class ChunkragFilter:
    """The chunk filter over a retriever's documents. ``options``:
    ``ext.chunkrag``'s (default: the calibrated cut, no model call;
    ``{"judge_top": 9}``: the LLM judge on the best nine passages).
    ``split``: each document is split into passages (default) or kept or
    dropped whole. ``title_key``: the meta key whose value heads a
    document's passages."""

    def __init__(self, options: Optional[dict[str, Any]] = None, split: bool = True, title_key: str = "title"):
        self.options, self.split, self.title_key = options, split, title_key
        # Checked now: a pipeline with options the filter cannot use fails when it is built.
        self._filter = ChunkFilter(options, split=split)

    def warm_up(self) -> None:
        """Load the embedder (the local MiniLM by default) before the first query."""
        self._filter.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, options=self.options, split=self.split, title_key=self.title_key)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChunkragFilter":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document]) -> dict[str, list[Document]]:
        """The kept passages of ``documents`` for ``query``, in the documents' order."""
        if not documents:
            return {"documents": []}
        texts = [d.content or "" for d in documents]
        titles = [str((d.meta or {}).get(self.title_key) or "") for d in documents]
        filtered = self._filter.filter(query, texts, titles=titles)
        kept = []
        for passage in filtered.kept:
            source = documents[passage.source]
            kept.append(
                Document(
                    id=f"{source.id}#{passage.start}" if self.split else source.id,
                    content=passage.text,
                    meta={**(source.meta or {}), METADATA_KEY: passage.metadata()},
                    score=passage.score,
                )
            )
        return {"documents": kept}
