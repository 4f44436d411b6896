"""The filter over texts a framework retrieved, without the framework.

Each adapter (``langchain``, ``llamaindex``, ``haystack``) turns its
framework's documents into texts, calls :meth:`ChunkFilter.filter`, and turns
the :class:`Passage` values back into its framework's documents. Nothing
here is a second copy of the filter: the texts go through post-search
(``search_extension.post_search``) as the hits of a caller's own search do
through the gateway, each text one hit, split into passages (the ingest
chunker) or kept whole, then ``chunkrag_filter.pipeline.run_filter`` with
the options of ``ext.chunkrag`` (``search_extension.options``: declared
once). One difference: a framework's texts are its retriever's candidates
for the query, so they are one pool (``pooled``), their passages scored by
BM25 and cosine over all the texts' passages and filtered together, as a
chunk index's candidates are; a search's hits are each filtered on their own.

:class:`IndexSearch` is the same for a whole search: a chunk index's hybrid
retrieval and the filter (``search_extension.ask``), or post-search over
any other index, as ``chunkrag search`` decides.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_core.config_file import load_settings
from chunkrag_core.settings import Settings
from ingest_pipeline.source_fields import SourceField
from search_extension.options import ChunkragOptions, parse_options
from search_extension.post_search import PostSearchResult, post_search
from search_extension.post_search_response import passage_entry
from search_extension.routing import POST_SEARCH
from search_extension.text_fields import TextFields

# The hit index and text field the framework's texts stand in as: they name
# the passages (``SourceField.companion_id``), never an index of a cluster.
INPUT_INDEX = "input"
TEXT_FIELD = "text"
# Under this key of a framework document's metadata the filter's view of the passage.
METADATA_KEY = "chunkrag"


@dataclass(frozen=True, slots=True)
class Passage:
    """One passage the filter kept (or dropped) of the ``source``-th text."""

    source: int
    text: str
    start: int  # offsets within the source text
    end: int
    score: float | None  # the filter's combined score (the passage score without the filter)
    kept: bool
    reason: str | None  # the filter's decision: above_threshold, fallback, below_threshold, ...
    scores: Mapping[str, float] = field(default_factory=dict)
    threshold: float | None = None

    def metadata(self) -> dict[str, Any]:
        """What the adapters put under ``metadata["chunkrag"]``: the same
        fields as a post-search hit's ``_chunkrag.passages`` (docs/gateway.md)."""
        return {
            "start": self.start,
            "end": self.end,
            "score": self.score,
            "scores": dict(self.scores),
            "kept": self.kept,
            "reason": self.reason,
            "threshold": self.threshold,
        }


@dataclass(frozen=True, slots=True)
class Filtered:
    """The filter over one query's texts: the kept passages in the texts'
    order (a text's own in text order), the dropped ones, and what it cost."""

    kept: tuple[Passage, ...]
    dropped: tuple[Passage, ...]
    threshold: float | None
    nothing_relevant: bool
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    # When nothing relevant was found, why (the gate's reading, or the best
    # score against the threshold); the adapters then return no document.
    nothing_relevant_reason: str | None = None

    @property
    def characters(self) -> int:
        return sum(len(p.text) for p in self.kept)


def resolve(options: Mapping[str, Any] | ChunkragOptions | None) -> ChunkragOptions:
    """``options`` as ``ext.chunkrag`` takes them (``{"judge_top": 9}`` for
    the LLM judge), validated and resolved; an OptionError names the first
    one it cannot use. No answer is written unless ``"answer": true``."""
    if isinstance(options, ChunkragOptions):
        return options
    return parse_options(dict(options or {}), where="options", surface="search")


