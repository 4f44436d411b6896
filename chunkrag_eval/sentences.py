"""The judge on sentence-level relevance data: every candidate sentence of a
question (or claim) labelled relevant or not, so the judge can be checked
against the cheap signals on the same pairs.

- WikiQA dev: each question's candidate sentences, labelled 1/0.
- HealthVer dev: claim/evidence pairs; Supports or Refutes is relevant,
  Neutral is not. Grouped by claim.
- Climate-FEVER: five evidence sentences per claim; SUPPORTS or REFUTES is
  relevant, NOT_ENOUGH_INFO is not.

Signals per pair: the judge's listwise share (the product's own prompt and
batching, with one or both orders), the embedding cosine, and BM25 from
Elasticsearch over all the set's sentences (its own small index, so term
statistics are the whole set's). Reported: ROC AUC (threshold-free) and the
best F1 over thresholds for each signal (an upper bound, computed the same
way for all), and the judge's F1 at the product's cut (Algorithm 1 per
question).
"""

from __future__ import annotations

import csv
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from chunkrag_core.engines.base import SearchBackend
from chunkrag_filter.judging import judge_batch
from chunkrag_filter.processors.calibration import best_f1, f1_at, roc_auc
from chunkrag_filter.processors.relevance import ScoringOptions
from chunkrag_filter.processors.thresholds import dynamic_threshold

SETS = ("wikiqa", "healthver", "climate_fever")


@dataclass(frozen=True, slots=True)
class Labelled:
    query_id: str
    query: str
    sentences: tuple[str, ...]
    relevant: tuple[bool, ...]


def read_set(name: str, path: str | Path) -> list[Labelled]:
    path = Path(path)
    if name == "wikiqa":
        grouped: dict[str, tuple[str, list[str], list[bool]]] = {}
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                entry = grouped.setdefault(row["QuestionID"], (row["Question"], [], []))
                entry[1].append(row["Sentence"])
                entry[2].append(row["Label"].strip() == "1")
        return [Labelled(qid, q, tuple(s), tuple(r)) for qid, (q, s, r) in grouped.items()]
    if name == "healthver":
        grouped = {}
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                claim = row["claim"].strip()
                entry = grouped.setdefault(claim, (claim, [], []))
                entry[1].append(row["evidence"])
                entry[2].append(row["label"].strip() != "Neutral")
        return [Labelled(f"hv{i}", claim, tuple(s), tuple(r)) for i, (claim, s, r) in enumerate(grouped.values())]
    if name == "climate_fever":
        out = []
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    evidences = record["evidences"]
                    out.append(
                        Labelled(
                            f"cf{record['claim_id']}",
                            record["claim"],
                            tuple(e["evidence"] for e in evidences),
                            tuple(e["evidence_label"] != "NOT_ENOUGH_INFO" for e in evidences),
                        )
                    )
        return out
    raise ValueError(f"unknown sentence set {name!r}; choose one of {', '.join(SETS)}")


def sample(items: Sequence[Labelled], count: int | None, seed: int = 7) -> list[Labelled]:
    """A seeded random sample (not a prefix), or everything."""
    if count is None or count >= len(items):
        return list(items)
    return sorted(random.Random(seed).sample(list(items), count), key=lambda x: x.query_id)


def cosine_scores(items: Sequence[Labelled], embedder) -> list[list[float]]:
    out = []
    for item in items:
        vectors = np.asarray(embedder.embed([item.query, *item.sentences]), dtype=np.float32)
        out.append([float(v) for v in vectors[1:] @ vectors[0]])
    return out


