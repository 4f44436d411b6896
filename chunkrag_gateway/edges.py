"""Everything the gateway talks to, injected or made on first use: nothing
connects, loads a model or imports Celery when the app is created."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import threading
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from chunkrag_core import tracing
from chunkrag_core.engines.profile import engine_of
from chunkrag_core.redaction import redact_url
from chunkrag_core.settings import Settings
from chunkrag_filter import budget as budgets
from chunkrag_filter.budget import Budget
from chunkrag_filter.judging import BY_GATEWAY, BY_WORKERS, Degrading, JudgeMany, Place, judge_in_threads
from chunkrag_filter.relevance_places import DegradingRelevance, RelevanceModel
from chunkrag_gateway import errors
from chunkrag_gateway.dialect import ChunkragOptions, ensemble_scales
from chunkrag_gateway.filter_threads import lower_priority
from chunkrag_gateway.heap import settle_heap
from chunkrag_gateway.identity import Caller, es_for
from chunkrag_gateway.model_turns import ModelTurns
from chunkrag_gateway.passthrough import HttpTransport, Passthrough
from search_extension.ask import AskResult, ask
from search_extension.passages import PassageSource
from search_extension.post_searcher import PostSearcher
from search_extension.routing import Route

# budget in seconds -> the JudgeMany that judges one query within it.
JudgeManyFactory = Callable[[float], JudgeMany]

# Redis and the workers answer a health probe within this, or count as down.
HEALTH_TIMEOUT_S = 2.0
# Threads of the gateway's relevance model per batch: the searching thread
# alone, whose priority is its caller's (filter_threads.py); onnxruntime's
# own intra-op thread would run every caller's batches at one priority. A
# lone search's batches take longer; searches running together lose nothing
# (the flood's figures: bench/results/gateway_flood.json).
GATEWAY_RELEVANCE_THREADS = 1
# Pairs per batch of the gateway's relevance model: the unit of its fair
# turns (model_turns.py), so a quiet caller's batch waits for the end of at
# most this much of another caller's work. One thread scored sixteen pairs
# of a long query in 0.98 s as one batch and in 0.84 s as four batches of
# four (less padding; the 2-core machine loaded by other work): smaller
# batches cost nothing here, and the gate's best three fit in one.
GATEWAY_RELEVANCE_BATCH = 4

log = logging.getLogger("chunkrag.gateway")


class Edges:
    def __init__(
        self,
        settings: Settings,
        *,
        es=None,
        model=None,
        embedder=None,
        judge_many_factory: JudgeManyFactory | None = None,
        http_transport: HttpTransport | None = None,
        shared_redis=None,
        passage_source: PassageSource | None = None,
        relevance_model: RelevanceModel | None = None,
    ):
        self.settings = settings
        # shared_redis: the instances' shared state (shared_state.py), for the derived keys.
        self.passthrough = Passthrough(settings, http_transport, shared_redis)
        self._es, self._model, self._embedder = es, model, embedder
        self._owns_es = es is None  # an injected client belongs to the caller
        self._judge_many_factory = judge_many_factory
        self._relevance_model = relevance_model
        self._own_relevance = None
        # The gateway's relevance model takes its batches in turns fair between
        # callers (model_turns.py), as many at once as there are cores (never
        # more than the model-stage places), one of them kept for searches at
        # the filter priority: a heavy or busy caller's batch, at the lower
        # one, never holds up a quiet caller's.
        slots = max(1, min(settings.gateway.max_filtered, os.cpu_count() or 1))
        self.model_turns = ModelTurns(slots, reserved=1)
        self._embedder_made_here = embedder is None
        self.models = ModelsLoading()
        self._models_thread: threading.Thread | None = None
        self._celery = None
        self._worker_health = None
        self._reranker = None
        self._score_cache = None
        self._lock = threading.Lock()  # the blocking edges are made from worker threads
        # Post-search: where a hit's passages come from (default: chunked and
        # embedded at query time, cached), the field listings per index and
        # caller, the configured fields, the declared whole-document vector
        # field (checked here: a model mismatch fails at start).
        self.post_searcher = PostSearcher(settings, lambda: self.embedder, passage_source)

    # --- made on first use -------------------------------------------------

    @property
    def es(self):
        """The base search backend. In forward mode it holds no credentials:
        each search adds its caller's (``identity.es_for``)."""
        with self._lock:
            if self._es is None:
                from chunkrag_core.engines import make_backend

                settings = self.settings
                if settings.gateway.auth != "service":
                    settings = dataclasses.replace(
                        settings,
                        es_url=strip_credentials(settings.es_url),
                        es_api_key=None,
                        opensearch_url=strip_credentials(settings.opensearch_url),
                    )
                # Elasticsearch or OpenSearch, as SEARCH_BACKEND says.
                self._es = make_backend(settings)
            return self._es

    @property
    def model(self):
        with self._lock:
            if self._model is None:
                from chunkrag_core.providers import make_chat

                self._model = make_chat(self.settings.chat)
            return self._model

    @property
    def embedder(self):
        with self._lock:
            if self._embedder is None:
                from chunkrag_core.providers import make_embedder

                self._embedder = make_embedder(self.settings.embedder)
            return self._embedder

    @property
    def celery(self):
        with self._lock:
            if self._celery is None:
                from workers.app import make_app

                self._celery = make_app(self.settings)
            return self._celery

    def reranker(self, wanted: str):
        if wanted != "cohere":
            return None
        rerank = self.settings.rerank
        if not (rerank.api_key or rerank.base_url):
            raise errors.bad_request(
                "rerank [cohere] needs a Cohere key (CHUNKRAG_RERANK_API_KEY or CO_API_KEY); "
                "use [local], [score] or [off]"
            )
        with self._lock:
            if self._reranker is None:
                from chunkrag_core.providers.rerank import CohereReranker

                self._reranker = CohereReranker(
                    api_key=rerank.api_key or "", model=rerank.model, base_url=rerank.base_url
                )
            return self._reranker

    @property
    def worker_health(self):
        """What one query's dispatch learned of Redis and the workers, for
        the next: after a failure, queries go to the gateway's threads at
        once for a moment instead of each finding out again."""
        with self._lock:
            if self._worker_health is None:
                from workers.dispatch import WorkerHealth

                self._worker_health = WorkerHealth()
            return self._worker_health

    def judge_many(self, budget_s: float) -> JudgeMany:
        """Where one query is judged. With judge=celery: on the workers, and
        when Redis or the workers cannot be reached, in the gateway's own
        threads, or (no model either) by the retrieval signals; the result
        says which (``judged_by``). With judge=threads: in the gateway's
        threads, a model failure failing the query."""
        if self._judge_many_factory is not None:
            return self._judge_many_factory(budget_s)
        settings = self.settings
        threads = Place(
            BY_GATEWAY,
            judge_in_threads(
                self.model,
                threads=settings.chat.parallel,
                cache=self.score_cache,
                model_name=settings.chat.model,
                budget_s=budget_s,
            ),
        )
        if settings.workers.judge != "celery":
            return threads
        from workers.dispatch import celery_judge_many

        workers = celery_judge_many(self.celery, settings=settings, budget_s=budget_s, health=self.worker_health)
        return Degrading([Place(BY_WORKERS, workers), threads])

    @property
    def local_relevance(self) -> RelevanceModel:
        """The project's relevance model in this process (injected, or the
        gateway's own, read on first use or at start). The gateway's runs
        each batch on the searching thread alone (GATEWAY_RELEVANCE_THREADS):
        an intra-op thread of onnxruntime's serves every search's batches at
        one priority, and a busy caller's searches must yield the CPU
        (``filter_threads.py``); and its batches take fair turns between the
        callers (``model_turns.py``)."""
        if self._relevance_model is not None:
            return self._relevance_model
        with self._lock:
            if self._own_relevance is None:
                from chunkrag_core.providers.local_relevance import LocalRelevanceModel

                # What a burst of searches allocated goes back (allocator.py).
                self._own_relevance = LocalRelevanceModel(
                    threads=GATEWAY_RELEVANCE_THREADS,
                    batch_size=GATEWAY_RELEVANCE_BATCH,
                    return_memory=True,
                    turns=self.model_turns.turn,
                )
            return self._own_relevance

    def relevance_model(self, budget_s: float) -> RelevanceModel:
        """Where one query's relevance scores are made (relevance:
        crossencoder, rerank: local). With judge=celery: on the workers, and
        when they cannot score (no broker or worker, a failed or late task),
        here; the result says which (``relevance_by``)."""
        here = (BY_GATEWAY, self.local_relevance)
        if self.settings.workers.judge != "celery":
            return DegradingRelevance([here])
        from workers.relevance_dispatch import celery_relevance

        workers = celery_relevance(self.celery, settings=self.settings, budget_s=budget_s, health=self.worker_health)
        return DegradingRelevance([(BY_WORKERS, workers), here])

    def start_loading_models(self) -> threading.Thread:
        """Read the models a filtered search uses (the embedder made here,
        the relevance model) and make the search backend (its client's
        imports: about a second on a loaded machine) in a thread of their
        own, now, so the first search does not wait for them; health is not
        ok until they are read."""
        self.models.begin()
        self._models_thread = threading.Thread(target=self._load_models, name="chunkrag-models", daemon=True)
        self._models_thread.start()
        return self._models_thread

    def wait_for_models(self, timeout_s: float) -> bool:
        """Whether the models started at start are read (or failed) within
        ``timeout_s``; True when none were started."""
        thread = self._models_thread
        if thread is not None:
            thread.join(max(0.0, timeout_s))
        return thread is None or not thread.is_alive()

    def _load_models(self) -> None:
        # The models' own threads (onnxruntime's intra-op pool) are made now
        # and keep this thread's priority: filtered searches' priority.
        lower_priority(self.settings.gateway.filter_nice)
        failed = None
        steps = (
            ("the search backend", lambda: self.es),  # made, no request sent
            ("the embedder", self._load_embedder),
            ("the relevance model", self._load_relevance),
            # Post-search cuts each hit into sentences: Punkt's tables and
            # imports took about 0.3 s of the first such search.
            ("the sentence splitter", _load_sentence_splitter),
        )
        for name, load in steps:
            try:
                load()
            except Exception as exc:  # noqa: BLE001 - reported by health; a search would raise it again
                # The detail (a file path, say) goes to the log; health names the model.
                log.error("loading %s failed: %s: %s", name, type(exc).__name__, exc)
                failed = failed or f"{name} could not be loaded"
        # The models and clients are read: what is alive now lives as long
        # as the gateway, and is kept out of each full collection's walk.
        settle_heap()
        self.models.finish(failed)

    def _load_embedder(self) -> None:
        if self._embedder_made_here and self.settings.embedder.provider == "local":
            self.embedder.embed(["warm-up"])  # reads the graph and runs it once

    def _load_relevance(self) -> None:
        if self._relevance_model is None:
            self.local_relevance.load()

    @property
    def score_cache(self):
        """The workers' Redis score cache, shared by in-process judging: a
        repeated query costs no model call either way. A cache that cannot
        reach Redis is a miss, never an error."""
        with self._lock:
            if self._score_cache is None:
                from workers.score_cache import RedisScoreCache

                self._score_cache = RedisScoreCache.from_url(self.settings.redis_url, self.settings.workers.cache_ttl_s)
            return self._score_cache

    def budget_s(self, options: ChunkragOptions) -> float:
        """The request's judging budget: its own (at most the gateway's
        max_budget_s, refused above it when read), else the filter's
        default, never more than max_budget_s."""
        if options.budget_s is not None:
            return options.budget_s
        return min(self.settings.workers.query_budget_s, self.settings.max_budget_s)

    def stage_budget(self, options: ChunkragOptions):
        """The search's budget bound around its library call: one for every
        model stage (budget_s), counted from the first that runs; none
        without the model stages."""
        return budgets.bound(Budget(self.budget_s(options)) if options.stages else None)

    # --- post-search ---------------------------------------------------------

    def _identity(self, caller: Caller) -> str:
        # Field listings differ per caller (field-level security): cached per credentials.
        return hashlib.sha256(caller.authorization or b"").hexdigest()

    def route(self, index: str, options: ChunkragOptions, body_keys: Sequence[str], *, caller: Caller) -> Route:
        """Which way a search of ``index`` (an expression) goes, on the
        concrete indices it covers for ``caller``'s credentials, asked now."""
        return self.post_searcher.route(es_for(self.es, caller), index, options, body_keys)

    def check_post_search_fields(self, index: str, options: ChunkragOptions, *, caller: Caller) -> None:
        self.post_searcher.check_fields(es_for(self.es, caller), index, options, self._identity(caller))

    def post_search(self, text: str, options: ChunkragOptions, response: Mapping[str, Any], *, caller: Caller):
        """Blocking: the filter over the passages of the hits the caller's
        own search returned (``response``), with the caller's credentials
        for the field listings of the hits' indices."""
        stages = options.stages
        with self.stage_budget(options):
            return self.post_searcher.filter(
                es_for(self.es, caller),
                response,
                text,
                options,
                identity=self._identity(caller),
                model=self.model if stages else None,
                judge_many=self.judge_many(self.budget_s(options)) if stages else None,
                reranker=self.reranker(options.filter.rerank) if stages else None,
                relevance_model=self.relevance_model(self.budget_s(options)) if stages else None,
            )

    # --- the one library call ----------------------------------------------

    def ask(
        self,
        index: str,
        text: str,
        options: ChunkragOptions,
        *,
        filters: Sequence[Mapping[str, Any]] = (),
        candidates: int,
        caller: Caller = Caller(),
        trace_headers: Mapping[str, str] | None = None,
    ) -> AskResult:
        """Blocking: run from a worker thread. Every cluster request goes with
        ``caller``'s credentials, so the model judges only what that caller's
        search returned. ``trace_headers``: the request's trace, when the
        search runs in a filter process (``filter_processes.py``)."""
        from search_extension.retriever import HybridRetriever

        es = es_for(self.es, caller)
        if traced := (trace_headers if trace_headers is not None else tracing.headers()):
            es = es.with_headers(traced)  # the cluster's own trace, if it keeps one, joins ours
        # The probe reads cluster stats: a derived key (service mode) has no
        # cluster privilege, so there it runs with the gateway's own client.
        probe = None if caller.key is not None else es
        capabilities = self.capabilities(options.mode, probe)
        retriever = HybridRetriever(es, self.embedder, index, self.settings.retrieval, capabilities=capabilities)
        stages = options.stages
        with self.stage_budget(options):
            return ask(
                text,
                retriever=retriever,
                # No model is made (nor its client) for a retrieval-only search.
                model=self.model if stages else None,
                options=options.filter,
                candidates=candidates,
                mode=options.mode,
                filters=filters,
                rewrite=options.rewrite,
                stages=stages,
                judge_many=self.judge_many(self.budget_s(options)) if stages else None,
                reranker=self.reranker(options.filter.rerank) if stages else None,
                relevance_model=self.relevance_model(self.budget_s(options)) if stages else None,
                segments=options.segments,
                ensemble=ensemble_scales(options.ensemble, self.settings.chunking.scales),
            )

    def capabilities(self, mode: str | None, es=None):
        """What the cluster offers, only for the modes that depend on it (the
        probe costs a few requests). Asked with ``es``'s credentials each
        time: the backend remembers what the cluster settled for everyone,
        and asks again what one caller's rights left open (`engines.probe`),
        so no answer of one caller is applied to the others."""
        if (mode or self.settings.retrieval.mode) not in ("rrf", "linear"):
            return None
        return (es if es is not None else self.es).capabilities()

    # --- what the metrics read at scrape time --------------------------------

    def live_probes(self, timeout_s: float = 0.5) -> dict[str, Callable[[], Any]]:
        """With Celery judging: the depth of the judging queue in Redis and
        whether a worker answers a ping, each within ``timeout_s``; called
        from the metrics endpoint's thread, never on a request's path."""
        if self.settings.workers.judge != "celery":
            return {}

        def celery_depth() -> int:
            import redis

            from workers.app import QUEUE

            client = redis.Redis.from_url(
                self.settings.redis_url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
            )
            try:
                return int(client.llen(QUEUE))
            finally:
                client.close()

        def workers_up() -> bool:
            from workers.dispatch import WorkersUnavailable, check_workers

            try:
                return check_workers(self.celery, timeout_s, limit=1) > 0
            except WorkersUnavailable:
                return False

        return {"celery_depth": celery_depth, "workers_up": workers_up}

    # --- health ------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """Each dependency's state; ``ok`` is false when a required one is down.
        Redis is required only when judging runs on the Celery workers. The
        report is public: a reason names the dependency, never its address or
        account (the detail goes to the log)."""
        uses_celery = self.settings.workers.judge == "celery"
        checks = [self._es_health(), self._redis_health(required=uses_celery)]
        if uses_celery:
            checks.append(self._workers_health())
        results = await asyncio.gather(*checks)
        results.append(("models", self.models.state()))
        report = {name: state for name, state in results}
        report["ok"] = all(state["ok"] or not state.get("required", True) for _, state in results)
        report["judge"] = self.settings.workers.judge
        return report

    async def _es_health(self) -> tuple[str, dict[str, Any]]:
        """The engine's state, under its name (``elasticsearch`` or ``opensearch``)."""
        name = engine_of(self.settings).name
        try:
            status, body = await self.passthrough.get_json("/_cluster/health")
        except errors.GatewayError as exc:
            return name, {"ok": False, "reason": exc.reason}
        if status != 200:
            log.warning("health: _cluster/health answered %s: %s", status, body)
            return name, {"ok": False, "reason": f"_cluster/health answered {status}"}
        healthy = body.get("status") in ("green", "yellow")
        state = {"ok": healthy, "status": body.get("status"), "nodes": body.get("number_of_nodes")}
        if not healthy:
            state["reason"] = f"cluster status is {body.get('status')}"
        return name, state

    async def _redis_health(self, *, required: bool) -> tuple[str, dict[str, Any]]:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(
            self.settings.redis_url, socket_connect_timeout=HEALTH_TIMEOUT_S, socket_timeout=HEALTH_TIMEOUT_S
        )
        try:
            await client.ping()
            return "redis", {"ok": True, "required": required}
        except Exception as exc:  # noqa: BLE001 - whatever the client raised, Redis is down for us
            log.warning("health: Redis at %s is not reachable: %s", redact_url(self.settings.redis_url), exc)
            return "redis", {"ok": False, "required": required, "reason": "Redis is not reachable"}
        finally:
            await client.aclose()

    async def _workers_health(self) -> tuple[str, dict[str, Any]]:
        from starlette.concurrency import run_in_threadpool

        from workers.dispatch import WorkersUnavailable, check_workers

        try:
            # In a thread: the first call also imports Celery and makes its app.
            count = await run_in_threadpool(lambda: check_workers(self.celery, HEALTH_TIMEOUT_S))
        except WorkersUnavailable as exc:
            log.warning("health: %s", exc)
            return "workers", {"ok": False, "count": 0, "reason": exc.reason}
        return "workers", {"ok": True, "count": count}

    async def aclose(self) -> None:
        await self.passthrough.aclose()
        if self._owns_es and self._es is not None:
            self._es.close()


class ModelsLoading:
    """Whether the models read at start are ready, for the health report:
    not ok while they load or when they failed (the reason names the
    error); ok before loading began (a gateway not started by a server
    reads them on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loading = False
        self._failure: str | None = None

    def begin(self) -> None:
        with self._lock:
            self._loading, self._failure = True, None

    def finish(self, failure: str | None) -> None:
        with self._lock:
            self._loading, self._failure = False, failure

    def state(self) -> dict[str, Any]:
        with self._lock:
            if self._loading:
                return {"ok": False, "reason": "loading the models"}
            if self._failure is not None:
                return {"ok": False, "reason": self._failure}
            return {"ok": True}


def strip_credentials(url: str) -> str:
    """``url`` without a user and password (forward mode keeps none); in a
    comma-separated list of node URLs, every entry."""
    if "," in url:
        return ",".join(strip_credentials(entry.strip()) for entry in url.split(","))
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))


def _load_sentence_splitter() -> None:
    from ingest_pipeline.sentences import sentence_spans

    sentence_spans("Read once. Kept.", 0, 16)
