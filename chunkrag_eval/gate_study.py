"""The gate's training questions, their candidates, and the gate's fit.

The gate (chunkrag_filter/processors/gate.py) decides per query whether any
candidate is relevant. Its models are fitted here on questions the index can
and cannot answer, from sets whose licence allows training (MANIFEST.md) and
never from the sets the filter's default is chosen or measured on (PopQA,
PubHealth, and the SQuAD article the relevance model held out):

- the training index holds NQ-open's gold passages and the paragraphs of the
  SQuAD 2.0 dev articles the relevance model trained on (its "train" split);
- NQ questions are asked twice: of the whole index ("whole": answerable when a
  candidate from the gold passage holds an answer; a question whose gold
  passage was not retrieved is left out, its label unknown) and with their
  gold passage filtered out ("absent": unanswerable; left out when a
  candidate still holds an answer, since another passage may answer it);
- SQuAD questions of those articles are asked of the whole index: answerable
  ones as NQ's "whole", unanswerable ones (SQuAD's own label: their paragraph
  does not answer them, though it is about their subject) as unanswerable.

Answers match as whole words (measures.answer_in_words). The retrieval gate
(``gate``) is fitted on all of these; the gate with the relevance model
(``gate_relevance``) only on NQ questions the relevance model held out of its
own training (its "validation" split), since on the questions it trained on
its log-odds are surer than anywhere else. The cut of each: the highest at
which :data:`KEEP_ANSWERABLE` of the answerable training questions pass.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from chunkrag_eval.datasets import nq_gold
from chunkrag_eval.measures import cut_keeping
from chunkrag_filter.processors.gate import GATE_JUDGE_FEATURES, GATE_RETRIEVAL_FEATURES, GATE_TOP, gate_features

NQ_FILE = "nq/nq-open-oracle.jsonl.gz"
SQUAD_FILE = "squad/squad2_cs224n_dev-v2.0.json"
# Candidates per question: the N the filter's default is chosen at.
CANDIDATES = 20
# Questions drawn (seed below) for the retrieval gate; the relevance model's
# held-out NQ questions are all taken besides.
NQ_QUESTIONS = 600
SQUAD_ANSWERABLE = 300
SQUAD_UNANSWERABLE = 300
SEED = 29
# The cut keeps this share of the answerable training questions: a question
# the gate turns away is answered "not found" even when the index holds its
# answer, so the gate must pass nearly every answerable one.
KEEP_ANSWERABLE = 0.98
# A cut chosen after the fit, on the filter's own measure, replaces the
# fit's: the open-corpus default rule (docs/evaluation.md, "How the
# filter's default is chosen"; bench/results/open_corpus_nothing_relevant.json)
# chose the cross-encoder gate at 0.2 among 0.05-0.5 and the fit's own; the
# rule that loses no answers (chunkrag_eval/gate_choice.py,
# bench/results/gate_choice.json) then chose it at 0.02, and the retrieval
# gate (a caller's `gate: retrieval`) at 0.05, its fit's 0.1908 turning away
# 11 of 500 NQ questions.
CHOSEN_CUTS = {"gate": 0.05, "gate_relevance": 0.02}
# Folds of the cross-validated ROC AUC reported beside each fit.
FOLDS = 5
INDEX_PREFIX = "chunkrag-gate-train"
GATE_RELEVANCE_FEATURES = GATE_RETRIEVAL_FEATURES + ("best_relevance_logit",)
# A judge embedder's gate (chunkrag_train/judge_embedder.py): its best cosine
# over the best few candidates in place of the relevance model's log-odds.
GATE_JUDGE_FIT_FEATURES = GATE_RETRIEVAL_FEATURES + GATE_JUDGE_FEATURES


@dataclass(frozen=True, slots=True)
class GateQuestion:
    source: str  # "nq" or "squad"
    qid: str
    question: str
    answers: tuple[str, ...]
    own: tuple[str, ...]  # the doc ids of the passage that answers it (its own paragraph)
    view: str  # "whole" or "absent" (own filtered out)
    answerable: bool  # SQuAD's label; True for NQ
    relevance_held_out: bool  # outside the relevance model's training questions


def training_set(eval_dir: Path, relevance_split: Callable[[str], str]) -> tuple[list, list[GateQuestion]]:
    """The training index's documents and the questions asked of it.
    ``relevance_split`` names the relevance model's split of a question or
    article key ("train" or "validation"; chunkrag_train.pairs)."""
    from ingest_pipeline.sources import plain_document

    documents, questions = [], []
    rng = random.Random(SEED)
    nq = []
    for r in nq_gold(eval_dir / NQ_FILE):
        if r.doc_id == f"nq-{r.number}":  # the text's first record
            documents.append(plain_document(r.doc_id, r.gold_text, f"nq:{r.number}"))
        nq.append((r.number, r.question, r.answers, r.doc_id))
    held_out = [q for q in nq if relevance_split(f"nq:{q[0]}") == "validation"]
    rest = [q for q in nq if relevance_split(f"nq:{q[0]}") != "validation"]
    for number, question, answers, doc in held_out + rng.sample(rest, min(NQ_QUESTIONS, len(rest))):
        for view in ("whole", "absent"):
            questions.append(
                GateQuestion(
                    "nq",
                    str(number),
                    question,
                    answers,
                    (doc,),
                    view,
                    True,
                    relevance_split(f"nq:{number}") == "validation",
                )
            )
    squad = json.loads((eval_dir / SQUAD_FILE).read_text(encoding="utf-8"))["data"]
    answerable, unanswerable = [], []
    for a, article in enumerate(squad):
        if relevance_split("squad:" + article["title"]) == "validation":
            continue  # held out for the open corpus's unanswerable questions
        for p, paragraph in enumerate(article["paragraphs"]):
            doc = f"squad-{a}-{p}"
            documents.append(plain_document(doc, paragraph["context"], f"squad:{a}:{p}"))
            for qa in paragraph["qas"]:
                answers = tuple(x["text"] for x in qa.get("answers", ()))
                entry = GateQuestion("squad", qa["id"], qa["question"], answers, (doc,), "whole", bool(answers), False)
                (answerable if answers and not qa.get("is_impossible") else unanswerable).append(entry)
    questions += rng.sample(answerable, min(SQUAD_ANSWERABLE, len(answerable)))
    questions += rng.sample(unanswerable, min(SQUAD_UNANSWERABLE, len(unanswerable)))
    return documents, questions


def judge_cosines(judge: Any, question: str, texts: Sequence[str]) -> list[float]:
    """A judge embedder's cosine of the question to each text (none without a judge)."""
    import numpy as np

    if judge is None or not texts:
        return []
    vectors = np.asarray(judge.embed([question, *texts]), dtype=np.float64)
    return [round(float(vectors[0] @ v), 6) for v in vectors[1:]]


def label_of(question: GateQuestion, candidates: Sequence[Any]) -> bool | None:
    """True: a candidate answers it; False: none does; None: unknown (left out)."""
    from chunkrag_eval.measures import answer_in_words

    if not question.answerable:
        return False
    holding = [c for c in candidates if answer_in_words(c.text, question.answers)]
    if question.view == "absent":
        return None if holding else False
    return True if any(c.doc_id in question.own for c in holding) else None


def build(
    eval_dir: Path,
    cache: Path,
    *,
    client,
    embedder,
    settings,
    relevance,
    relevance_split: Callable[[str], str],
    say: Callable[[str], None],
    judge: Any = None,
) -> Path:
    """Index the training documents, retrieve every question's candidates,
    and cache per question its label, gate features and the relevance
    model's log-odds on the best few: one JSON line each."""
    from chunkrag_core.engines.schema import DOC_ID
    from chunkrag_eval.open_corpus import index_name
    from chunkrag_filter.processors.calibration import relevance_logit
    from ingest_pipeline.pipeline import ingest_documents
    from search_extension.retriever import HybridRetriever

    documents, questions = training_set(eval_dir, relevance_split)
    index = index_name(documents, settings, INDEX_PREFIX)
    started = time.perf_counter()
    report = ingest_documents(documents, client=client, embedder=embedder, settings=settings, index=index)
    if not report.ok:
        raise RuntimeError(f"indexing the gate's training documents failed: {report.errors[:3]}")
    say(f"{index}: {len(documents)} documents, {time.perf_counter() - started:.0f} s")
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("w", encoding="utf-8") as out:
        for n, q in enumerate(questions):
            filters = [{"bool": {"must_not": [{"terms": {DOC_ID: list(q.own)}}]}}] if q.view == "absent" else []
            candidates = retriever.search(q.question, size=CANDIDATES, filters=filters).chunks
            top = [c.text for c in candidates[:GATE_TOP]]
            logits = [relevance_logit(p) for p in relevance.score(q.question, top)] if top else []
            features = gate_features(
                q.question,
                [c.text for c in candidates],
                [c.stage_scores for c in candidates],
                judge_cosines=judge_cosines(judge, q.question, top),
            )
            features["best_relevance_logit"] = max(logits, default=0.0)
            row = {
                "source": q.source,
                "id": q.qid,
                "view": q.view,
                "label": label_of(q, candidates),
                "relevance_held_out": q.relevance_held_out,
                "features": {k: round(v, 6) for k, v in features.items()},
            }
            out.write(json.dumps(row) + "\n")
            if n % 200 == 0:
                say(f"{n} / {len(questions)} questions")
    return cache


