"""The default chunk breakpoint, chosen by the rule in docs/ingest.md ("How
the default breakpoint is chosen"), written down before it was measured.

For each candidate chunker:

- the chunk lengths over the PopQA dev and PubHealth dev pools (each
  question's ambiguous pool one document, as ``chunkrag eval`` reads it),
  chunked by the real chunker (``chunk_documents``) with that candidate's
  settings;
- PopQA dev's pools and SQuAD 2.0 dev paragraphs (the distractors) ingested
  into one index through the real pipeline; each question searched with the
  default hybrid query (40 candidates) over the whole index (the open corpus)
  and within its own pool (as ``chunkrag eval``); answer in context (any gold
  alias as a case-insensitive substring) of the candidates taken in rank
  order within 1,000 and 2,000 characters per question
  (``kept_within_budget``).

The embedder sits behind a cache by text (:class:`CachingEmbedder`), so every
sentence and question is embedded once for all candidates; with
``vectors=mix`` (the default) chunk vectors are made from those sentence
vectors, so the candidates' indices hold exactly what ``chunkrag ingest``
would write. ``python -m bench.chunking_default`` ran it (retired since:
``git show e27050e:bench/chunking_default.py``; bench/REPORT.md).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from chunkrag_eval.datasets import read_items
from chunkrag_eval.measures import answer_in_context, kept_within_budget, mcnemar_exact
from chunkrag_eval.runner import doc_id_for

INDEX_PREFIX = "bench-chunking"
# Candidates retrieved per question before the character budget is applied.
CANDIDATES = 40
BUDGETS = (1000, 2000)
# The rule's eligibility: mean chunk characters in this range, and fewer
# than this share of chunks a single sentence, on both sets' pools.
MEAN_CHARS_RANGE = (300.0, 600.0)
MAX_SINGLE_SENTENCE_SHARE = 0.5
# How often the embedding cache is written to disk while embedding, so a
# stopped run keeps most of what it embedded.
SAVE_EVERY_S = 300.0


@dataclasses.dataclass(frozen=True)
class Candidate:
    breakpoint: str  # "threshold" or "percentile"
    value: float  # θ, or the percentile
    min_chars: int = 0

    @property
    def name(self) -> str:
        head = f"theta{self.value:g}" if self.breakpoint == "threshold" else f"p{self.value:g}"
        return head + (f"_min{self.min_chars}" if self.min_chars else "")

    def chunking(self, base):
        if self.breakpoint == "threshold":
            return dataclasses.replace(base, breakpoint="threshold", similarity_threshold=self.value, min_chars=0)
        return dataclasses.replace(
            base, breakpoint="percentile", breakpoint_percentile=self.value, min_chars=self.min_chars
        )


# In the rule's order; θ 0.8 is the paper's and the reference.
CANDIDATE_SET = (
    Candidate("threshold", 0.8),
    Candidate("threshold", 0.5),
    Candidate("threshold", 0.4),
    Candidate("percentile", 95),
    Candidate("percentile", 90),
    Candidate("percentile", 80),
    Candidate("percentile", 70),
    Candidate("percentile", 95, 200),
    Candidate("percentile", 80, 200),
)
REFERENCE = CANDIDATE_SET[0]


class CachingEmbedder:
    """Embeds each distinct text once across every candidate's ingest; with
    ``path``, the vectors are kept in an .npz across runs."""

    def __init__(self, inner, dims: int, path: Path | None = None):
        self.inner, self.dims, self.cache, self.path = inner, dims, {}, path
        self.embedded = 0
        self.seconds = 0.0
        self.saved_at = time.monotonic()
        if path is not None and path.exists():
            with np.load(path, allow_pickle=False) as stored:
                self.cache = dict(zip(stored["texts"].tolist(), stored["vectors"]))

    def save(self) -> None:
        self.saved_at = time.monotonic()
        if self.path is not None and self.cache:
            texts = list(self.cache)
            np.savez(self.path, texts=np.array(texts), vectors=np.stack([self.cache[t] for t in texts]))

    def embed(self, texts):
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            began = time.perf_counter()
            self.cache.update(zip(missing, self.inner.embed(missing)))
            self.seconds += time.perf_counter() - began
            self.embedded += len(missing)
            if time.monotonic() - self.saved_at > SAVE_EVERY_S:
                self.save()
        return np.array([self.cache[t] for t in texts], dtype=np.float32).reshape(len(texts), self.dims)


def pools(path: Path, dataset: str, limit: int | None):
    from ingest_pipeline.sources import plain_document

    _, items, _ = read_items(path, limit=limit)
    documents = [plain_document(doc_id_for(dataset, i), i.pool, f"{dataset}:{i.item_id}") for i in items]
    return items, documents


def squad_paragraphs(path: Path, count: int):
    from ingest_pipeline.sources import plain_document

    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    paragraphs = [p["context"] for article in data for p in article["paragraphs"]][:count]
    return [plain_document(f"squad-{i}", text, "squad") for i, text in enumerate(paragraphs)]


def length_stats(documents, embedder, chunking) -> dict:
    from ingest_pipeline.chunker import chunk_documents
    from ingest_pipeline.pipeline import ChunkLengthStats

    chunks = [c for item in chunk_documents(documents, embedder, chunking) for c in item.chunks]
    stats = ChunkLengthStats.of([len(c.text) for c in chunks], [c.sentence_count for c in chunks])
    return dataclasses.asdict(stats)


def answer_rows(retriever, items, dataset: str, own_pool: bool) -> dict[int, list[bool]]:
    """Per budget, per question: a gold alias in the candidates kept within it."""
    from chunkrag_core.engines.schema import DOC_ID

    out: dict[int, list[bool]] = {b: [] for b in BUDGETS}
    for item in items:
        filters = [{"term": {DOC_ID: doc_id_for(dataset, item)}}] if own_pool else []
        chunks = retriever.search(item.question, size=CANDIDATES, filters=filters).chunks
        texts = [c.text for c in chunks]
        rank = [-float(i) for i in range(len(texts))]
        for budget in BUDGETS:
            kept = kept_within_budget(texts, rank, budget)
            out[budget].append(answer_in_context(" ".join(texts[i] for i in kept), item.answers))
    return out


def rates(rows: dict[int, list[bool]]) -> dict:
    per = {str(b): round(sum(v) / len(v), 4) for b, v in rows.items()}
    return {"by_budget": per, "mean": round(sum(per.values()) / len(per), 4)}


def eligible(row: dict) -> bool:
    low, high = MEAN_CHARS_RANGE
    return all(
        low <= s["mean_chars"] <= high and s["single_sentence_share"] < MAX_SINGLE_SENTENCE_SHARE
        for s in row["lengths"].values()
    )


def choose(rows: dict[str, dict]) -> str | None:
    """The eligible candidate with the highest open-corpus mean (three
    decimals); a tie goes to the higher own-pool mean."""
    ok = [name for name, row in rows.items() if row["eligible"]]
    if not ok:
        return None
    return max(ok, key=lambda n: (round(rows[n]["open_corpus"]["mean"], 3), rows[n]["own_pool"]["mean"]))


def paired(winner: list[bool], reference: list[bool]) -> dict:
    b = sum(w and not r for w, r in zip(winner, reference))
    c = sum(r and not w for w, r in zip(winner, reference))
    return {"discordant": [b, c], "p": round(mcnemar_exact(b, c), 4)}


def measure_candidate(candidate: Candidate, settings, client, embedder, popqa, pubhealth_docs, extra):
    """One candidate's row and its per-question answer flags (open corpus and own pool)."""
    from ingest_pipeline.pipeline import ingest_documents
    from search_extension.retriever import HybridRetriever

    popqa_items, popqa_docs = popqa
    chunking = candidate.chunking(settings.chunking)
    run_settings = dataclasses.replace(settings, chunking=chunking)
    index = f"{INDEX_PREFIX}-{candidate.name}".replace(".", "_")
    client.delete_index(index)
    for documents in (popqa_docs, extra):
        report = ingest_documents(
            documents, client=client, embedder=embedder, settings=run_settings, index=index, progress=False
        )
        if not report.ok:
            raise RuntimeError(report.errors[:3])
    embedder.save()
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    flags = {
        "open": answer_rows(retriever, popqa_items, "popqa", own_pool=False),
        "own": answer_rows(retriever, popqa_items, "popqa", own_pool=True),
    }
    row = {
        "breakpoint": candidate.breakpoint,
        "value": candidate.value,
        "min_chars": candidate.min_chars,
        "max_chars": chunking.max_chars,
        "index": index,
        "lengths": {
            "popqa_pools": length_stats(popqa_docs, embedder, chunking),
            "pubhealth_pools": length_stats(pubhealth_docs, embedder, chunking),
        },
        "open_corpus": rates(flags["open"]),
        "own_pool": rates(flags["own"]),
    }
    row["eligible"] = eligible(row)
    embedder.save()
    client.delete_index(index)
    return row, flags


