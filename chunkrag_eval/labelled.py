"""Questions with their candidate documents and relevance gold, from every
set in ``shared/eval`` that has such gold, for fitting and judging the
filter across datasets (leave one dataset out).

Each :class:`LabelledQuery` holds the documents its candidates come from
(one pool per question, searched with the hybrid query restricted to those
documents) and what makes a chunk count:

- ``answers`` (PopQA, NQ, SQuAD): a chunk holding any answer as a
  case-insensitive substring is answer-bearing (PopQA's rule).
- ``relevant`` (SciFact, WikiQA, HealthVer, Climate-FEVER): the gold
  sentences or passages; a chunk that holds the start of one (or whose
  start lies inside one) is relevant.

A query with neither (a SQuAD unanswerable question, a WikiQA question
without a correct sentence, a claim whose evidence is all neutral) has
nothing to keep: those measure the "nothing relevant" decision.

Pools, by set (``sample`` draws questions with a fixed seed, not a prefix):

- popqa: each record's ``contexts.ambiguous`` pool, one document (as
  ``chunkrag eval`` indexes it).
- nq: the gold passage among the gold passages of nine other sampled
  questions (distractors), one document each, titled.
- squad: every paragraph of the question's article, one document each,
  titled; answerable and unanswerable questions sampled separately.
- scifact: the cited abstracts beside four abstracts drawn at random from
  the corpus; gold: the rationale sentences.
- wikiqa: the question's candidate sentences as one titled document.
- healthver: a claim's evidence passages, one paragraph each; Supports or
  Refutes is relevant, Neutral is not.
- climate_fever: a claim's five evidence sentences, one titled document each;
  SUPPORTS or REFUTES is relevant.

PubHealth (true/false labels only) and FActScore bio (no gold) carry no
relevance gold and are not read here.
"""

from __future__ import annotations

import csv
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from chunkrag_eval.datasets import nq_gold, pool_text
from chunkrag_eval.measures import answer_in_context

DATASETS = ("popqa", "nq", "squad", "scifact", "wikiqa", "healthver", "climate_fever")
# Sets whose gold is an answer string (the others: relevant sentences).
ANSWER_SETS = ("popqa", "nq", "squad")
NQ_DISTRACTORS = 9
SCIFACT_DISTRACTORS = 4
# How much of a gold sentence's start must appear in a chunk to count: long
# enough to be unique, short enough to survive a chunk cut mid-sentence.
MATCH_CHARS = 50


@dataclass(frozen=True, slots=True)
class Doc:
    doc_id: str
    text: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    dataset: str
    query_id: str
    question: str
    docs: tuple[Doc, ...]
    answers: tuple[str, ...] = ()
    relevant: tuple[str, ...] = ()

    @property
    def answerable(self) -> bool:
        return bool(self.answers or self.relevant)

    def gold(self, chunk_text: str) -> bool:
        """Does this chunk hold an answer (answer sets) or a relevant sentence?"""
        if self.answers:
            return answer_in_context(chunk_text, self.answers)
        chunk = _norm(chunk_text)
        for sentence in self.relevant:
            gold = _norm(sentence)
            if gold and (gold[:MATCH_CHARS] in chunk or (len(chunk) >= 20 and chunk[:MATCH_CHARS] in gold)):
                return True
        return False


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _sample(items: list, count: int | None, seed: int) -> list:
    if count is None or count >= len(items):
        return list(items)
    return random.Random(seed).sample(items, count)


