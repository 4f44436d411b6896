"""Fitting the chunk filter's calibration on labelled questions: what
``chunkrag calibrate`` runs.

The questions' documents are indexed with the real ingest pipeline, each
question is searched with the hybrid query restricted to its own documents
(the candidates the filter would see), every candidate gets the features
the filter computes at query time (``chunkrag_filter.pipeline.
candidate_features``) and, with a judge, the configured chat model's
listwise share for the best nine (one call per question, as the filter
asks it). A logistic model is fitted on them (without the judge, and with
it when judged), its cut chosen to keep ``target`` of the answers in the
pool on the mean of the sets, and both are written as a calibration file
that ``CHUNKRAG_CALIBRATION_FILE`` then selects.

Labelled JSONL, one question a line::

    {"question": "...", "documents": [{"text": "...", "title": "..."}],
     "answers": ["..."]}                 # or "relevant": ["a gold sentence", ...]

A line that cannot be used is reported with its number and skipped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from chunkrag_core.engines.schema import DOC_ID
from chunkrag_eval.curves import PoolQuestion, highest_cut
from chunkrag_eval.labelled import Doc, LabelledQuery, unique_docs
from chunkrag_filter.judging import JudgeMany
from chunkrag_filter.pipeline import candidate_features
from chunkrag_filter.processors.calibration import (
    JUDGE_FEATURES,
    Calibrated,
    LogisticModel,
    fit_logistic,
    load_calibration,
    write_calibration,
)
from chunkrag_filter.processors.redundancy import DEFAULT_REDUNDANCY_THRESHOLD, drop_redundant
from chunkrag_filter.processors.relevance import ScoringOptions

# Candidates per question (as `chunkrag eval`), and the best ones the judge reads.
CANDIDATES = 64
JUDGE_TOP = 9
# The recall the cut is chosen for: 0.90 of the answers in the pool, plus a
# margin for questions the fit did not see (bench/REPORT.md).
TARGET = 0.92
CUTS = tuple(sorted({round(float(c), 5) for c in (*np.linspace(0.0, 1.0, 201), *np.geomspace(1e-3, 0.05, 40))}))


class LabelledDataError(ValueError):
    """A labelled file that cannot be used at all."""


@dataclass(frozen=True, slots=True)
class Collected:
    """One question's candidates: features, lengths and gold, in retrieval order."""

    dataset: str
    query_id: str
    features: tuple[Mapping[str, float], ...]
    chars: tuple[int, ...]
    gold: tuple[bool, ...]
    dropped_chars: int
    dropped_gold: bool

    def pool(self) -> PoolQuestion:
        return PoolQuestion(self.chars, self.gold, self.dropped_chars, self.dropped_gold)


def read_labelled_jsonl(path: str | Path, dataset: str = "user") -> tuple[list[LabelledQuery], list[str]]:
    """The usable questions of a labelled JSONL file, and a note for each
    line skipped."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise LabelledDataError(f"cannot read {path}: {exc.strerror or exc}") from None
    out, skipped = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            question = str(record["question"]).strip()
            documents = record["documents"]
            if not question or not isinstance(documents, list) or not documents:
                raise ValueError("needs a question and a non-empty list of documents")
            docs = []
            for k, doc in enumerate(documents):
                text = doc["text"] if isinstance(doc, Mapping) else doc
                if not isinstance(text, str) or not text.strip():
                    raise ValueError(f"document {k} has no text")
                title = str(doc.get("title", "")) if isinstance(doc, Mapping) else ""
                digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                docs.append(Doc(f"{dataset}-{digest}", text, title))
            answers = tuple(str(a) for a in record.get("answers") or ())
            relevant = tuple(str(r) for r in record.get("relevant") or ())
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            skipped.append(f"line {number}: {exc}")
            continue
        out.append(LabelledQuery(dataset, str(record.get("id", number)), question, tuple(docs), answers, relevant))
    if not out:
        raise LabelledDataError(f"{path} holds no usable question ({len(skipped)} lines skipped)")
    return out, skipped


def collect(
    queries: Sequence[LabelledQuery],
    *,
    client,
    embedder,
    settings,
    index: str,
    judge_many: JudgeMany | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Collected]:
    """Index the questions' documents, search each question among its own,
    and record every candidate's features (with the judge's share when
    ``judge_many`` is given) and gold."""
    from ingest_pipeline.pipeline import ingest_documents
    from ingest_pipeline.sources import plain_document
    from search_extension.retriever import HybridRetriever

    docs = unique_docs(queries)
    report = ingest_documents(
        (plain_document(d.doc_id, d.text, d.doc_id, title=d.title) for d in docs),
        client=client,
        embedder=embedder,
        settings=settings,
        index=index,
        progress=False,
    )
    if not report.ok:
        raise RuntimeError(f"indexing the labelled documents failed: {report.errors[:3]}")
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    scoring = ScoringOptions(method="listwise")
    out = []
    for n, query in enumerate(queries):
        pool = [{"terms": {DOC_ID: [d.doc_id for d in query.docs]}}]
        found = retriever.search(query.question, size=CANDIDATES, filters=pool, include_vectors=True)
        kept, redundant = drop_redundant(list(found.chunks), DEFAULT_REDUNDANCY_THRESHOLD)
        shares: list[float | None] = [None] * len(kept)
        batches: list[list[int]] = []
        if judge_many is not None and kept:
            head = kept[:JUDGE_TOP]
            judgements = judge_many(query.question, head, scoring)
            shares[: len(head)] = [j.base for j in judgements]
            batches = [list(range(len(head)))]
        features = candidate_features(query.question, kept, shares, batches)
        out.append(
            Collected(
                query.dataset,
                query.query_id,
                tuple(features),
                tuple(len(c.text) for c in kept),
                tuple(query.gold(c.text) for c in kept),
                sum(len(r.chunk.text) for r in redundant),
                any(query.gold(r.chunk.text) for r in redundant),
            )
        )
        if progress:
            progress(n + 1, len(queries))
    return out


def fit_model(collected: Sequence[Collected], names: Sequence[str], target: float = TARGET) -> Calibrated:
    """A logistic model over ``names`` and the highest cut keeping ``target``
    of the answers in the pool on the mean of the datasets."""
    rows = [f for c in collected for f in c.features]
    labels = [g for c in collected for g in c.gold]
    if not any(labels) or all(labels):
        raise LabelledDataError("the candidates need both relevant and irrelevant chunks to fit a model")
    model = fit_logistic(rows, labels, names)
    by_set: dict[str, list[Collected]] = {}
    for c in collected:
        by_set.setdefault(c.dataset, []).append(c)
    per_set = [
        ([c.pool() for c in items], [[model.probability(f) for f in c.features] for c in items])
        for items in by_set.values()
    ]
    return Calibrated(model, highest_cut(per_set, CUTS, target))


def fit_calibration(
    collected: Sequence[Collected], judged: bool, target: float = TARGET, names: Sequence[str] | None = None
) -> tuple[Calibrated, Calibrated | None]:
    """The retrieval model (no judge) over ``names`` (default: the shipped
    file's retrieval features), and the judged one (the judge's features
    beside them) when the judge's shares were collected."""
    names = tuple(names or load_calibration(None).retrieval.model.names)
    retrieval = fit_model(collected, names, target)
    return retrieval, fit_model(collected, JUDGE_FEATURES + names, target) if judged else None


def calibrate(
    queries: Sequence[LabelledQuery],
    out: str | Path,
    *,
    client,
    embedder,
    settings,
    index: str,
    judge_many: JudgeMany | None = None,
    target: float = TARGET,
    about: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Collect, fit and write a calibration file; without a judge the file
    keeps the shipped judged model (fitted for the offline model), so
    turning the judge on still works. Returns what was written."""
    collected = collect(
        queries,
        client=client,
        embedder=embedder,
        settings=settings,
        index=index,
        judge_many=judge_many,
        progress=progress,
    )
    retrieval, judged = fit_calibration(collected, judge_many is not None, target)
    kept_judged = judged or load_calibration(None).judged
    summary = {
        "questions": len(collected),
        "sets": sorted({c.dataset for c in collected}),
        "candidates": sum(len(c.chars) for c in collected),
        "relevant_candidates": sum(sum(c.gold) for c in collected),
        "target": target,
        "retrieval": {"cut": retrieval.cut, "weights": describe(retrieval.model)},
        "judged": {"cut": judged.cut, "weights": describe(judged.model)} if judged else "the shipped judged model",
    }
    path = write_calibration(out, retrieval, kept_judged, {**(about or {}), **summary})
    return {"file": str(path), **summary}


def describe(model: LogisticModel) -> dict[str, Any]:
    return dict(zip(model.names, model.weights)) | {"bias": model.bias}