class _Parts:
    """The settings' embedder and chat model, each made on first use (the
    default filter calls no model; the judge only when asked for)."""

    def __init__(self, settings: Settings | None, model, embedder):
        self._settings, self._model, self._embedder = settings, model, embedder
        self._lock = threading.Lock()

    @property
    def settings(self) -> Settings:
        with self._lock:
            if self._settings is None:
                self._settings = load_settings()
            return self._settings

    @property
    def embedder(self):
        if self._embedder is None:
            from chunkrag_core.providers import make_embedder

            self._embedder = make_embedder(self.settings.embedder)
        return self._embedder

    @property
    def model(self):
        if self._model is None:
            from chunkrag_core.providers import make_chat

            self._model = make_chat(self.settings.chat)
        return self._model

    def judge_many(self):
        from chunkrag_filter.judging import judge_in_threads

        chat = self.settings.chat
        return judge_in_threads(self.model, threads=chat.parallel, model_name=chat.model)


class ChunkFilter:
    """The chunk filter over texts: ``filter(query, texts)``.

    ``options``: ``ext.chunkrag``'s (default: the calibrated cut, no model
    call; ``{"judge_top": 9}``: the LLM judge on the best nine passages).
    ``split`` (default True): each text is split into passages as post-search
    splits a hit's field, and only the kept passages come back; False: each
    text is one passage, kept or dropped whole. ``settings`` (default:
    ``load_settings()``, the environment and ``chunkrag.toml``) names the
    embedder and the chat model; ``model`` and ``embedder`` replace them."""

    def __init__(
        self,
        options: Mapping[str, Any] | ChunkragOptions | None = None,
        *,
        split: bool = True,
        settings: Settings | None = None,
        model=None,
        embedder=None,
    ):
        self.options = resolve(options)
        self.split = split
        self._parts = _Parts(settings, model, embedder)
        self._passages = None
        self._lock = threading.Lock()
        self._last = threading.local()

    @property
    def settings(self) -> Settings:
        return self._parts.settings

    @property
    def last(self) -> Filtered | None:
        """This thread's last result: what the adapters returned, plus what
        was dropped and what it cost (model calls, tokens, timings)."""
        return getattr(self._last, "filtered", None)

    def warm_up(self) -> None:
        """Load the embedder now rather than on the first query."""
        self._parts.embedder.embed(["warm up"])

    def _passage_source(self):
        with self._lock:
            if self._passages is None:
                if self.split:
                    from search_extension.passages import QueryTimePassages

                    self._passages = QueryTimePassages(self._parts.embedder, self.settings)
                else:
                    self._passages = WholeTexts(self._parts.embedder)
            return self._passages

    def filter(self, query: str, texts: Sequence[str], *, titles: Sequence[str] | None = None) -> Filtered:
        """The kept passages of ``texts`` for ``query`` (``titles``: each
        text's title, heading its passages for the scoring, as a hit's title
        field does)."""
        if not query or not query.strip():
            raise ValueError("the filter needs the query text; got none")
        texts = list(texts)
        titles = list(titles) if titles is not None else [""] * len(texts)
        if len(titles) != len(texts):
            raise ValueError(f"got {len(titles)} titles for {len(texts)} texts; give one per text (or none)")
        response = {
            "hits": {
                "hits": [
                    {"_index": INPUT_INDEX, "_id": str(i), "_source": {TEXT_FIELD: text, "title": title or ""}}
                    for i, (text, title) in enumerate(zip(texts, titles))
                ]
            }
        }
        fields = TextFields((TEXT_FIELD,), "title")
        result = post_search(
            response,
            query=self.options.query or query,
            options=self.options.post_search,
            filter_options=self.options.filter,
            fields_of=lambda _index: fields,
            passage_source=self._passage_source(),
            embedder=self._parts.embedder,
            model=self._parts.model,
            judge_many=self._parts.judge_many(),
            weights=(self.settings.retrieval.bm25_weight, self.settings.retrieval.knn_weight),
            pooled=True,
        )
        self._last.filtered = filtered_of(result)
        return self._last.filtered