def read_popqa(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    out = []
    for line in (root / "popqa" / "dev.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            qid = str(record.get("question_id", record.get("id")))
            text = pool_text(record["contexts"]["ambiguous"])
            out.append(
                LabelledQuery(
                    "popqa", qid, record["question"], (Doc(f"popqa-{qid}", text),), answers=tuple(record["answers"])
                )
            )
    return _sample(out, count, seed)


NQ_PATH = "nq/nq-open-oracle.jsonl.gz"


def read_nq(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    records = [(r.number, r, Doc(f"nq-{r.number}", r.gold_text, r.gold_title)) for r in nq_gold(root / NQ_PATH)]
    chosen = _sample(records, count, seed)
    rng = random.Random(seed + 1)
    out = []
    for number, record, doc in chosen:
        others = [d for n, _, d in chosen if n != number]
        distractors = rng.sample(others, min(NQ_DISTRACTORS, len(others)))
        out.append(LabelledQuery("nq", str(number), record.question, (doc, *distractors), record.answers))
    return out


def read_squad(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    """``count`` answerable questions and half as many unanswerable ones."""
    data = json.loads((root / "squad" / "squad2_cs224n_dev-v2.0.json").read_text(encoding="utf-8"))["data"]
    answerable, unanswerable = [], []
    for a, article in enumerate(data):
        title = article["title"].replace("_", " ")
        docs = tuple(Doc(f"squad-{a}-{p}", para["context"], title) for p, para in enumerate(article["paragraphs"]))
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = tuple(dict.fromkeys(x["text"] for x in qa["answers"]))
                item = LabelledQuery("squad", qa["id"], qa["question"], docs, answers)
                (answerable if answers else unanswerable).append(item)
    half = None if count is None else max(1, count // 2)
    return _sample(answerable, count, seed) + _sample(unanswerable, half, seed)


def read_scifact(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    base = root / "scifact" / "beir_derived"
    corpus = {}
    for line in (base / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            corpus[record["_id"]] = record
    ids = sorted(corpus)
    rng = random.Random(seed + 2)
    out = []
    for line in (base / "queries_validation.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        evidence = record.get("evidence") or {}
        if not evidence:
            continue
        relevant, cited = [], []
        for doc_id, gold in evidence.items():
            if doc_id not in corpus:
                continue
            cited.append(doc_id)
            sentences = corpus[doc_id]["sentences"]
            for group in gold["rationale_sentence_idx"]:
                relevant += [sentences[i] for i in group if 0 <= i < len(sentences)]
        if not relevant:
            continue
        pool = (
            cited
            + [d for d in rng.sample(ids, SCIFACT_DISTRACTORS + len(cited)) if d not in cited][:SCIFACT_DISTRACTORS]
        )
        docs = tuple(Doc(f"scifact-{d}", " ".join(corpus[d]["sentences"]), corpus[d]["title"]) for d in pool)
        out.append(LabelledQuery("scifact", record["_id"], record["text"], docs, relevant=tuple(relevant)))
    return _sample(out, count, seed)


def read_wikiqa(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    grouped: dict[str, dict] = {}
    with (root / "wikiqa" / "WikiQA-dev.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            entry = grouped.setdefault(
                row["QuestionID"], {"q": row["Question"], "title": row["DocumentTitle"], "s": [], "r": []}
            )
            entry["s"].append(row["Sentence"])
            if row["Label"].strip() == "1":
                entry["r"].append(row["Sentence"])
    out = [
        LabelledQuery(
            "wikiqa", qid, e["q"], (Doc(f"wikiqa-{qid}", " ".join(e["s"]), e["title"]),), relevant=tuple(e["r"])
        )
        for qid, e in grouped.items()
    ]
    return _sample(out, count, seed)


def read_healthver(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    with (root / "healthver" / "healthver_dev.csv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            evidence, relevant = grouped.setdefault(row["claim"].strip(), ([], []))
            if row["evidence"].strip() not in evidence:
                evidence.append(row["evidence"].strip())
            if row["label"].strip() != "Neutral":
                relevant.append(row["evidence"].strip())
    out = [
        LabelledQuery("healthver", f"hv{i}", claim, (Doc(f"healthver-{i}", "\n\n".join(ev)),), relevant=tuple(rel))
        for i, (claim, (ev, rel)) in enumerate(grouped.items())
    ]
    return _sample(out, count, seed)


def read_climate_fever(root: Path, count: int | None, seed: int) -> list[LabelledQuery]:
    out = []
    for line in (root / "climate_fever" / "climate-fever.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        claim_id = record["claim_id"]
        docs = tuple(Doc(f"cf-{claim_id}-{k}", e["evidence"], e["article"]) for k, e in enumerate(record["evidences"]))
        relevant = tuple(e["evidence"] for e in record["evidences"] if e["evidence_label"] != "NOT_ENOUGH_INFO")
        out.append(LabelledQuery("climate_fever", f"cf{claim_id}", record["claim"], docs, relevant=relevant))
    return _sample(out, count, seed)


READERS = {
    "popqa": read_popqa,
    "nq": read_nq,
    "squad": read_squad,
    "scifact": read_scifact,
    "wikiqa": read_wikiqa,
    "healthver": read_healthver,
    "climate_fever": read_climate_fever,
}


def read_labelled(name: str, root: str | Path, count: int | None = None, seed: int = 7) -> list[LabelledQuery]:
    """The queries of set ``name`` under ``root`` (``shared/eval``): all of
    them, or a seeded sample of ``count``."""
    if name not in READERS:
        raise ValueError(f"unknown labelled set {name!r}; choose one of {', '.join(DATASETS)}")
    return READERS[name](Path(root), count, seed)


def unique_docs(queries: Sequence[LabelledQuery]) -> list[Doc]:
    seen: dict[str, Doc] = {}
    for query in queries:
        for doc in query.docs:
            seen.setdefault(doc.doc_id, doc)
    return list(seen.values())
