"""Labelled (query, chunk) pairs for the relevance model, built from ``shared/eval``.

Only sets whose licence allows training go in (shared/eval/MANIFEST.md):
SQuAD 2.0 dev (CC BY-SA 4.0) and NQ-open with its gold passages (CC BY-SA
3.0). PopQA, PubHealth and FActScore would be allowed too, but they are held
out whole, as are the evaluation-only sets (SciFact, WikiQA, HealthVer,
Climate-FEVER): every figure the model card reports is on a dataset the model
never saw.

A pair is relevant (1) when the chunk holds the answer. Chunks are runs of
consecutive Punkt sentences packed up to a size drawn per question, so the
model sees single sentences as well as the ingest's ~500-character chunks.
Negatives, hardest first:

* SQuAD: the paragraph's other chunks; chunks of other paragraphs of the same
  article; the chunks of an unanswerable question's paragraph (SQuAD 2.0
  wrote those questions to look answerable there).
* NQ: the gold passage's own sentences that miss the answer; the passages of
  other questions closest to this one by MiniLM cosine.

A negative that contains an answer string anyway is left out (it may well
answer). Everything is seeded; :func:`build` returns the pairs and a manifest
with the sha256 of every input file, so a rebuilt set can be compared.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from chunkrag_core.artifacts import file_sha256
from ingest_pipeline.sentences import sentence_spans

SQUAD_FILE = "squad/squad2_cs224n_dev-v2.0.json"
NQ_FILE = "nq/nq-open-oracle.jsonl.gz"
TRAINING_SETS = {"squad": SQUAD_FILE, "nq": NQ_FILE}
# Chunk sizes drawn per question (characters): one sentence up to a long
# chunk, around the ingest's ~500-character target.
SIZE_CHOICES = (1, 200, 350, 500, 650, 800)
# Negatives per question from each source, so one long paragraph does not
# flood the set with easy negatives.
SAME_PARAGRAPH_NEGATIVES = 2
OTHER_PARAGRAPH_NEGATIVES = 2
UNANSWERABLE_NEGATIVES = 2
NQ_HARD_NEGATIVES = 3
# How many of the nearest other passages an NQ question's hard negatives are
# drawn from (the very nearest are often paraphrases of the gold one).
NQ_NEIGHBOURS = 8
# Share of questions (whole SQuAD articles, whole NQ questions) kept apart to
# choose the training length; never one of the held-out datasets.
VALIDATION_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Pair:
    query: str
    text: str
    label: int  # 1: the chunk holds the answer
    source: str  # "squad" or "nq"
    group: str  # the question (pairs of one group rank against each other)
    split: str  # "train" or "validation"


def chunks_of(text: str, size: int) -> list[tuple[int, int]]:
    """``text`` cut into runs of consecutive sentences of at most ``size``
    characters (a sentence longer than that is a chunk of its own), as
    (start, end) offsets; ``size`` 1 gives one sentence per chunk."""
    out: list[tuple[int, int]] = []
    for start, end in sentence_spans(text, 0, len(text)):
        if out and end - out[-1][0] <= size:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def holds_answer(text: str, answers: Iterable[str]) -> bool:
    lowered = text.lower()
    return any(a.strip() and a.strip().lower() in lowered for a in answers)


def split_of(key: str, seed: int) -> str:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return "validation" if digest[0] / 256 < VALIDATION_SHARE else "train"


def squad_pairs(path: Path, seed: int) -> list[Pair]:
    rng = random.Random(seed)
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    out: list[Pair] = []
    for article in data:
        split = split_of("squad:" + article["title"], seed)
        paragraphs = [p["context"] for p in article["paragraphs"]]
        for index, paragraph in enumerate(article["paragraphs"]):
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                group = f"squad:{qa['id']}"
                size = rng.choice(SIZE_CHOICES)
                spans = chunks_of(context, size)
                answers = [a["text"] for a in qa["answers"]]
                if qa.get("is_impossible") or not answers:
                    for start, end in rng.sample(spans, min(UNANSWERABLE_NEGATIVES, len(spans))):
                        out.append(Pair(qa["question"], context[start:end], 0, "squad", group, split))
                    continue
                first = qa["answers"][0]
                begin, finish = first["answer_start"], first["answer_start"] + len(first["text"])
                positives = [(s, e) for s, e in spans if s <= begin and finish <= e]
                if not positives:
                    continue  # the answer runs across a sentence break: no single chunk holds it
                s, e = positives[0]
                out.append(Pair(qa["question"], context[s:e], 1, "squad", group, split))
                same = [(s2, e2) for s2, e2 in spans if (s2, e2) != (s, e)]
                same = [x for x in same if not holds_answer(context[x[0] : x[1]], answers)]
                for start, end in rng.sample(same, min(SAME_PARAGRAPH_NEGATIVES, len(same))):
                    out.append(Pair(qa["question"], context[start:end], 0, "squad", group, split))
                others = [i for i in range(len(paragraphs)) if i != index]
                for other in rng.sample(others, min(OTHER_PARAGRAPH_NEGATIVES, len(others))):
                    text = paragraphs[other]
                    start, end = rng.choice(chunks_of(text, size))
                    if not holds_answer(text[start:end], answers):
                        out.append(Pair(qa["question"], text[start:end], 0, "squad", group, split))
    return out


def read_nq(path: Path) -> list[tuple[str, list[str], str]]:
    """(question, answers, gold passage "title: text") per NQ-open record."""
    records = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            gold = record["ctxs"][0]
            records.append((record["question"], list(record["answers"]), gold["text"]))
    return records


def nq_pairs(path: Path, seed: int, embed) -> list[Pair]:
    """``embed`` turns texts into L2-normalised rows (the project's MiniLM);
    it picks the hard negatives among the other questions' passages."""
    rng = random.Random(seed + 1)
    records = read_nq(path)
    questions = embed([q for q, _, _ in records])
    passages = embed([p for _, _, p in records])
    similarity = questions @ passages.T
    out: list[Pair] = []
    for i, (question, answers, passage) in enumerate(records):
        group = f"nq:{i}"
        split = split_of(group, seed)
        out.append(Pair(question, passage, 1, "nq", group, split))
        size = rng.choice(SIZE_CHOICES[:4])
        parts = [passage[s:e] for s, e in chunks_of(passage, size)]
        if len(parts) > 1:
            holding = [p for p in parts if holds_answer(p, answers)]
            missing = [p for p in parts if not holds_answer(p, answers)]
            if holding:
                out.append(Pair(question, rng.choice(holding), 1, "nq", group, split))
            if missing:
                out.append(Pair(question, rng.choice(missing), 0, "nq", group, split))
        nearest = [int(j) for j in np.argsort(-similarity[i])[: NQ_NEIGHBOURS + 1] if int(j) != i]
        candidates = [j for j in nearest if not holds_answer(records[j][2], answers)]
        for j in rng.sample(candidates, min(NQ_HARD_NEGATIVES, len(candidates))):
            out.append(Pair(question, records[j][2], 0, "nq", group, split))
    return out


def build(eval_dir: Path, seed: int, embed) -> tuple[list[Pair], dict]:
    """Every training pair, and a manifest: the inputs' sha256, the seed,
    and the counts by source, split and label."""
    pairs = squad_pairs(eval_dir / SQUAD_FILE, seed) + nq_pairs(eval_dir / NQ_FILE, seed, embed)
    counts: dict[str, int] = {}
    for pair in pairs:
        key = f"{pair.source}/{pair.split}/{pair.label}"
        counts[key] = counts.get(key, 0) + 1
    manifest = {
        "seed": seed,
        "inputs": {name: {"path": rel, "sha256": file_sha256(eval_dir / rel)} for name, rel in TRAINING_SETS.items()},
        "counts": dict(sorted(counts.items())),
        "pairs": len(pairs),
        "pairs_sha256": pairs_digest(pairs),
    }
    return pairs, manifest


def pairs_digest(pairs: Sequence[Pair]) -> str:
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps(asdict(pair), sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()


def write_jsonl(pairs: Sequence[Pair], path: Path) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(asdict(pair), ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[Pair]:
    with path.open(encoding="utf-8") as handle:
        return [Pair(**json.loads(line)) for line in handle if line.strip()]
