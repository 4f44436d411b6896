"""Pair-level relevance on held-out pairs: the measure a new relevance
model must win, fixed before it is trained.

A *pair* is a question and one text (a sentence or a chunk) with a label:
does the text hold what the question asks? Five pair sets, none of them
trained on by the relevance model (chunkrag_core/model_files/relevance-minilm.md):

- ``wikiqa``: WikiQA dev, every question with each of its candidate
  sentences (WikiQA's label);
- ``scifact``: SciFact claims with evidence, each with every sentence of the
  abstracts it cites (``qrels_validation_cited.tsv``); positive: a rationale
  sentence (``rationale_sentence_idx``);
- ``squad``: answerable SQuAD 2.0 dev questions of the articles the
  relevance model held out of training (:data:`chunkrag_eval.unanswerable.SQUAD_ARTICLES`;
  its validation article, on which the model's own cut was chosen, not the
  calibration's read here),
  :data:`SQUAD_QUESTIONS` of them (seeded), each with every sentence of its
  article (the project's sentence splitter); positive: the sentence holds an
  annotated answer span, by offset;
- ``popqa``: PopQA dev, each question with every chunk of its pool (the
  ``ambiguous`` pool, chunked as ingest chunks it); positive: the chunk
  holds a gold answer as whole words;
- ``samples``: the held-back sample questions (``data/sample_questions_heldback.json``)
  with every chunk of the sample corpus (chunked as ingest chunks it);
  positive: the chunk holds the question's answering phrase verbatim.

Two harder views (:data:`VIEWS`), subsets of the SQuAD and sample pairs
with the same scores, keep the question's own paragraph and the answer's
own source file.

Each pair is scored by the relevance model (its log-odds), by the
project's embedder (query-text cosine), by BM25 over the set's distinct
texts (:class:`Bm25`, Lucene's formula) and, within each question's pairs,
by the hybrid order (BM25 and cosine each min-max normalised over the
question's pairs, weighted as the retriever weighs them) and by the shipped
``relevance`` calibration (the model's log-odds beside those retrieval
signals, as the filter computes them over a question's candidates).

The measures: ROC AUC over all of a set's pairs, with a 95% interval from a
bootstrap over questions (pairs of a question move together, so the
interval is not too narrow), and the difference model − cosine with its
interval from the same resamples; the share of answering pairs the model
passes: its calibrated probability at the calibration's cut, and the gate's
view (the cross-encoder gate's probability were this pair the question's
only candidate, at the gate's cut). :data:`GOAL_AUC_MARGIN` and
:data:`GOAL_SHARE` are the goal.

Scores are cached per pair (a model's log-odds under its file's sha256, the
cosine under the embedder's name), so a rerun scores nothing twice.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

SETS = ("wikiqa", "scifact", "squad", "popqa", "samples")
# Fixed before any new model is trained: the goal a model must reach on
# every pair set.
GOAL_AUC_MARGIN = 0.05  # ROC AUC at least the embedder's cosine + this
GOAL_SHARE = 0.95  # of the answering pairs above the model's cut
# The scorers held to the goal, each against cosine: the shipped relevance
# model, and a fine-tuned judge embedder when one is given (``--judge``).
JUDGED = ("model", "judge")
SEED = 71
BOOTSTRAP = 1000
# SQuAD questions drawn (seeded) from the held-out article: each is paired
# with all ~250 of its sentences, so 40 questions are ~10,000 pairs, about
# two minutes of the model on two cores.
SQUAD_QUESTIONS = 40
# Harder views of two sets, subsets of their pairs (no new scoring): where
# the negatives come from the whole article or corpus, cosine's AUC is near
# 1 and the margin of the goal out of reach; within the question's own
# paragraph or source file it is not.
VIEWS = ("squad_own_paragraph", "samples_own_file")
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "chunkrag_cli" / "samples"  # the sample corpus (read as files: the CLI is a layer above)
QUESTIONS = ROOT / "chunkrag_eval" / "data" / "sample_questions_heldback.json"
GATE_CHOICE = ROOT / "bench" / "results" / "gate_choice.json"
STUDY_VERSION = "1"  # part of a built set's cache key: bump when a builder changes


@dataclass(frozen=True, slots=True)
class Pair:
    group: str  # the question's id within its set
    query: str
    text: str
    label: bool


# ------------------------------------------------------------ the measures


def weighted_auc(scores: Sequence[float], labels: Sequence[bool], weights: Sequence[float] | None = None) -> float:
    """ROC AUC: the chance a positive outscores a negative, ties half, each
    pair counted ``weights`` times (a bootstrap's counts; None: once). NaN
    without both classes."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, dtype=np.float64)
    _, tie = np.unique(s, return_inverse=True)  # tie groups in ascending score order
    pos = np.bincount(tie, weights=w * y)
    neg = np.bincount(tie, weights=w * ~y)
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos == 0 or total_neg == 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float(np.sum(pos * (below + 0.5 * neg)) / (total_pos * total_neg))


def question_resamples(groups: Sequence[str], resamples: int, seed: int) -> np.ndarray:
    """``resamples`` bootstrap draws over questions, as weights per pair:
    each row counts how often the pair's question was drawn."""
    names = sorted(set(groups))
    index = {g: i for i, g in enumerate(names)}
    of_pair = np.array([index[g] for g in groups], dtype=np.int64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(names), size=(resamples, len(names)))
    counts = np.stack([np.bincount(row, minlength=len(names)) for row in draws])
    return counts[:, of_pair].astype(np.float64)


def interval(values: Sequence[float]) -> list[float]:
    """The 2.5th and 97.5th percentiles of bootstrap values (NaNs dropped)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if not len(v):
        return [float("nan"), float("nan")]
    return [round(float(np.percentile(v, 2.5)), 4), round(float(np.percentile(v, 97.5)), 4)]


def share_above(scores: Sequence[float], labels: Sequence[bool], cut: float) -> float:
    """The share of the positive pairs scoring at or above ``cut``."""
    kept = [s >= cut for s, label in zip(scores, labels) if label]
    return sum(kept) / len(kept) if kept else float("nan")


# ------------------------------------------------------------------- BM25

# Lucene's English stop words (Elasticsearch's `english` analyzer uses them).
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
_TOKEN = re.compile(r"\w+")


def bm25_terms(text: str) -> list[str]:
    """Near Elasticsearch's ``english`` analyzer, which the index's text
    field uses: lower-cased word tokens, possessive 's dropped, English stop
    words out, Porter stems."""
    stem = _porter()
    words = (w[:-2] if w.endswith("'s") else w for w in re.findall(r"[\w']+", text.lower()))
    return [stem(t) for w in words for t in _TOKEN.findall(w) if t not in STOPWORDS]


def _porter() -> Callable[[str], str]:
    global _STEM
    if _STEM is None:
        from nltk.stem.porter import PorterStemmer

        # Lucene's PorterStemFilter is the original algorithm.
        _STEM = PorterStemmer(mode=PorterStemmer.ORIGINAL_ALGORITHM).stem
    return _STEM


_STEM: Callable[[str], str] | None = None


class Bm25:
    """Okapi BM25 as Lucene (and so Elasticsearch) scores it: idf
    ln(1 + (N - n + 0.5) / (n + 0.5)), term weight tf / (tf + k1 (1 - b +
    b dl / avgdl)), summed over the query's distinct terms. ``documents``
    are already tokenised."""

    def __init__(self, documents: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tf = [_counts(d) for d in documents]
        self.length = [len(d) for d in documents]
        self.avgdl = sum(self.length) / len(documents) if documents else 0.0
        df: dict[str, int] = {}
        for counts in self.tf:
            for term in counts:
                df[term] = df.get(term, 0) + 1
        n = len(documents)
        self.idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}

    def score(self, query: Sequence[str], doc: int) -> float:
        counts, norm = self.tf[doc], 1 - self.b + self.b * self.length[doc] / (self.avgdl or 1.0)
        total = 0.0
        for term in set(query):
            tf = counts.get(term, 0)
            if tf:
                total += self.idf[term] * tf / (tf + self.k1 * norm)
        return total


def _counts(terms: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in terms:
        out[t] = out.get(t, 0) + 1
    return out


# --------------------------------------------------------------- the sets


def wikiqa_pairs(path: Path) -> list[Pair]:
    """WikiQA: every question with each of its candidate sentences."""
    with path.open(encoding="utf-8", newline="") as handle:
        return [
            Pair(row["QuestionID"], row["Question"], row["Sentence"], row["Label"] == "1")
            for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        ]


def scifact_pairs(base: Path) -> list[Pair]:
    """SciFact: every claim with evidence, with each sentence of every
    abstract it cites; its rationale sentences positive."""
    sentences = {}
    with (base / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            sentences[str(record["_id"])] = record["sentences"]
    cited: dict[str, list[str]] = {}
    with (base / "qrels_validation_cited.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            cited.setdefault(row["query-id"], []).append(row["corpus-id"])
    out = []
    with (base / "queries_validation.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            claim = json.loads(line)
            evidence = claim.get("evidence") or {}
            if not evidence:
                continue
            qid = str(claim["_id"])
            docs = list(dict.fromkeys([*cited.get(qid, []), *map(str, evidence)]))
            for doc in docs:
                rationale = {i for group in (evidence.get(doc) or {}).get("rationale_sentence_idx", []) for i in group}
                for i, sentence in enumerate(sentences.get(doc, [])):
                    out.append(Pair(qid, claim["text"], sentence, i in rationale))
    return out


def squad_pairs(
    path: Path,
    articles: Sequence[str],
    split: Callable[[str], Sequence[tuple[int, int]]],
    count: int | None = SQUAD_QUESTIONS,
    seed: int = SEED,
) -> list[Pair]:
    """SQuAD 2.0: ``count`` answerable questions of ``articles`` (seeded;
    None: all), each with every sentence of its article (``split`` gives a
    paragraph's sentence spans); positive: a sentence of the question's own
    paragraph whose span holds an annotated answer span."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    out = []
    for article in data:
        if article["title"] not in articles:
            continue
        sentences = [
            (p, start, end, paragraph["context"][start:end])
            for p, paragraph in enumerate(article["paragraphs"])
            for start, end in split(paragraph["context"])
        ]
        questions = [
            (p, qa)
            for p, paragraph in enumerate(article["paragraphs"])
            for qa in paragraph["qas"]
            if qa.get("answers") and not qa.get("is_impossible")
        ]
        if count is not None and count < len(questions):
            questions = random.Random(seed).sample(questions, count)
        for p, qa in questions:
            spans = [(a["answer_start"], a["answer_start"] + len(a["text"])) for a in qa["answers"]]
            for q, start, end, text in sentences:
                label = q == p and any(start <= a and b <= end for a, b in spans)
                out.append(Pair(qa["id"], qa["question"], text, label))
    return out


def popqa_pairs(path: Path, chunk: Callable[[Sequence[tuple[str, str]]], Sequence[Sequence[str]]]) -> list[Pair]:
    """PopQA: every question with each chunk of its pool; ``chunk`` turns
    (doc id, text) documents into each one's chunk texts. Positive: a gold
    answer as whole words."""
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.measures import answer_in_words

    _, items, _ = read_items(path)
    chunks = chunk([(f"popqa-{item.item_id}", item.pool) for item in items])
    return [
        Pair(item.item_id, item.question, text, answer_in_words(text, item.answers))
        for item, texts in zip(items, chunks)
        for text in texts
    ]


def sample_pairs(
    corpus: Path, questions: Path, chunk: Callable[[Sequence[Any]], Sequence[Sequence[str]]]
) -> tuple[list[Pair], list[str]]:
    """The sample corpus: every question of ``questions`` with every chunk
    of the corpus (``chunk`` turns ingest's documents into their chunk
    texts); positive: the chunk holds the answering phrase (case and spacing
    aside). Also the questions no chunk holds the phrase of (cut by a chunk
    boundary)."""
    from ingest_pipeline.sources import Document, read_sources

    documents = [d for d in read_sources([corpus]) if isinstance(d, Document)]
    texts = [t for per in chunk(documents) for t in per]
    flat = [_flat(t) for t in texts]
    out, unheld = [], []
    for n, q in enumerate(json.loads(questions.read_text(encoding="utf-8"))):
        phrase = _flat(q["expect_phrase"])
        labels = [phrase in f for f in flat]
        if not any(labels):
            unheld.append(q["question"])
        out.extend(Pair(str(n), q["question"], t, label) for t, label in zip(texts, labels))
    return out, unheld


def squad_own_paragraph(pairs: Sequence[Pair], path: Path) -> list[Pair]:
    """The SQuAD pairs whose sentence is of the question's own paragraph."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    context = {qa["id"]: p["context"] for a in data for p in a["paragraphs"] for qa in p["qas"]}
    return [p for p in pairs if p.text in context[p.group]]


def samples_own_file(pairs: Sequence[Pair], corpus: Path, questions: Path) -> list[Pair]:
    """The sample pairs whose chunk is of the file the question's answer is
    in (the ten president records are one file)."""
    from ingest_pipeline.sources import Document, read_sources

    files: dict[str, str] = {}
    file_of: dict[str, str] = {}
    for d in read_sources([corpus]):
        if isinstance(d, Document):
            file_of[d.doc_id] = d.origin.split(":")[0]
            files[file_of[d.doc_id]] = files.get(file_of[d.doc_id], "") + "\n" + d.text
    expected = [file_of[q["expect_doc"]] for q in json.loads(questions.read_text(encoding="utf-8"))]
    return [p for p in pairs if p.text in files[expected[int(p.group)]]]


def _flat(text: str) -> str:
    return " ".join(text.split()).lower()


def ingest_chunker(embedder: Any, settings: Any) -> Callable[[Sequence[Any]], list[list[str]]]:
    """Documents (ingest's, or (doc id, text) pairs) to their base chunks'
    texts, as ``chunkrag ingest`` chunks them with ``settings``."""
    from chunkrag_core.chunk import BASE_SCALE
    from ingest_pipeline.chunker import chunk_documents
    from ingest_pipeline.sources import Document, plain_document

    def chunk(documents: Sequence[Any]) -> list[list[str]]:
        docs = [d if isinstance(d, Document) else plain_document(d[0], d[1], d[0]) for d in documents]
        chunked = chunk_documents(docs, embedder, settings.chunking)
        return [[c.text for c in item.chunks if c.scale == BASE_SCALE] for item in chunked]

    return chunk


# ---------------------------------------------------------------- scoring


def pair_key(query: str, text: str) -> str:
    return hashlib.sha256(f"{query}\x00{text}".encode()).hexdigest()[:20]


def cached_values(
    path: Path, pairs: Sequence[Pair], compute: Callable[[str, list[str]], Sequence[float]]
) -> list[float]:
    """One value per pair from the JSON-lines cache at ``path`` ({key:
    value} lines), computing the missing ones a question at a time and
    appending them."""
    done: dict[str, float] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                done.update(json.loads(line))
    todo: dict[str, list[str]] = {}
    for p in pairs:
        if pair_key(p.query, p.text) not in done:
            todo.setdefault(p.query, [])
            if p.text not in todo[p.query]:
                todo[p.query].append(p.text)
    if todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            for query, texts in todo.items():
                values = {pair_key(query, t): round(float(v), 6) for t, v in zip(texts, compute(query, texts))}
                done.update(values)
                out.write(json.dumps(values) + "\n")
    return [done[pair_key(p.query, p.text)] for p in pairs]


def embedder_cosines(embedder: Any) -> Callable[[str, list[str]], list[float]]:
    """Query-text cosine of the project's embedder (its vectors are unit
    length); each distinct text is embedded once a run (a SQuAD sentence
    meets 40 questions)."""
    seen: dict[str, np.ndarray] = {}

    def compute(query: str, texts: list[str]) -> list[float]:
        new = [t for t in dict.fromkeys([query, *texts]) if t not in seen]
        if new:
            seen.update(zip(new, np.asarray(embedder.embed(new), dtype=np.float64)))
        return [float(seen[t] @ seen[query]) for t in texts]

    return compute


def bm25_scores(pairs: Sequence[Pair]) -> list[float]:
    """BM25 of each pair's text for its query, over the set's distinct texts."""
    texts = list(dict.fromkeys(p.text for p in pairs))
    at = {t: i for i, t in enumerate(texts)}
    index = Bm25([bm25_terms(t) for t in texts])
    queries = {q: bm25_terms(q) for q in dict.fromkeys(p.query for p in pairs)}
    return [index.score(queries[p.query], at[p.text]) for p in pairs]


def minmax(values: Sequence[float]) -> list[float]:
    """As the retriever normalises a side (search_extension/fusion.py): all equal is all 1."""
    low, high = min(values), max(values)
    return [1.0] * len(values) if high == low else [(v - low) / (high - low) for v in values]


def question_features(
    pairs: Sequence[Pair],
    logits: Sequence[float],
    cosines: Sequence[float],
    bm25: Sequence[float],
    weights: tuple[float, float] = (0.5, 0.5),
) -> list[dict[str, float]]:
    """Per pair, what the filter computes over a question's candidates,
    the question's pairs standing for its candidates: the hybrid score (BM25
    and cosine min-max normalised over them, weighted as the retriever
    weighs them; its order is the candidates' rank), and the ``relevance``
    calibration's features."""
    from chunkrag_filter.processors.calibration import RELEVANCE_LOGIT_CLIP

    by_group: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_group.setdefault(p.group, []).append(i)
    out: list[dict[str, float]] = [{} for _ in pairs]
    for members in by_group.values():
        b = minmax([bm25[i] for i in members])
        c = minmax([cosines[i] for i in members])
        hybrid = [weights[0] * x + weights[1] * y for x, y in zip(b, c)]
        order = sorted(range(len(members)), key=lambda k: -hybrid[k])  # stable: ties keep the pairs' order
        rank = {k: r for r, k in enumerate(order)}
        z = [max(-RELEVANCE_LOGIT_CLIP, min(RELEVANCE_LOGIT_CLIP, logits[i])) for i in members]
        best_z, best_c = max(z), max(cosines[i] for i in members)
        for k, i in enumerate(members):
            out[i] = {
                "hybrid": hybrid[k],
                "relevance_logit": z[k],
                "relevance_gap": z[k] - best_z,
                "cosine": cosines[i],
                "cosine_gap": cosines[i] - best_c,
                "bm25": b[k],
                "inv_rank": 1.0 / (1.0 + rank[k]),
                "log_chars": math.log(max(len(pairs[i].text), 1) / 100.0),
            }
    return out


def gate_view(pair: Pair, logit: float, cosine: float, gate: Any) -> float:
    """The cross-encoder gate's P(some candidate answers) were this pair's
    text the question's only candidate (the best of the three it reads)."""
    from chunkrag_filter.processors.gate import gate_features

    return float(gate.probability(gate_features(pair.query, [pair.text], [{"cosine": cosine}], [logit])))


def logit_threshold(pair: Pair, cosine: float, gate: Any, cut: float) -> float:
    """The log-odds this pair needs for the gate to pass it, its other
    features as they are (the gate is logistic: solve for the logit)."""
    from chunkrag_filter.processors.gate import gate_features

    features = gate_features(pair.query, [pair.text], [{"cosine": cosine}], [0.0])
    rest = gate.bias + sum(w * features[n] for n, w in zip(gate.names, gate.weights) if n != "best_relevance_logit")
    w = dict(zip(gate.names, gate.weights))["best_relevance_logit"]
    return (math.log(cut / (1 - cut)) - rest) / w


# --------------------------------------------------------------- the table


def measure(
    pairs: Sequence[Pair],
    scores: Mapping[str, Sequence[float]],
    passes: Mapping[str, Sequence[bool]],
    resamples: int = BOOTSTRAP,
    seed: int = SEED,
) -> dict[str, Any]:
    """One set's figures: per scorer the AUC and its interval, model −
    cosine with its interval (the same resamples), and per pass rule the
    share of positive pairs passed."""
    labels = [p.label for p in pairs]
    groups = [p.group for p in pairs]
    weights = question_resamples(groups, resamples, seed)
    boot = {name: np.array([weighted_auc(s, labels, w) for w in weights]) for name, s in scores.items()}
    block: dict[str, Any] = {
        "pairs": len(pairs),
        "positives": sum(labels),
        "questions": len(set(groups)),
        "questions_with_positive": len({p.group for p in pairs if p.label}),
        "auc": {
            name: {"auc": round(weighted_auc(s, labels), 4), "ci95": interval(boot[name])} for name, s in scores.items()
        },
    }
    for name in JUDGED:
        if name in scores and "cosine" in scores:
            diff = weighted_auc(scores[name], labels) - weighted_auc(scores["cosine"], labels)
            block[f"{name}_minus_cosine"] = {"auc": round(diff, 4), "ci95": interval(boot[name] - boot["cosine"])}
    positives = sum(labels)
    block["share_positives_passed"] = {
        name: round(sum(f for f, label in zip(flags, labels) if label) / positives, 4) if positives else None
        for name, flags in passes.items()
    }
    return block


def goal(block: Mapping[str, Any], rule: str) -> dict[str, Any]:
    """The set's figures against the goal: AUC at least cosine +
    :data:`GOAL_AUC_MARGIN`, at least :data:`GOAL_SHARE` of the answering
    pairs passed by ``rule``."""
    margin = block["model_minus_cosine"]["auc"]
    share = block["share_positives_passed"][rule]
    return {
        "auc_margin": margin,
        "auc_met": margin >= GOAL_AUC_MARGIN,
        "share_rule": rule,
        "share": share,
        "share_met": share is not None and share >= GOAL_SHARE,
    }


# ------------------------------------------------------------------ a run


def built(cache: Path, name: str, inputs: Sequence[Path], extra: str, build: Callable[[], list[Pair]]) -> list[Pair]:
    """A pair set from its cache (keyed by its input files' bytes, ``extra``
    and :data:`STUDY_VERSION`), else built and cached."""
    digest = hashlib.sha256(f"{STUDY_VERSION}\x00{name}\x00{extra}".encode())
    for path in inputs:
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(file.read_bytes())
    path = cache / f"pairs-{name}-{digest.hexdigest()[:12]}.jsonl"
    if path.exists():
        return [Pair(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    pairs = build()
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(_as_dict(p)) + "\n" for p in pairs), encoding="utf-8")
    return pairs


def _as_dict(p: Pair) -> dict[str, Any]:
    return {"group": p.group, "query": p.query, "text": p.text, "label": p.label}


def pair_sets(eval_dir: Path, samples: Path, questions: Path, cache: Path, settings: Any, embedder: Any) -> dict:
    """Every pair set of :data:`SETS` (from the cache where built before)."""
    from chunkrag_eval.unanswerable import SQUAD_ARTICLES
    from ingest_pipeline.pipeline import shaping_of
    from ingest_pipeline.sentences import sentence_spans

    chunk = ingest_chunker(embedder, settings)
    shaping = shaping_of(settings)
    squad = eval_dir / "squad/squad2_cs224n_dev-v2.0.json"
    sets = {
        "wikiqa": built(
            cache,
            "wikiqa",
            [eval_dir / "wikiqa/WikiQA-dev.tsv"],
            "",
            lambda: wikiqa_pairs(eval_dir / "wikiqa/WikiQA-dev.tsv"),
        ),
        "scifact": built(
            cache,
            "scifact",
            [eval_dir / "scifact/beir_derived"],
            "",
            lambda: scifact_pairs(eval_dir / "scifact/beir_derived"),
        ),
        "squad": built(
            cache,
            "squad",
            [squad],
            f"{SQUAD_ARTICLES}{SQUAD_QUESTIONS}{SEED}",
            lambda: squad_pairs(squad, SQUAD_ARTICLES, lambda text: sentence_spans(text, 0, len(text))),
        ),
        "popqa": built(
            cache,
            "popqa",
            [eval_dir / "popqa/dev.jsonl"],
            shaping,
            lambda: popqa_pairs(eval_dir / "popqa/dev.jsonl", chunk),
        ),
        "samples": built(
            cache,
            "samples",
            [samples / "corpus", questions],
            shaping,
            lambda: sample_pairs(samples / "corpus", questions, chunk)[0],
        ),
    }
    sets["squad_own_paragraph"] = squad_own_paragraph(sets["squad"], squad)
    sets["samples_own_file"] = samples_own_file(sets["samples"], samples / "corpus", questions)
    return sets


def gate_choice_figures(path: Path) -> dict[str, Any]:
    """The question-level measure, not repeated here: the default gate's
    figures as chunkrag_eval/gate_choice.py's rule measured them
    (``python -m bench.gate_fit choose``, results/gate_choice.json)."""
    from chunkrag_eval import gate_choice

    if not path.exists():
        return {"missing": str(path)}
    result = json.loads(path.read_text(encoding="utf-8"))
    chosen = result["candidates"][result["chosen"]]
    held = result.get("held_out") or {}
    return {
        "source": f"{path.name} ({result.get('date')}, {result.get('machine')}): chunkrag_eval/gate_choice.py",
        "chosen": result["chosen"],
        "at": gate_choice.CHOSEN_AT,
        "turned_away": {
            name: f"{entry['turned_away']} of {entry['questions']}" for name, entry in chosen["answerable"].items()
        },
        "nothing_relevant_share": {k: e["share"] for k, e in chosen["unanswerable"].items()},
        "caught": gate_choice.caught(chosen),
        "held_out_turned_away": {
            k: f"{e['turned_away']} of {e['questions']}" for k, e in held.get("answerable", {}).items()
        },
    }


def run_pairs(
    eval_dir: Path,
    cache: Path,
    model_path: Path | None = None,
    judge_path: Path | None = None,
    samples: Path = SAMPLES,
    questions: Path = QUESTIONS,
    gate_choice_path: Path = GATE_CHOICE,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Every pair set scored by every scorer and measured; the goal per set;
    the gate_choice figures of the default gate beside. ``judge_path``: a
    judge embedder's graph (chunkrag_train/judge_embedder.py), scored by its
    cosine as "judge" beside the rest."""
    import time

    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.relevance_study import study_model
    from chunkrag_filter.processors.calibration import load_calibration

    started, cpu = time.perf_counter(), time.process_time()
    settings = Settings.from_env()
    embedder = make_embedder(settings.embedder)
    model, described, key = study_model(model_path)
    calibration = load_calibration(None)
    relevance, gate = calibration.relevance, calibration.gate_relevance
    weights = (settings.retrieval.bm25_weight, settings.retrieval.knn_weight)
    judge = None
    if judge_path is not None:
        from chunkrag_core.artifacts import file_sha256
        from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder

        judge_sha = file_sha256(judge_path)
        judge = LocalMiniLMEmbedder(graph=judge_path)
    sets = pair_sets(eval_dir, samples, questions, cache, settings, embedder)
    out: dict[str, Any] = {}
    for name, pairs in sets.items():
        say(f"{name}: {len(pairs)} pairs")
        logits = cached_values(cache / f"logits-{key}.jsonl", pairs, lambda q, t: model.logits(q, t))
        cosines = cached_values(cache / f"cosine-{settings.embedder.model}.jsonl", pairs, embedder_cosines(embedder))
        bm25 = bm25_scores(pairs)
        features = question_features(pairs, logits, cosines, bm25, weights)
        calibrated = [relevance.model.probability(f) for f in features]
        gated = [gate_view(p, z, c, gate.model) for p, z, c in zip(pairs, logits, cosines)]
        scores = {
            "model": logits,
            "calibrated": calibrated,
            "cosine": cosines,
            "bm25": bm25,
            "hybrid": [f["hybrid"] for f in features],
        }
        if judge is not None:
            scores["judge"] = cached_values(cache / f"judge-{judge_sha[:12]}.jsonl", pairs, embedder_cosines(judge))
        passes = {
            f"calibrated_at_{relevance.cut:g}": [p >= relevance.cut for p in calibrated],
            f"gate_at_{gate.cut:g}": [p >= gate.cut for p in gated],
        }
        block = measure(pairs, scores, passes)
        needed = [logit_threshold(p, c, gate.model, gate.cut) for p, c in zip(pairs, cosines) if p.label]
        block["gate_logit_needed_median"] = round(float(np.median(needed)), 3) if needed else None
        block["goal"] = goal(block, f"calibrated_at_{relevance.cut:g}")
        if judge is not None:  # no cut of its own yet: the AUC half of the goal
            margin = block["judge_minus_cosine"]["auc"]
            block["judge_goal"] = {"auc_margin": margin, "auc_met": margin >= GOAL_AUC_MARGIN}
        out[name] = block
        say(
            f"{name}: AUC model {block['auc']['model']['auc']:.3f} cosine {block['auc']['cosine']['auc']:.3f} "
            f"bm25 {block['auc']['bm25']['auc']:.3f}; passed {block['share_positives_passed']}"
        )
    return {
        "model": described,
        "judge": {"file": judge_path.name, "sha256": judge_sha} if judge is not None else None,
        "calibration": {"relevance_cut": relevance.cut, "gate_relevance_cut": gate.cut},
        "goal": {
            "auc": f"the model's ROC AUC at least the embedder's cosine + {GOAL_AUC_MARGIN} on every pair set",
            "share": f"at least {GOAL_SHARE:.0%} of the answering pairs at or above the calibration's cut",
            "met_on_every_set": all(
                b["goal"]["auc_met"] and b["goal"]["share_met"] for name, b in out.items() if name in SETS
            ),
            "reachable": {
                name: b["auc"]["cosine"]["auc"] + GOAL_AUC_MARGIN <= 1.0 for name, b in out.items() if name in SETS
            },
        },
        "views": "squad_own_paragraph: the SQuAD pairs of the question's own paragraph; samples_own_file: the "
        "sample pairs of the file holding the answer (subsets, the same scores; not among the goal's sets)",
        "bootstrap": {"resamples": BOOTSTRAP, "seed": SEED, "over": "questions"},
        "samples_questions": str(questions.name),
        "sets": out,
        "question_level": gate_choice_figures(gate_choice_path),
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }
