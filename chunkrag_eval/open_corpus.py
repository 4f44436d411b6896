"""The open corpus: every question's pool of the dev sets and thousands of
distractor passages in one shared index, the regime users live in.

``chunkrag eval`` and ``chunkrag table`` index each question's pool apart and
retrieve within it; here the pools of PopQA and PubHealth dev and the
distractors (NQ-open's gold Wikipedia passages, SQuAD's paragraphs) are one
index, and each question's N candidates come from the whole of it with the
project's hybrid retriever, no pool filter.

The index is named by a fingerprint of the corpus (every document's own
fingerprint, which covers its text and everything that shapes its chunks:
the chunking settings and the embedding model), so it is built once and
reused, and a changed chunker builds a new one. Ingest is idempotent, so a
run stopped half way resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from chunkrag_core.artifacts import file_sha256
from chunkrag_core.settings import Settings
from chunkrag_eval.datasets import EvalDataError, EvalItem, nq_gold, read_items
from chunkrag_eval.runner import doc_id_for
from ingest_pipeline.chunker import document_fingerprint
from ingest_pipeline.pipeline import ingest_documents, shaping_of
from ingest_pipeline.sources import Document, plain_document

# The dev sets whose pools are always in the shared index (under the
# evaluation root), whichever of them is evaluated: `eval` on one set and
# `table` on both then read the same index.
POOL_FILES = ("popqa/dev.jsonl", "pubhealth/dev.jsonl")
# The distractor sets and their files under the evaluation root.
DISTRACTOR_FILES = {
    "nq": "nq/nq-open-oracle.jsonl.gz",
    "squad": "squad/squad2_cs224n_dev-v2.0.json",
}
INDEX_PREFIX = "chunkrag-open"
# Hex digits of the corpus fingerprint in the index name.
NAME_DIGITS = 12


@dataclass(frozen=True, slots=True)
class Corpus:
    documents: tuple[Document, ...]
    # Documents per source: "popqa", "pubhealth", "nq", "squad".
    sources: Mapping[str, int]
    # The files it is built from: path, sha256, documents taken.
    files: tuple[Mapping[str, Any], ...] = ()


def eval_root() -> Path:
    """Where shared/eval is: $CHUNKRAG_SHARED/eval, else the shared/ folder
    beside this checkout (the project's layout)."""
    shared = os.environ.get("CHUNKRAG_SHARED")
    if shared:
        return Path(shared) / "eval"
    return Path(__file__).resolve().parents[2] / "shared" / "eval"


def pool_documents(dataset: str, items: Sequence[EvalItem]) -> list[Document]:
    """Each question's pool as one document, named as ``chunkrag eval`` names
    it, so a candidate's ``doc_id`` says whose pool it came from."""
    return [plain_document(doc_id_for(dataset, item), item.pool, f"{dataset}:{item.item_id}") for item in items]


def nq_documents(path: Path, limit: int | None = None) -> list[Document]:
    """NQ-open's gold passages, each text once (the first question's number names it)."""
    out = []
    for r in nq_gold(path):
        if r.doc_id == f"nq-{r.number}":  # the text's first record
            out.append(plain_document(r.doc_id, r.gold_text, f"nq:{r.number}"))
            if limit is not None and len(out) >= limit:
                break
    return out


def squad_documents(path: Path, limit: int | None = None) -> list[Document]:
    """SQuAD 2.0 dev's paragraphs, article by article."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    out = []
    for a, article in enumerate(data):
        for p, paragraph in enumerate(article["paragraphs"]):
            out.append(plain_document(f"squad-{a}-{p}", paragraph["context"], f"squad:{a}:{p}"))
            if limit is not None and len(out) >= limit:
                return out
    return out


def parse_distractors(text: str | None) -> dict[str, int | None]:
    """``"nq,squad"`` (all of each), ``"nq=1000,squad"`` or ``"none"`` as
    {set: limit or None for all}."""
    if not text or text.strip() == "none":
        return {}
    out: dict[str, int | None] = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        if name not in DISTRACTOR_FILES:
            raise ValueError(f"unknown distractor set {name!r}; choose among {', '.join(DISTRACTOR_FILES)}, or none")
        try:
            out[name] = int(value) if value else None
        except ValueError:
            raise ValueError(f"a distractor set is NAME or NAME=N, not {part.strip()!r}") from None
    return out


def build_corpus(
    files: Sequence[str | Path],
    root: Path,
    distractors: Mapping[str, int | None],
    *,
    dev_pools: bool = True,
) -> Corpus:
    """The corpus as a declared input, the same whatever questions are read:
    every record's pool of each evaluated file in ``files``, with
    ``dev_pools`` every pool of ``POOL_FILES`` under ``root``, and the
    distractors. A missing file is an error naming it."""
    documents: dict[str, Document] = {}
    sources: dict[str, int] = {}
    described: list[dict[str, Any]] = []

    def add(source: str, docs: Sequence[Document], path: Path) -> None:
        taken = 0
        for doc in docs:
            if doc.doc_id not in documents:
                documents[doc.doc_id] = doc
                sources[source] = sources.get(source, 0) + 1
                taken += 1
        described.append({"path": str(path), "sha256": file_sha256(path), "documents": taken})

    def found(path: Path, what: str) -> Path:
        if not path.is_file():
            raise EvalDataError(
                f"{what} not found at {path}; set CHUNKRAG_SHARED to the shared/ folder that holds eval/"
            )
        return path

    pools = [Path(f) for f in files] + ([root / name for name in POOL_FILES] if dev_pools else [])
    for path in dict.fromkeys(p.resolve() for p in pools):
        fmt, items, _ = read_items(found(path, "an evaluation file"))
        add(fmt, pool_documents(fmt, items), path)
    readers = {"nq": nq_documents, "squad": squad_documents}
    for name, limit in distractors.items():
        path = found(root / DISTRACTOR_FILES[name], f"distractor set {name} (or pass --distractors none)")
        add(name, readers[name](path, limit), path)
    return Corpus(tuple(documents[k] for k in sorted(documents)), sources, tuple(described))


def corpus_fingerprint(documents: Sequence[Document], settings: Settings) -> str:
    """One hash of every document's fingerprint (its text and what shapes its chunks)."""
    shaping = shaping_of(settings)
    digest = hashlib.sha256(shaping.encode())
    for doc in sorted(documents, key=lambda d: d.doc_id):
        digest.update(f"\n{doc.doc_id}\t{document_fingerprint(doc, shaping)}".encode())
    return digest.hexdigest()


def index_name(documents: Sequence[Document], settings: Settings, prefix: str = INDEX_PREFIX) -> str:
    return f"{prefix}-{corpus_fingerprint(documents, settings)[:NAME_DIGITS]}"


def ensure_corpus_index(corpus: Corpus, *, client, embedder, settings: Settings, index: str, progress: bool = False):
    """Ingest the corpus (a document already there unchanged is skipped);
    the ingest report."""
    report = ingest_documents(
        list(corpus.documents), client=client, embedder=embedder, settings=settings, index=index, progress=progress
    )
    if not report.ok:
        raise RuntimeError(f"indexing the open corpus failed: {report.errors[:3]}")
    return report