def bm25_scores(items: Sequence[Labelled], backend: SearchBackend, index: str) -> list[list[float]]:
    """BM25 of each sentence for its own query, from an index (Elasticsearch
    or OpenSearch) of all the set's sentences (0 where a sentence shares no term)."""
    backend.delete_index(index)
    mappings = {"properties": {"qid": {"type": "keyword"}, "text": {"type": "text"}}}
    backend.create_index(index, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": mappings})
    out = []
    try:
        actions = (
            {"_index": index, "_id": f"{item.query_id}:{i}", "_source": {"qid": item.query_id, "text": s}}
            for item in items
            for i, s in enumerate(item.sentences)
        )
        written = backend.bulk(actions, chunk_size=500, max_retries=3, initial_backoff=2)
        failed = [item for ok, item in written if not ok]
        if failed:
            raise RuntimeError(f"{len(failed)} sentences could not be indexed for BM25, the first: {failed[0]}")
        backend.refresh(index)
        for item in items:
            query = {"bool": {"must": {"match": {"text": item.query}}, "filter": {"term": {"qid": item.query_id}}}}
            response = backend.search(index, {"query": query, "size": len(item.sentences)})
            found = {hit["_id"]: hit["_score"] for hit in response["hits"]["hits"]}
            out.append([float(found.get(f"{item.query_id}:{i}", 0.0)) for i in range(len(item.sentences))])
    finally:
        backend.delete_index(index)
    return out


def judge_scores(
    items: Sequence[Labelled], model, options: ScoringOptions, on_item: Callable[[int], None] | None = None
) -> tuple[list[list[float | None]], int, float]:
    """The product's judge on each item's sentences; returns the scores, the
    model calls made and the seconds spent."""
    out, calls, started = [], 0, time.perf_counter()
    for n, item in enumerate(items):
        judgements = judge_batch(item.query, list(item.sentences), model, options)
        calls += sum(j.calls for j in judgements)
        out.append([j.base for j in judgements])
        if on_item:
            on_item(n)
    return out, calls, time.perf_counter() - started


def signal_report(items: Sequence[Labelled], scores: Sequence[Sequence[float | None]]) -> dict[str, Any]:
    flat = [(-1.0 if s is None else s) for per in scores for s in per]
    labels = [r for item in items for r in item.relevant]
    f1, threshold = best_f1(flat, labels)
    return {"roc_auc": _round(roc_auc(flat, labels)), "best_f1": round(f1, 4), "best_f1_threshold": round(threshold, 4)}


def algorithm1_f1(items: Sequence[Labelled], scores: Sequence[Sequence[float | None]]) -> float:
    """F1 of keeping, per query, the sentences at or above Algorithm 1's threshold."""
    predicted, labels = [], []
    for item, per in zip(items, scores):
        known = [s for s in per if s is not None]
        cut = dynamic_threshold(known).value if known else 1.0
        predicted += [1.0 if s is not None and s >= cut - 1e-9 and s >= 0.01 else 0.0 for s in per]
        labels += list(item.relevant)
    return round(f1_at(predicted, labels, 0.5), 4)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def evaluate_sentences(
    name: str,
    path: str | Path,
    *,
    client: SearchBackend,
    embedder,
    model,
    options: ScoringOptions,
    judge_sample: int | None = None,
    seed: int = 7,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Judge, cosine and BM25 on a labelled set. Cosine and BM25 are scored
    on every pair; the judge on every item, or on a seeded random sample of
    ``judge_sample`` items (reported as such), where the cheap signals are
    also reported on the same sample for a like-for-like comparison."""
    items = read_set(name, path)
    cosine = cosine_scores(items, embedder)
    bm25 = bm25_scores(items, client, f"chunkrag-eval-sentences-{name}")
    result = {
        "set": name,
        "file": str(path),
        "items": len(items),
        "pairs": sum(len(item.sentences) for item in items),
        "relevant_share": round(
            sum(r for item in items for r in item.relevant) / max(1, sum(len(item.sentences) for item in items)), 4
        ),
        "whole_set": {
            "cosine": {**signal_report(items, cosine), "algorithm1_f1": algorithm1_f1(items, cosine)},
            "bm25": signal_report(items, bm25),
        },
    }
    if judge_sample == 0:
        return {**result, "judged": None}
    judged_items = sample(items, judge_sample, seed)
    positions = {item.query_id: i for i, item in enumerate(items)}
    picked = [positions[item.query_id] for item in judged_items]
    judge, calls, seconds = judge_scores(
        judged_items, model, options, (lambda n: progress(n + 1, len(judged_items))) if progress else None
    )
    same = lambda scores: [scores[i] for i in picked]  # noqa: E731 (a one-line selector)
    return {
        **result,
        "judged": {
            "items": len(judged_items),
            "sample": None
            if len(judged_items) == len(items)
            else f"seeded random sample (seed {seed}) of {len(judged_items)} of {len(items)} items",
            "judge": {**signal_report(judged_items, judge), "algorithm1_f1": algorithm1_f1(judged_items, judge)},
            "cosine": {
                **signal_report(judged_items, same(cosine)),
                "algorithm1_f1": algorithm1_f1(judged_items, same(cosine)),
            },
            "bm25": signal_report(judged_items, same(bm25)),
            "model_calls": calls,
            "seconds": round(seconds, 1),
            "seconds_per_call": round(seconds / calls, 3) if calls else None,
            "options": {"method": options.method, "orders": options.orders},
        },
    }