def choose_breakpoint(
    settings, client, embedder, *, popqa: Path, pubhealth: Path, squad: Path, distractors: int, limit: int | None = None
) -> dict:
    """Every candidate measured, the rule applied, the winner paired with the reference (exact McNemar)."""
    popqa_set = pools(popqa, "popqa", limit)
    _, pubhealth_docs = pools(pubhealth, "pubhealth", limit)
    extra = squad_paragraphs(squad, distractors)
    rows: dict[str, dict] = {}
    flags: dict[str, dict] = {}
    for candidate in CANDIDATE_SET:
        row, flags[candidate.name] = measure_candidate(
            candidate, settings, client, embedder, popqa_set, pubhealth_docs, extra
        )
        rows[candidate.name] = row
        popqa_lengths = row["lengths"]["popqa_pools"]
        print(
            f"{candidate.name}: open {row['open_corpus']}  own {row['own_pool']}  popqa {popqa_lengths['mean_chars']} "
            f"chars {popqa_lengths['single_sentence_share']:.0%} single  eligible {row['eligible']}",
            file=sys.stderr,
        )
    winner = choose(rows)
    against = {}
    if winner is not None:
        for regime in ("open", "own"):
            for budget in BUDGETS:
                against[f"{regime}_{budget}"] = paired(
                    flags[winner][regime][budget], flags[REFERENCE.name][regime][budget]
                )
    return {
        "questions": len(popqa_set[0]),
        "pubhealth_pools": len(pubhealth_docs),
        "distractors": len(extra),
        "candidates_retrieved": CANDIDATES,
        "budgets_chars": list(BUDGETS),
        "embedder": f"{settings.embedder.provider}:{settings.embedder.model}",
        "rule": "docs/ingest.md#how-the-default-breakpoint-is-chosen",
        "rows": rows,
        "winner": winner,
        "winner_vs_reference": {"reference": REFERENCE.name, **against},
    }
