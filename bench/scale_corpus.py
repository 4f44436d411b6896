"""The corpora of the cost curve (bench/scale_bench.py): real documents from
the evaluation sets, split into sentences once, and chunks of consecutive
sentences whose vectors are derived from sentence vectors.

Embedding a million chunks with the local MiniLM on two shared cores would
take days, so every distinct sentence of the real documents is embedded once
(cached as .npy) and a chunk's vector is the L2-normalised mean of its
sentences' vectors: a stand-in for embedding each chunk, enough for what the
cost curve measures (ingest, disk, heap, latency), not for quality. Past the
real text, documents are recombined from real sentences drawn at random.

The planning functions are pure (numbers in, numbers out) and tested in
tests/unit/test_scale_bench.py; only :func:`real_documents` reads files.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

# Chunks hold this many consecutive sentences (inclusive), drawn uniformly:
# the range the semantic chunker produces on SciFact abstracts.
MIN_CHUNK_SENTENCES, MAX_CHUNK_SENTENCES = 2, 6
# Sentences shorter than this are headings or debris; longer ones are cut
# by the ingest pipeline anyway (max chunk characters), so both are left out.
MIN_SENTENCE_CHARS, MAX_SENTENCE_CHARS = 20, 1000
# Documents recombined from random real sentences have ids with this prefix.
SYNTHETIC_PREFIX = "synthetic-"


@dataclass(frozen=True, slots=True)
class SourceDocument:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """One chunk to write: its document, position and sentence ids (into the pool)."""

    doc_id: str
    title: str
    position: int
    sentences: tuple[int, ...]


def real_documents(eval_dir: Path) -> list[SourceDocument]:
    """Every document of the evaluation corpora the cost curve draws on
    (SciFact abstracts, NQ gold passages, SQuAD paragraphs, PopQA, PubHealth
    and bio contexts, WikiQA documents, Climate-FEVER articles), duplicates
    by text dropped, in a fixed order."""
    docs: list[SourceDocument] = []
    for line in (eval_dir / "scifact" / "beir_derived" / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        docs.append(SourceDocument(f"scifact-{r['_id']}", r["title"], r["text"]))
    with gzip.open(eval_dir / "nq" / "nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            for j, ctx in enumerate(json.loads(line).get("ctxs") or []):
                docs.append(SourceDocument(f"nq-{i}-{j}", ctx.get("title", ""), ctx.get("text", "")))
    squad = json.loads((eval_dir / "squad" / "squad2_cs224n_dev-v2.0.json").read_text(encoding="utf-8"))
    for i, article in enumerate(squad["data"]):
        for j, paragraph in enumerate(article["paragraphs"]):
            docs.append(SourceDocument(f"squad-{i}-{j}", article["title"].replace("_", " "), paragraph["context"]))
    for name in ("popqa", "pubhealth"):
        for i, line in enumerate((eval_dir / name / "dev.jsonl").read_text(encoding="utf-8").splitlines()):
            for kind, text in (json.loads(line).get("contexts") or {}).items():
                docs.append(SourceDocument(f"{name}-{i}-{kind}", "", text))
    for i, line in enumerate((eval_dir / "bio" / "dev.jsonl").read_text(encoding="utf-8").splitlines()):
        for j, passage in enumerate(json.loads(line).get("passages") or []):
            docs.append(SourceDocument(f"bio-{i}-{j}", passage.get("title", ""), passage.get("text", "")))
    grouped: dict[str, tuple[str, list[str]]] = {}
    with (eval_dir / "wikiqa" / "WikiQA-dev.tsv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            grouped.setdefault(f"wikiqa-{row['DocumentID']}", (row["DocumentTitle"], []))[1].append(row["Sentence"])
    for line in (eval_dir / "climate_fever" / "climate-fever.jsonl").read_text(encoding="utf-8").splitlines():
        for evidence in json.loads(line)["evidences"]:
            article = evidence["article"]
            key = f"climate-{hashlib.sha1(article.encode()).hexdigest()[:12]}"
            sentences = grouped.setdefault(key, (article, []))[1]
            if evidence["evidence"] not in sentences:
                sentences.append(evidence["evidence"])
    docs.extend(SourceDocument(key, title, " ".join(sents)) for key, (title, sents) in grouped.items())
    seen: set[str] = set()
    unique = []
    for doc in docs:
        if doc.text.strip() and doc.text not in seen:
            seen.add(doc.text)
            unique.append(doc)
    return unique


def usable(sentence: str) -> bool:
    return MIN_SENTENCE_CHARS <= len(sentence) <= MAX_SENTENCE_CHARS


def sentence_table(docs_sentences: Sequence[Sequence[str]]) -> tuple[list[str], list[list[int]]]:
    """Distinct usable sentences (first seen first) and, per document, the
    ids of its usable sentences in order."""
    ids: dict[str, int] = {}
    per_doc = []
    for sentences in docs_sentences:
        per_doc.append([ids.setdefault(s, len(ids)) for s in sentences if usable(s)])
    return list(ids), per_doc


def group_sizes(count: int, rng: np.random.Generator) -> list[int]:
    """Consecutive group sizes covering ``count`` sentences, each drawn from
    MIN..MAX_CHUNK_SENTENCES; the last group takes what is left (at least 1)."""
    sizes = []
    left = count
    while left > 0:
        size = min(int(rng.integers(MIN_CHUNK_SENTENCES, MAX_CHUNK_SENTENCES + 1)), left)
        sizes.append(size)
        left -= size
    return sizes


def chunk_document(doc_id: str, title: str, sentence_ids: Sequence[int], rng: np.random.Generator):
    """The chunks of one document: its sentences cut into consecutive groups."""
    chunks, cursor = [], 0
    for position, size in enumerate(group_sizes(len(sentence_ids), rng)):
        chunks.append(PlannedChunk(doc_id, title, position, tuple(sentence_ids[cursor : cursor + size])))
        cursor += size
    return chunks


def plan_corpus(
    real: Sequence[tuple[str, str, Sequence[int]]], pool_size: int, target: int, seed: int = 17
) -> Iterator[list[PlannedChunk]]:
    """Documents' chunks until ``target`` chunks: the real documents first
    (shuffled with ``seed``), then synthetic ones, each as many sentences
    as a real document drawn at random, the sentences drawn at random from
    the whole pool. The last document is cut so the total is exactly
    ``target``. Same seed, same corpus: a smaller target is a prefix of a
    larger one."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(real))
    lengths = [len(ids) for _, _, ids in real if ids] or [1]
    made = 0

    def take(chunks: list[PlannedChunk]) -> list[PlannedChunk]:
        nonlocal made
        chunks = chunks[: target - made]
        made += len(chunks)
        return chunks

    for i in order:
        if made >= target:
            return
        doc_id, title, ids = real[i]
        if ids:
            yield take(chunk_document(doc_id, title, ids, rng))
    synthetic = 0
    while made < target:
        length = lengths[int(rng.integers(len(lengths)))]
        ids = [int(x) for x in rng.integers(0, pool_size, size=length)]
        yield take(chunk_document(f"{SYNTHETIC_PREFIX}{synthetic}", "", ids, rng))
        synthetic += 1


def mean_vectors(vectors: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Per group of sentence ids, the L2-normalised mean of those sentences'
    vectors (one numpy pass for all groups)."""
    flat = np.fromiter((i for group in groups for i in group), dtype=np.int64)
    starts = np.cumsum([0, *(len(group) for group in groups[:-1])])
    sums = np.add.reduceat(vectors[flat], starts, axis=0)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    # The mean's direction is the sum's: normalising the sum is enough.
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)
