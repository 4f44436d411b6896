"""Companion passages scored by the engine: the signals of every chunk of
the hits' fields come back from one ``_msearch`` without any ``_source``,
and only the passages that go to the filter are fetched.

1. Two searches on the companion, both restricted to the hits' base chunks
   (a ``terms`` filter on ``doc_id``): a kNN search with ``k`` at least the
   number of those chunks, which Lucene answers exactly (a filter matching
   fewer documents than ``k`` is searched by brute force, not through the
   graph), so every chunk gets its cosine to the query as (1 + cos) / 2;
   and a ``match`` of the query on the chunk text for BM25 (a chunk it does
   not match has 0). Each hit carries only its score and doc values (doc
   id, position, fingerprint), no stored field (not even ``_id``: the
   chunk id is made from the doc values), no text, no vector.
2. Here, per hit: the same passage score as query-time passages
   (``post_search.passage_scores``: both signals min-max normalised over
   the hit's own passages, weighted) and the best ``max_passages`` of each
   hit.
3. The candidates as chunks. Their text is already in hand: the hit's own
   field text between each chunk's ``start`` and ``end`` (doc values of
   step 1), with the lead, header, title and metadata the chunker gives
   that field's document (`rebuilt_chunk`); the fingerprint step 1 checked
   proves the companion's chunks were made from this very text with these
   settings. So a response costs the companion one request. A second one,
   for the candidates' ``_source``, is made only where a rebuilt chunk
   could differ from the stored one: when the filter's redundancy stage
   needs their vectors, when the settings ask for document context the
   chat model wrote (a summary or title in the header, sections it found:
   ``headers`` is then None), or when a chunk's offsets are missing or do
   not fall within one section of the text.

   A rebuilt chunk's metadata is its document's (``source_index``,
   ``source_id``, ``source_field``), as query-time passages have it; the
   stored chunk also carries the version ``chunkrag sync`` read the text at
   (``source_seq_no``...). No post-search response shows chunk metadata
   beyond ``source_field``, so the two ways answer alike.

What differs from fetching every chunk and scoring here: BM25 is the
engine's (the companion's analyzer, its index statistics) instead of BM25
over the hit's passages. A hit is served this way only when every field of
it is complete and current in its companion; a hit with a field whose
companion chunks are missing, of another text (fingerprint) or incomplete,
or whose companion cannot be read, is left to the fetched-chunks way
(``CompanionPassages``) whole, so no hit is scored with two kinds of BM25,
and whether a hit is served depends on that hit alone, not on the others
of its page.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from chunkrag_core.chunk import BASE_SCALE, Chunk, chunk_id_for
from chunkrag_core.engines import schema
from chunkrag_core.engines.base import SearchBackend
from chunkrag_core.engines.errors import EngineRefused
from ingest_pipeline.chunker import span_chunk
from ingest_pipeline.headers import chunk_header
from ingest_pipeline.source_fields import SourceField
from ingest_pipeline.sources import Document
from search_extension.passages import ScoredHits
from search_extension.post_search import PassageScore, bm25_scores, passage_scores

# The most chunks the hits' fields may have for the engine to score them
# (``k`` and ``num_candidates`` of the kNN search: both engines' ceiling).
# Past it the response goes the fetched-chunks way.
MAX_SCORED_CHUNKS = 10_000
# Doc values read per chunk: enough to know it is complete and current,
# and where it lies in the field's text (a candidate is rebuilt from them).
SIGNAL_FIELDS = (
    schema.DOC_ID,
    schema.POSITION,
    schema.DOC_FINGERPRINT,
    schema.START,
    schema.END,
    schema.SENTENCE_COUNT,
)
# Doc values that name a base chunk (its id is made from them).
ID_FIELDS = (schema.DOC_ID, schema.POSITION)
# Where a chunk's BM25 comes from: the engine's own (a `match` on the
# companion: nothing but scores travel), or counted here over the response's
# passages as for fetched passages (their text travels; the filter's
# decisions are those of the fetched-chunks path).
BM25_SOURCES = ("engine", "passages")


@dataclass(frozen=True, slots=True)
class ChunkSignal:
    """One companion chunk as the engine scored it."""

    chunk_id: str
    doc_id: str
    position: int
    fingerprint: str
    similarity: float  # the kNN score: (1 + cos) / 2
    bm25: float  # BM25 of the query on the text; 0 when no term matched
    text: str | None = None  # read only when BM25 is counted here
    # Where the chunk lies in the field's text and its sentences (None: an
    # answer without them; the candidate is then fetched, not rebuilt).
    start: int | None = None
    end: int | None = None
    sentence_count: int | None = None
    index: str = ""  # the concrete companion index that answered

    @property
    def cosine(self) -> float:
        return 2.0 * self.similarity - 1.0


class NotServed(Exception):
    """The companion cannot score this response (the message says why); the
    caller takes the fetched-chunks way."""


@dataclass(frozen=True, slots=True)
class EngineScoring:
    """What the companions made of a response's hits: ``scored`` holds each
    hit's candidates, None for a hit they did not serve; ``why_not`` the
    first reason a hit was not served; ``unreadable`` the companions that
    answered they cannot be read (missing, or not these credentials')."""

    scored: ScoredHits
    why_not: str | None = None
    unreadable: tuple[str, ...] = ()


# The answers of a companion search that say the companion cannot be read
# at all (missing, or not these credentials'), not that this search failed.
UNREADABLE_STATUSES = (403, 404)


# --- request bodies (pure) ------------------------------------------------------------


def chunk_filters(doc_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The base chunks of ``doc_ids`` (companion ids)."""
    return [{"terms": {schema.DOC_ID: sorted(doc_ids)}}, schema.base_scale_filter()]


def signal_searches(
    companion: str,
    doc_ids: Sequence[str],
    query: str,
    query_vector: Sequence[float],
    max_chunks: int,
    *,
    bm25: str = "engine",
) -> list[dict[str, Any]]:
    """The ``_msearch`` (header, body pairs) of step 1: an exact kNN of the
    query vector over the base chunks of ``doc_ids``, with ids, scores and
    ``SIGNAL_FIELDS`` only; then, with ``bm25="engine"``, a BM25 ``match``
    of the query text over the same chunks. With ``bm25="passages"`` the
    kNN hits bring their text instead (BM25 is counted here, over the
    response's passages, exactly as for fetched passages)."""
    if bm25 not in BM25_SOURCES:
        raise ValueError(f"unknown bm25 {bm25!r}; choose one of {', '.join(BM25_SOURCES)}")
    filters = chunk_filters(doc_ids)
    # No stored field is read, not even `_id` (loading it for every chunk was
    # most of the kNN search's time): a chunk's id is made from its doc
    # values (`chunk_id_for`), as the writer made it.
    lean = {"_source": False, "stored_fields": "_none_", "track_total_hits": False, "size": max_chunks}
    with_text = {"_source": {"includes": [schema.TEXT]}, "stored_fields": None}
    knn = {
        **lean,
        **(with_text if bm25 == "passages" else {}),
        "knn": {
            "field": schema.VECTOR,
            "query_vector": [float(x) for x in query_vector],
            # k no smaller than the filtered chunks: Lucene scores them all, exactly.
            "k": max_chunks,
            "num_candidates": max_chunks,
            "filter": filters,
        },
        "docvalue_fields": list(SIGNAL_FIELDS),
    }
    knn = {key: value for key, value in knn.items() if value is not None}
    if bm25 == "passages":
        return [{"index": companion}, knn]
    match = {
        **lean,
        "query": {"bool": {"filter": filters, "must": [{"match": {schema.TEXT: query}}]}},
        "docvalue_fields": list(ID_FIELDS),
    }
    return [{"index": companion}, knn, {"index": companion}, match]


def candidates_body(chunk_ids: Sequence[str], *, with_vectors: bool) -> dict[str, Any]:
    """Step 3: the candidates' ``_source`` without the vector; the vector
    only when asked, as raw doc values (``schema.vector_read``)."""
    return {
        "size": len(chunk_ids),
        "query": {"ids": {"values": list(chunk_ids)}},
        "_source": {"excludes": [schema.VECTOR]},
        **(schema.vector_read() if with_vectors else {}),
        "track_total_hits": False,
    }


# --- reading the answers (pure) ---------------------------------------------------------


def _item_hits(item: Mapping[str, Any], max_chunks: int) -> list[Mapping[str, Any]]:
    if "error" in item:
        error = item["error"]
        reason = error.get("type") if isinstance(error, Mapping) else error
        raise NotServed(f"the companion search failed ({item.get('status')}: {reason})")
    hits = item["hits"]["hits"]
    if len(hits) >= max_chunks:
        raise NotServed(f"the hits' fields have {max_chunks} chunks or more")
    return hits


def _first(fields: Mapping[str, Any], name: str) -> Any:
    values = fields.get(name)
    if not values:
        raise NotServed(f"a companion chunk has no {name}")
    return values[0]


def _optional_int(fields: Mapping[str, Any], name: str) -> int | None:
    values = fields.get(name)
    return int(values[0]) if values else None


def _chunk_id(hit: Mapping[str, Any]) -> str:
    """The hit's ``_id`` when it came, else the id of the base chunk its
    doc values name (what the writer gave it: ``chunk_id_for``)."""
    if "_id" in hit:
        return str(hit["_id"])
    fields = hit.get("fields") or {}
    return chunk_id_for(str(_first(fields, schema.DOC_ID)), int(_first(fields, schema.POSITION)))


def signals_of(
    responses: Sequence[Mapping[str, Any]], max_chunks: int = MAX_SCORED_CHUNKS
) -> dict[str, list[ChunkSignal]]:
    """The chunks of each companion id, by position, from the answers of
    `signal_searches` (the kNN's, then the BM25's when the engine counted it;
    else each chunk's text, and BM25 0 until counted here)."""
    knn, *bm25 = responses
    bm25_of = {_chunk_id(hit): float(hit["_score"] or 0.0) for item in bm25 for hit in _item_hits(item, max_chunks)}
    found: dict[str, list[ChunkSignal]] = {}
    for hit in _item_hits(knn, max_chunks):
        fields = hit.get("fields") or {}
        source = hit.get("_source")
        doc_id, position = str(_first(fields, schema.DOC_ID)), int(_first(fields, schema.POSITION))
        chunk_id = str(hit["_id"]) if "_id" in hit else chunk_id_for(doc_id, position)
        signal = ChunkSignal(
            chunk_id=chunk_id,
            doc_id=doc_id,
            position=position,
            fingerprint=str(_first(fields, schema.DOC_FINGERPRINT)),
            similarity=float(hit["_score"]),
            bm25=bm25_of.get(chunk_id, 0.0),
            text=str(source.get(schema.TEXT, "")) if isinstance(source, Mapping) else None,
            start=_optional_int(fields, schema.START),
            end=_optional_int(fields, schema.END),
            sentence_count=_optional_int(fields, schema.SENTENCE_COUNT),
            index=str(hit.get("_index") or ""),
        )
        found.setdefault(doc_id, []).append(signal)
    return {doc_id: sorted(rows, key=lambda r: r.position) for doc_id, rows in found.items()}


def complete(rows: Sequence[ChunkSignal], fingerprint: str) -> bool:
    """All chunks made from this very text, positions 0..n-1 without a gap."""
    return (
        bool(rows)
        and all(r.fingerprint == fingerprint for r in rows)
        and [r.position for r in rows] == list(range(len(rows)))
    )


def counted_here(query: str, per_hit: Sequence[Sequence[ChunkSignal]]) -> list[list[ChunkSignal]]:
    """The chunks with BM25 counted over their texts, each hit's passages
    being the collection (``post_search.bm25_scores``, as for fetched passages)."""
    out = []
    for rows in per_hit:
        counted = bm25_scores(query, [row.text or "" for row in rows])
        out.append([dataclasses.replace(row, bm25=score) for row, score in zip(rows, counted)])
    return out


def choose_candidates(
    per_hit: Sequence[Sequence[ChunkSignal]],
    weights: tuple[float, float],
    max_passages: int,
) -> tuple[list[list[tuple[ChunkSignal, PassageScore]]], list[int]]:
    """Each hit's best ``max_passages`` chunks by the passage score, counted
    over that hit's chunks alone (ties in the hit's order: field, then
    position), and how many were left out."""
    best, capped = [], []
    for rows in per_hit:
        scores = passage_scores(
            [row.bm25 for row in rows], [row.similarity for row in rows], [row.cosine for row in rows], weights
        )
        ordered = sorted(zip(rows, scores), key=lambda pair: -pair[1].score)
        best.append(ordered[:max_passages])
        capped.append(max(0, len(ordered) - max_passages))
    return best, capped


def rebuilt_chunk(
    document: Document,
    row: ChunkSignal,
    previous_end: int,
    headers: str,
    *,
    score: float,
    stage_scores: Mapping[str, float],
) -> Chunk | None:
    """The base chunk ``row`` of ``document`` (a hit field's,
    `SourceField.document`) as the chunker made it (`chunk_documents`): its
    text between its offsets, its lead from ``previous_end`` (the previous
    chunk's end; 0 for the first), its header of the document's title and
    section (``headers``: the chunking's header mode), the document's title
    and metadata; read from ``row.index``, with no vector. None when its
    doc values are missing or do not place it within one section of the
    text after ``previous_end``."""
    start, end, sentences = row.start, row.end, row.sentence_count
    if start is None or end is None or sentences is None:
        return None
    if not 0 <= previous_end <= start <= end <= len(document.text):
        return None
    section = next((s.path for s in document.sections if s.start <= start and end <= s.end), None)
    if section is None:
        return None
    return span_chunk(
        document,
        position=row.position,
        span=(start, end),
        previous_end=previous_end,
        section=section,
        sentence_count=sentences,
        header=chunk_header(document.title, section, headers, document.summary),
        metadata=dict(document.metadata),
        scale=BASE_SCALE,
        score=score,
        stage_scores=dict(stage_scores),
        index=row.index,
    )


def rebuilt_candidates(
    documents: Mapping[str, Document],
    rows: Mapping[str, Sequence[ChunkSignal]],
    best: Sequence[Sequence[tuple[ChunkSignal, PassageScore]]],
    headers: str,
) -> tuple[tuple[Chunk, ...], ...] | None:
    """Each hit's candidates rebuilt from its fields' ``documents`` (by
    companion id) and the doc values of all their chunks (``rows``, complete:
    by position), in ``best``'s order; None when one cannot be rebuilt."""
    out = []
    for chosen in best:
        chunks = []
        for row, score in chosen:
            previous_end = rows[row.doc_id][row.position - 1].end if row.position else 0
            chunk = None
            if previous_end is not None:
                chunk = rebuilt_chunk(
                    documents[row.doc_id],
                    row,
                    previous_end,
                    headers,
                    score=score.score,
                    stage_scores=score.signals(),
                )
            if chunk is None:
                return None
            chunks.append(chunk)
        out.append(tuple(chunks))
    return tuple(out)


# --- the engine -------------------------------------------------------------------------


def engine_scored(
    client: SearchBackend,
    fields_by_hit: Sequence[Sequence[SourceField]],
    companion_of: Mapping[str, str],
    fingerprints: Mapping[str, str],
    *,
    query: str,
    query_vector: np.ndarray,
    weights: tuple[float, float],
    max_passages: int,
    with_vectors: bool,
    bm25: str = "engine",
    headers: str | None = None,
    max_chunks: int = MAX_SCORED_CHUNKS,
) -> EngineScoring:
    """Steps 1-3 for the fields of each hit; ``companion_of`` names the
    companion of each hit index, ``fingerprints`` the text fingerprint of
    each field (by companion id). ``headers``: the chunking's header mode
    when the candidates may be rebuilt from the hits' text (no document
    context written by the model), None to fetch them. A hit is served only
    when every field of it is complete and current in a companion that
    answered; NotServed when the request itself failed, or a candidate
    changed while it was scored."""
    by_companion: dict[str, list[str]] = {}
    for sources in fields_by_hit:
        for field in sources:
            by_companion.setdefault(companion_of[field.index], []).append(field.companion_id)
    searches: list[dict[str, Any]] = []
    for companion, doc_ids in by_companion.items():
        searches.extend(signal_searches(companion, doc_ids, query, query_vector, max_chunks, bm25=bm25))
    try:
        items = client.msearch(searches)["responses"] if searches else []
    except EngineRefused as exc:
        raise NotServed(f"the companion search failed: {exc}") from None
    per_companion = len(items) // len(by_companion) if by_companion else 0
    rows: dict[str, list[ChunkSignal]] = {}
    unreadable: list[str] = []
    reasons: list[str] = []
    for i, companion in enumerate(by_companion):
        answers = items[per_companion * i : per_companion * (i + 1)]
        status = next(
            (item["status"] for item in answers if "error" in item and item.get("status") in UNREADABLE_STATUSES), None
        )
        if status is not None:
            unreadable.append(companion)
            reasons.append(f"the companion [{companion}] cannot be read ({status})")
            continue
        try:
            rows.update(signals_of(answers, max_chunks))
        except NotServed as exc:  # this companion's hits go the fetched-chunks way
            reasons.append(str(exc))
    served = []
    for sources in fields_by_hit:
        lacking = [
            f.companion_id for f in sources if not complete(rows.get(f.companion_id, ()), fingerprints[f.companion_id])
        ]
        if lacking and companion_of[sources[0].index] not in unreadable:
            reasons.append(f"{lacking[0]!r} is not complete and current in its companion")
        served.append(not lacking)
    per_hit = [
        [row for field in sources for row in rows[field.companion_id]] if ok else []
        for sources, ok in zip(fields_by_hit, served)
    ]
    if bm25 == "passages":
        per_hit = counted_here(query, per_hit)
    best, capped = choose_candidates(per_hit, weights, max_passages)
    chunks = None
    if headers is not None and not with_vectors:
        documents = {field.companion_id: field.document() for sources in fields_by_hit for field in sources}
        chunks = rebuilt_candidates(documents, rows, best, headers)
    if chunks is None:
        hits = _fetch(client, by_companion, [row for chosen in best for row, _ in chosen], with_vectors)
        chunks = tuple(
            tuple(
                schema.chunk_from_hit(hits[row.chunk_id], score=score.score, stage_scores=score.signals())
                for row, score in chosen
            )
            for chosen in best
        )
    scored = ScoredHits(
        best=tuple(chosen if ok else None for chosen, ok in zip(chunks, served)),
        capped=tuple(count if ok else 0 for count, ok in zip(capped, served)),
    )
    return EngineScoring(scored, reasons[0] if reasons else None, tuple(unreadable))


def _fetch(
    client: SearchBackend, by_companion: Mapping[str, Sequence[str]], rows: Sequence[ChunkSignal], with_vectors: bool
) -> dict[str, Mapping[str, Any]]:
    """The hits of ``rows``' chunks, by chunk id; NotServed when one is gone
    or changed since it was scored (a sync in between)."""
    companion_of_doc = {doc_id: companion for companion, doc_ids in by_companion.items() for doc_id in doc_ids}
    wanted: dict[str, list[ChunkSignal]] = {}
    for row in rows:
        wanted.setdefault(companion_of_doc[row.doc_id], []).append(row)
    searches: list[dict[str, Any]] = []
    for companion, chosen in wanted.items():
        searches.extend(
            [{"index": companion}, candidates_body([r.chunk_id for r in chosen], with_vectors=with_vectors)]
        )
    if not searches:
        return {}
    try:
        items = client.msearch(searches)["responses"]
    except EngineRefused as exc:
        raise NotServed(f"fetching the candidates failed: {exc}") from None
    found: dict[str, Mapping[str, Any]] = {}
    fingerprint_of = {row.chunk_id: row.fingerprint for row in rows}
    for item in items:
        for hit in _item_hits(item, MAX_SCORED_CHUNKS + 1):
            source = hit.get("_source") or {}
            if source.get(schema.DOC_FINGERPRINT) != fingerprint_of.get(hit["_id"]):
                raise NotServed(f"{hit['_id']!r} changed while it was scored")
            found[hit["_id"]] = hit
    if len(found) != len(fingerprint_of):
        raise NotServed("a candidate left the companion while it was scored")
    return found
