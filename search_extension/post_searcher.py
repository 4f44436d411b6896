"""Post-search wired to a cluster: the field listings (cached), the
configured fields per index pattern, the passage source and the declared
document vector, shared by the gateway (which sends the caller's body
itself, as a pass-through search) and `chunkrag search` / `ask` (which send
it through the backend). Blocking; every cluster request goes through the
``client`` given, with its credentials."""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

from chunkrag_core.engines import schema
from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.engines.errors import EngineNotFound
from chunkrag_core.providers import Embedder
from chunkrag_core.settings import Settings
from search_extension.options import ChunkragOptions, OptionError
from search_extension.passages import PassageSource
from search_extension.post_search import PostSearchResult, declared_vector_field, post_search
from search_extension.routing import ROUTING_FIELDS, Route, decide, kinds_of
from search_extension.text_fields import (
    FieldCatalog,
    FieldError,
    TextFields,
    configured_fields,
    detect_fields,
    fields_for_index,
    is_chunk_index,
    parse_field_patterns,
)


class PostSearcher:
    """``embedder`` is made on first use (``make_embedder``); a declared
    document vector of another model than the embedder's is refused here,
    when the searcher is made (VectorFieldError), not on some later query."""

    def __init__(
        self,
        settings: Settings,
        make_embedder: Callable[[], Embedder],
        passage_source: PassageSource | None = None,
        *,
        query_time: PassageSource | None = None,
    ):
        """``passage_source`` replaces where passages come from; without it,
        each hit index's companion (``chunkrag sync``) comes first and
        ``query_time`` (default: chunked and embedded now, cached) serves the rest."""
        self.settings = settings
        self._make_embedder = make_embedder
        self._injected = passage_source is not None
        self._passage_source = passage_source if passage_source is not None else query_time
        self._catalog = FieldCatalog()
        self._unreadable: Any = None  # the companions found missing or refused (made on first use)
        self._patterns = parse_field_patterns(settings.post_search.fields)
        self.doc_vector_field = declared_vector_field(settings)
        self._lock = threading.Lock()

    @property
    def passage_source(self) -> PassageSource:
        with self._lock:
            if self._passage_source is None:
                from search_extension.passages import QueryTimePassages

                self._passage_source = QueryTimePassages(self._make_embedder(), self.settings)
            return self._passage_source

    def _passages_for(self, client: SearchBackend, identity: str) -> PassageSource:
        """The passage source given, else each hit index's companion chunk
        index (``chunkrag sync``) read with ``client``, falling back to
        query-time chunking for what it does not hold. A companion found
        missing or refused is remembered a while per ``identity``, so an
        index without one costs no request to the cluster."""
        if self._injected:
            return self.passage_source
        from search_extension.companion import CompanionsFirst, UnreadableCompanions

        with self._lock:
            if self._unreadable is None:
                self._unreadable = UnreadableCompanions()
            unreadable = self._unreadable
        return CompanionsFirst(
            client, self.passage_source, settings=self.settings, unreadable=unreadable, identity=identity
        )

    def field_types(self, client: SearchBackend, index: str, identity: str = "") -> Mapping[str, tuple[str, ...]]:
        """The fields of ``index`` (an expression or a concrete index) as
        ``client``'s credentials may see them (field-level security applies),
        cached per ``identity`` (who those credentials are)."""
        return self._catalog.types(index, identity, client.field_types)

    def route(
        self, client: SearchBackend, expression: str, options: ChunkragOptions, body_keys: Sequence[str] = ()
    ) -> Route:
        """Which way a search of ``expression`` goes (``routing.decide``), on
        the concrete indices the cluster resolves it to for ``client``'s
        credentials, asked now (never cached: an index synced or made a
        moment ago counts at once). When a companion is left out, the
        expression that excludes it is resolved again: a companion it still
        covers came through an alias the path names, and is searched."""
        decided = decide(expression, self._kinds(client, expression), **_request(options, body_keys))
        if decided.target != expression:
            decided = decide(decided.target, self._kinds(client, decided.target), **_request(options, body_keys))
        return decided

    def _kinds(self, client: SearchBackend, expression: str):
        try:
            return kinds_of(client.concrete_indices(expression, ROUTING_FIELDS))
        except EngineNotFound:
            return None  # the search itself answers that the index is missing

    def check_fields(self, client: SearchBackend, index: str, options: ChunkragOptions, identity: str = "") -> None:
        """The fields a caller named must be text fields of ``index``: an
        OptionError naming the field, before anything is searched."""
        wanted = options.post_search
        if not (wanted.fields or wanted.title_field):
            return
        try:
            detect_fields(self.field_types(client, index, identity), named=wanted.fields, title=wanted.title_field)
        except FieldError as exc:
            raise OptionError(str(exc)) from None

    def text_fields(
        self, client: SearchBackend, concrete: str, options: ChunkragOptions, identity: str = ""
    ) -> TextFields:
        wanted = options.post_search
        types = self.field_types(client, concrete, identity)
        configured = configured_fields(self._patterns, concrete)
        if not (wanted.fields or configured) and is_chunk_index(types):
            # A chunk index's hits (searched beside other indices, or post-search
            # asked for): the chunk's own text, headed by its title.
            return TextFields((schema.TEXT,), schema.TITLE)
        try:
            return fields_for_index(
                types,
                named=wanted.fields,
                title=wanted.title_field,
                configured=configured,
            )
        except FieldError as exc:
            raise OptionError(str(exc)) from None

    def default_body(self, client: SearchBackend, index: str, text: str, options: ChunkragOptions, size: int):
        """A plain ``multi_match`` of ``text`` over the text fields (and the
        title) of ``index``: the body a caller without one of their own gets."""
        found = self.text_fields(client, index, options)
        fields = [*found.fields, *([found.title] if found.title and found.title not in found.fields else [])]
        if not fields:
            raise OptionError(f"index [{index}] has no text field to search; name one with --fields")
        return {"query": {"multi_match": {"query": text, "fields": fields}}, "size": size}

    def filter(
        self,
        client: SearchBackend,
        response: Mapping[str, Any],
        text: str,
        options: ChunkragOptions,
        *,
        identity: str = "",
        model=None,
        judge_many=None,
        reranker=None,
        relevance_model=None,
    ) -> PostSearchResult:
        """The filter over the passages of ``response``'s hits (the answer
        to the caller's own search); the cluster is asked only for the
        field listings of the hits' indices (cached)."""
        listings: dict[str, TextFields] = {}

        def fields_of(concrete: str) -> TextFields:
            if concrete not in listings:
                listings[concrete] = self.text_fields(client, concrete, options, identity)
            return listings[concrete]

        retrieval = self.settings.retrieval
        return post_search(
            response,
            query=text,
            options=options.post_search,
            filter_options=options.filter,
            fields_of=fields_of,
            passage_source=self._passages_for(client, identity),
            embedder=self._make_embedder(),
            model=model,
            judge_many=judge_many,
            reranker=reranker,
            relevance_model=relevance_model,
            weights=(retrieval.bm25_weight, retrieval.knn_weight),
            doc_vector_field=self.doc_vector_field,
        )


def _request(options: ChunkragOptions, body_keys: Sequence[str]) -> dict[str, Any]:
    """What of a request ``routing.decide`` reads."""
    return {
        "target": options.target,
        "mode": options.mode,
        "body_keys": tuple(body_keys),
        "post_search_given": options.post_search_given,
    }