def read_rows(cache: Path) -> list[dict]:
    return [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines() if line.strip()]


def cross_validated_auc(rows: Sequence[Mapping[str, float]], labels: Sequence[bool], names: Sequence[str]) -> float:
    """ROC AUC of out-of-fold probabilities (folds by position, seeded shuffle)."""
    from chunkrag_filter.processors.calibration import fit_logistic, roc_auc

    order = list(range(len(rows)))
    random.Random(SEED).shuffle(order)
    out = [0.0] * len(rows)
    for fold in range(FOLDS):
        test = set(order[fold::FOLDS])
        train = [i for i in order if i not in test]
        model = fit_logistic([rows[i] for i in train], [labels[i] for i in train], names)
        for i in test:
            out[i] = model.probability(rows[i])
    return round(float(roc_auc(out, labels)), 4)


def fit(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Both gates' models and cuts, and what they do on their training questions."""
    from chunkrag_filter.processors.calibration import Calibrated, fit_logistic

    rows = list(rows)
    usable = [r for r in rows if r["label"] is not None]
    out: dict[str, Any] = {
        "questions": len(rows),
        "left_out_unknown_label": len(rows) - len(usable),
        "keep_answerable": KEEP_ANSWERABLE,
    }
    held_out = [r for r in usable if r["relevance_held_out"]]
    fits = [("gate", GATE_RETRIEVAL_FEATURES, usable), ("gate_relevance", GATE_RELEVANCE_FEATURES, held_out)]
    if usable and all("best_judge_cosine" in r["features"] for r in usable):
        # the judge trained on the relevance model's training questions too: fitted where both held out
        fits.append(("gate_judge", GATE_JUDGE_FIT_FEATURES, held_out))
    for name, names, chosen in fits:
        features = [r["features"] for r in chosen]
        labels = [bool(r["label"]) for r in chosen]
        model = fit_logistic(features, labels, names)
        probabilities = [model.probability(f) for f in features]
        cut = round(cut_keeping(probabilities, labels, KEEP_ANSWERABLE), 4)
        by_kind: dict[str, dict[str, float]] = {}
        for r, p, label in zip(chosen, probabilities, labels):
            kind = f"{r['source']} {r['view']} {'answerable' if label else 'unanswerable'}"
            entry = by_kind.setdefault(kind, {"n": 0, "passed": 0})
            entry["n"] += 1
            entry["passed"] += p >= cut
        out[name] = {
            "calibrated": Calibrated(model, CHOSEN_CUTS.get(name, cut)),
            "fitted_cut": cut,
            "questions": len(chosen),
            "answerable": sum(labels),
            "cross_validated_auc": cross_validated_auc(features, labels, names),
            "passed_at_cut": {k: {"n": v["n"], "share": round(v["passed"] / v["n"], 4)} for k, v in by_kind.items()},
        }
    return out


def fit_report(fitted: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`fit` found, as JSON: each model's weights by feature (and
    its bias) and its cut, beside the figures."""
    report = {
        name: {k: v for k, v in entry.items() if k != "calibrated"} if isinstance(entry, dict) else entry
        for name, entry in fitted.items()
    }
    for name in (n for n in ("gate", "gate_relevance", "gate_judge") if n in fitted):
        chosen = fitted[name]["calibrated"]
        report[name]["model"] = dict(zip(chosen.model.names, chosen.model.weights)) | {"bias": chosen.model.bias}
        report[name]["cut"] = chosen.cut
    return report