def filtered_of(result: PostSearchResult) -> Filtered:
    """A post-search result as :class:`Filtered`: each hit stands for the
    text of the same number."""
    filtered = result.filtered
    threshold = filtered.threshold.value if filtered is not None and filtered.threshold is not None else None
    reasons = {d.chunk.chunk_id: d.reason for d in filtered.decisions} if filtered is not None else {}
    kept, dropped = [], []
    for hit in result.hits:
        source = int(hit.doc_id)
        for chunk in sorted(hit.kept, key=lambda c: c.start):
            kept.append(_passage(source, chunk, True, reasons.get(chunk.chunk_id), threshold))
        for chunk, reason in sorted(hit.dropped, key=lambda d: d[0].start):
            dropped.append(_passage(source, chunk, False, reason, threshold))
    return Filtered(
        kept=tuple(kept),
        dropped=tuple(dropped),
        threshold=threshold,
        nothing_relevant=filtered.nothing_relevant if filtered is not None else False,
        model_calls=filtered.model_calls if filtered is not None else 0,
        prompt_tokens=filtered.prompt_tokens if filtered is not None else 0,
        completion_tokens=filtered.completion_tokens if filtered is not None else 0,
        timings_ms=dict(result.timings_ms),
        nothing_relevant_reason=filtered.nothing_relevant_reason if filtered is not None else None,
    )


def _passage(source: int, chunk: Chunk, kept: bool, reason: str | None, threshold: float | None) -> Passage:
    entry = passage_entry(chunk, kept=kept, reason=reason)
    return Passage(
        source=source,
        text=chunk.text,
        start=entry["start"],
        end=entry["end"],
        score=entry["score"],
        kept=kept,
        reason=entry.get("reason"),
        scores=entry["scores"],
        threshold=threshold,
    )


class WholeTexts:
    """A passage source that keeps each text whole: one passage per text,
    embedded as it is (``split=False``)."""

    def __init__(self, embedder):
        self._embedder = embedder

    def passages(self, fields: Sequence[SourceField], *, query: str = "") -> Mapping[str, Sequence[Chunk]]:
        shown = [f for f in fields if f.text.strip()]
        if not shown:
            return {}
        vectors = self._embedder.embed([f.text for f in shown])
        return {
            f.companion_id: (
                Chunk(
                    doc_id=f.companion_id,
                    position=0,
                    text=f.text,
                    start=0,
                    end=len(f.text),
                    title=f.title,
                    header=f.title,
                    metadata={"source_field": f.field},
                    vector=vector,
                ),
            )
            for f, vector in zip(shown, vectors)
        }


# --- a whole search: a chunk index's retrieval or post-search on any other ------------


class IndexSearch:
    """Search ``index`` with the filter, as ``chunkrag search`` and the
    gateway decide: a chunk index (`chunkrag ingest`) by its hybrid
    retrieval, then the filter over its chunks; any other index by a
    ``multi_match`` over its text fields (or ``body_of(query)``, a body of
    your own), then the filter over its hits' passages. ``backend``
    (default: ``make_backend(settings)``) is the cluster's client."""

    def __init__(
        self,
        index: str,
        options: Mapping[str, Any] | ChunkragOptions | None = None,
        *,
        size: int = 10,
        settings: Settings | None = None,
        backend=None,
        model=None,
        embedder=None,
        body_of: Callable[[str], Mapping[str, Any]] | None = None,
    ):
        self.index, self.size, self.body_of = index, size, body_of
        self.options = resolve(options)
        self._parts = _Parts(settings, model, embedder)
        self._backend = backend
        self._searcher = None

    @property
    def backend(self):
        if self._backend is None:
            from chunkrag_core.engines import make_backend

            self._backend = make_backend(self._parts.settings)
        return self._backend

    @property
    def searcher(self):
        if self._searcher is None:
            from search_extension.post_searcher import PostSearcher

            self._searcher = PostSearcher(self._parts.settings, lambda: self._parts.embedder)
        return self._searcher

    def search(self, query: str) -> tuple[list[Mapping[str, Any]], Filtered]:
        """The kept passages, and for each text they refer to (``Passage.source``)
        the hit it came from: ``{"_index", "_id", "_source"...}`` for a
        post-searched index, the chunk's own fields for a chunk index."""
        options = self.options
        text = options.query or query
        if self.body_of is not None:
            return self._post_search(text)
        # The gateway's rule (search_extension/routing.py): chunk retrieval only
        # when every concrete index is a chunk index and the options allow it.
        route = self.searcher.route(self.backend, self.index, options)
        if route.way == POST_SEARCH:
            return self._post_search(text)
        return self._chunks(text)

    def _post_search(self, text: str) -> tuple[list[Mapping[str, Any]], Filtered]:
        options = self.options
        self.searcher.check_fields(self.backend, self.index, options)
        if self.body_of is not None:
            body = dict(self.body_of(text))
        else:
            body = self.searcher.default_body(self.backend, self.index, text, options, self.size)
        response = self.backend.search(self.index, body)
        result = self.searcher.filter(
            self.backend,
            response,
            text,
            options,
            model=self._parts.model,
            judge_many=self._parts.judge_many(),
        )
        hits = [dict(hit) for hit in response.get("hits", {}).get("hits", [])]
        # post_search names each hit by its _id; Filtered names it by its number.
        numbered = dataclasses.replace(
            result,
            hits=tuple(dataclasses.replace(found, doc_id=str(i)) for i, found in enumerate(result.hits)),
        )
        return hits, filtered_of(numbered)

    def _chunks(self, text: str) -> tuple[list[Mapping[str, Any]], Filtered]:
        from search_extension.ask import DEFAULT_CANDIDATES, ask
        from search_extension.retriever import HybridRetriever

        options = self.options
        settings = self._parts.settings
        retriever = HybridRetriever(self.backend, self._parts.embedder, self.index, settings.retrieval)
        result = ask(
            text,
            retriever=retriever,
            model=self._parts.model,
            options=dataclasses.replace(options.filter, answer=False),
            candidates=options.candidates or (DEFAULT_CANDIDATES if options.stages else self.size),
            mode=options.mode,
            stages=options.stages,
            judge_many=self._parts.judge_many(),
        )
        filtered = result.filtered
        chunks = list(result.retrieval.chunks)
        number = {c.chunk_id: i for i, c in enumerate(chunks)}
        hits = [
            {"_index": self.index, "_id": c.chunk_id, "doc_id": c.doc_id, "position": c.position, "title": c.title}
            for c in chunks
        ]
        threshold = filtered.threshold.value if filtered is not None and filtered.threshold is not None else None
        if filtered is None:
            kept = [_passage(number[c.chunk_id], c, True, None, None) for c in chunks]
            return hits, Filtered(tuple(kept), (), None, False, 0, 0, 0, dict(result.timings_ms))
        reasons = {d.chunk.chunk_id: d.reason for d in filtered.decisions}
        kept = [_passage(number[c.chunk_id], c, True, reasons.get(c.chunk_id), threshold) for c in filtered.kept]
        dropped = [
            _passage(number[d.chunk.chunk_id], d.chunk, False, d.reason, threshold)
            for d in filtered.decisions
            if not d.kept and d.chunk.chunk_id in number
        ]
        return hits, Filtered(
            tuple(kept),
            tuple(dropped),
            threshold,
            filtered.nothing_relevant,
            filtered.model_calls,
            filtered.prompt_tokens,
            filtered.completion_tokens,
            dict(result.timings_ms),
            filtered.nothing_relevant_reason,
        )


# What a kept passage's metadata says of the hit it came from.
HIT_KEYS = ("_index", "_id", "_score", "doc_id", "position", "title")


def hit_metadata(hit: Mapping[str, Any]) -> dict[str, Any]:
    """The hit a passage came from, as metadata: its index, id and score
    (and for a chunk, its document, position and title)."""
    return {key: hit[key] for key in HIT_KEYS if key in hit}
