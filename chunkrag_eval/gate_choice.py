"""The default gate, chosen so that it loses no answers.

A gate that says "nothing relevant" for a question the index can answer
loses that answer: the worst outcome a filter has. So the default gate and
its cut are chosen here on hundreds of answerable questions per set, counted
without any model call, before the unanswerable half is looked at:

1. every answerable choice set (PopQA dev, PubHealth dev, NQ-open, SQuAD 2.0
   answerable questions, WikiQA dev) and the README's sample questions are
   asked of an index that holds their answer;
2. each candidate (a gate and a cut, :data:`CANDIDATES`) is *eligible* when,
   on every answerable choice set, it turns away at most
   :data:`MAX_TURNED_AWAY` of the questions and not significantly more than
   the gate off (which turns none away: an exact one-sided sign test over
   the questions turned away, p < :data:`SIGNIFICANCE`, i.e. five or more),
   and passes every sample question;
3. among the eligible, the one saying "nothing relevant" for the largest
   mean share of the unanswerable kinds (:data:`UNANSWERABLE_KINDS`, each
   kind weighing the same); ties to the cheaper gate (:data:`GATE_COST`),
   then to the lower cut. With none eligible the gate is off;
4. then, on whole datasets no choice read (SciFact claims, Climate-FEVER
   claims), the chosen gate's share turned away, reported against the goal.

The rule is written before its run (docs/evaluation.md, "How the default
gate is chosen"). A question is *answerable* when the index holds its
answer: PopQA, its pool holds a gold answer as whole words; NQ, its gold
passage (by construction); SQuAD, its paragraph (SQuAD's label); WikiQA, a
sentence labelled correct; PubHealth, its pool; a sample question, the
phrase that answers it; SciFact and Climate-FEVER, an evidence document.
Turned away counts every answerable question the gate refuses; *lost*
counts those among them whose candidates held the answer, reported beside.

Everything a decision needs is read once per question and cached (one JSON
line each: the gate's features over the first N candidates for each N of
:data:`SIZES`, the relevance model's log-odds on the best
:data:`~chunkrag_filter.processors.gate.GATE_TOP`), so every candidate is
decided from the cache with the shipped gate models, without re-retrieving.
"""

from __future__ import annotations

import csv
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from chunkrag_eval.datasets import nq_gold
from chunkrag_eval.measures import answer_in_words

# The candidates each question's gate reads: the default of `ask`, the
# gateway and the playground (search_extension/ask.py), and the open corpus's.
SIZES = (8, 20)
CHOSEN_AT = 8
# The candidates, fixed before the run: the gate off; the retrieval gate,
# the cross-encoder gate (each at its fit's cut and around it) and a plain
# cut on the best candidate's raw cosine to the query.
CANDIDATES: tuple[tuple[str, float | None], ...] = (
    ("off", None),
    ("cosine", 0.10),
    ("cosine", 0.15),
    ("cosine", 0.20),
    ("cosine", 0.25),
    ("cosine", 0.30),
    ("retrieval", 0.02),
    ("retrieval", 0.05),
    ("retrieval", 0.10),
    ("retrieval", 0.15),
    ("retrieval", 0.1908),
    ("crossencoder", 0.02),
    ("crossencoder", 0.05),
    ("crossencoder", 0.0986),
    ("crossencoder", 0.15),
    ("crossencoder", 0.2),
    # A judge embedder's gate (added 2026-12-08, before its run; read only
    # when a judge is given: docs/evaluation.md, "A judge embedder").
    ("judge", 0.02),
    ("judge", 0.05),
    ("judge", 0.10),
    ("judge", 0.15),
    ("judge", 0.20),
    ("judge", 0.30),
)
# A gate may turn away at most this share of any answerable choice set.
MAX_TURNED_AWAY = 0.01
# ... and not significantly more than the gate off (one-sided exact sign test).
SIGNIFICANCE = 0.05
# Cheaper first: the tie-break between candidates catching as many.
GATE_COST = {"off": 0, "cosine": 1, "retrieval": 2, "crossencoder": 3, "judge": 3}

ANSWERABLE_SETS = ("popqa", "pubhealth", "nq", "squad", "wikiqa")
SAMPLE_SET = "samples"
UNANSWERABLE_KINDS = ("absent", "off_topic", "in_article", "answer_removed")
HELD_OUT_SETS = ("scifact", "climate_fever")
HELD_OUT_UNANSWERABLE = ("scifact_absent", "climate_fever_absent")
# Questions drawn (seeded) from the sets larger than that.
SAMPLE_SIZE = 500
SEED = 48


@dataclass(frozen=True, slots=True)
class GateAsked:
    """One question, the index it is asked of and what answers it there."""

    set: str  # "popqa", "nq", ..., "samples", "scifact"
    kind: str  # "answerable" or an unanswerable kind
    qid: str
    question: str
    index: str  # which index of the run (a key of the run's indices)
    filters: tuple[Mapping[str, Any], ...] = ()
    own: tuple[str, ...] = ()  # doc ids that answer it
    answers: tuple[str, ...] = ()  # whole-word answers a holding candidate names
    phrases: tuple[str, ...] = ()  # verbatim text a holding candidate contains

    @property
    def key(self) -> str:
        return f"{self.set}:{self.kind}:{self.qid}"

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


def holds_answer(asked: GateAsked, doc_id: str, text: str) -> bool:
    """Does one candidate hold the question's answer?"""
    if asked.own and doc_id not in asked.own:
        return False
    if asked.phrases:
        flat = " ".join(text.split()).lower()
        return any(" ".join(p.split()).lower() in flat for p in asked.phrases)
    if asked.answers:
        return answer_in_words(text, asked.answers)
    return bool(asked.own)


# ---------------------------------------------------------------- the sets


def _not_doc(doc_ids: Sequence[str]) -> tuple[Mapping[str, Any], ...]:
    from chunkrag_core.engines.schema import DOC_ID

    return ({"bool": {"must_not": [{"terms": {DOC_ID: list(doc_ids)}}]}},)


def open_corpus_questions(root: Path, corpus_documents: Sequence[Any]) -> list[GateAsked]:
    """PopQA, PubHealth, NQ and SQuAD questions of the open corpus (every
    PopQA and PubHealth dev pool, NQ-open's gold passages, SQuAD 2.0 dev's
    paragraphs in one index), answerable and unanswerable."""
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.unanswerable import NameIndex, absent, pool_doc_id

    out: list[GateAsked] = []
    rng = random.Random(SEED)
    _, popqa, _ = read_items(root / "popqa/dev.jsonl")
    _, pubhealth, _ = read_items(root / "pubhealth/dev.jsonl")
    for item in popqa:
        if answer_in_words(item.pool, item.answers):
            own = (pool_doc_id("popqa", item),)
            out.append(GateAsked("popqa", "answerable", item.item_id, item.question, "open", (), own, item.answers))
    for item in pubhealth:
        out.append(
            GateAsked(
                "pubhealth", "answerable", item.item_id, item.question, "open", (), (pool_doc_id("pubhealth", item),)
            )
        )
    absent_asked, _ = absent("popqa", popqa, NameIndex(corpus_documents))
    for a in absent_asked:
        out.append(GateAsked("popqa", "absent", a.item.item_id, a.item.question, "open", a.filters))
    from chunkrag_core.engines.schema import DOC_ID

    for dataset, items, other in (("popqa", popqa, "pubhealth"), ("pubhealth", pubhealth, "popqa")):
        view = ({"prefix": {DOC_ID: f"{other}-"}},)
        for item in items:
            out.append(GateAsked(dataset, "off_topic", item.item_id, item.question, "open", view))
    # NQ-open: a question per gold passage text's first question is its doc.
    nq = [
        GateAsked("nq", "answerable", str(r.number), r.question, "open", (), (r.doc_id,), r.answers)
        for r in nq_gold(root / "nq/nq-open-oracle.jsonl.gz")
    ]
    out += rng.sample(nq, min(SAMPLE_SIZE, len(nq)))
    squad = json.loads((root / "squad/squad2_cs224n_dev-v2.0.json").read_text(encoding="utf-8"))["data"]
    answerable, unanswerable = [], []
    for a, article in enumerate(squad):
        for p, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                answers = tuple(x["text"] for x in qa.get("answers", ()))
                if answers and not qa.get("is_impossible"):
                    answerable.append(
                        GateAsked(
                            "squad", "answerable", qa["id"], qa["question"], "open", (), (f"squad-{a}-{p}",), answers
                        )
                    )
                else:
                    unanswerable.append(GateAsked("squad", "in_article", qa["id"], qa["question"], "open"))
    out += rng.sample(answerable, min(SAMPLE_SIZE, len(answerable)))
    out += rng.sample(unanswerable, min(SAMPLE_SIZE, len(unanswerable)))
    return out


def wikiqa_documents_and_questions(root: Path) -> tuple[dict[str, list], list[GateAsked]]:
    """WikiQA dev: each article (its candidate sentences) is a document, in
    one index whole ("wikiqa") and in one without any sentence labelled
    correct ("wikiqa_removed"); questions with a correct sentence are asked
    of both, answerable in the first and unanswerable in the second."""
    from ingest_pipeline.sources import plain_document

    sentences: dict[str, dict[str, tuple[str, str]]] = {}
    titles: dict[str, str] = {}
    correct: dict[str, list[str]] = {}
    questions: dict[str, tuple[str, str]] = {}
    correct_ids: set[str] = set()
    with (root / "wikiqa/WikiQA-dev.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            doc = row["DocumentID"]
            titles[doc] = row["DocumentTitle"]
            sentences.setdefault(doc, {})[row["SentenceID"]] = (row["SentenceID"], row["Sentence"])
            questions[row["QuestionID"]] = (row["Question"], doc)
            if row["Label"] == "1":
                correct.setdefault(row["QuestionID"], []).append(row["Sentence"])
                correct_ids.add(row["SentenceID"])

    def order(sid: str) -> int:
        return int(sid.rsplit("-", 1)[1])

    whole, removed = [], []
    for doc, by_id in sorted(sentences.items()):
        ids = sorted(by_id, key=order)
        whole.append(plain_document(f"wikiqa-{doc}", " ".join(by_id[i][1] for i in ids), f"wikiqa:{doc}", titles[doc]))
        kept = [by_id[i][1] for i in ids if i not in correct_ids]
        if kept:
            removed.append(plain_document(f"wikiqa-{doc}", " ".join(kept), f"wikiqa:{doc}", titles[doc]))
    asked = []
    for qid, (question, doc) in sorted(questions.items()):
        if qid not in correct:
            continue
        asked.append(
            GateAsked("wikiqa", "answerable", qid, question, "wikiqa", (), (f"wikiqa-{doc}",), (), tuple(correct[qid]))
        )
        asked.append(GateAsked("wikiqa", "answer_removed", qid, question, "wikiqa_removed"))
    return {"wikiqa": whole, "wikiqa_removed": removed}, asked


def sample_questions(samples_dir: Path) -> list[GateAsked]:
    """The README's sample questions over the sample corpus (`make demo`)."""
    questions = json.loads((samples_dir / "questions.json").read_text(encoding="utf-8"))
    return [
        GateAsked(SAMPLE_SET, "answerable", str(n), q["question"], "samples", (), (), (), (q["expect_phrase"],))
        for n, q in enumerate(questions)
    ]


def scifact_documents_and_questions(root: Path) -> tuple[dict[str, list], list[GateAsked]]:
    """Held out: SciFact's abstracts, and its claims with evidence asked of
    them (answerable), and asked without their evidence abstracts
    ("scifact_absent": other abstracts of the same field remain)."""
    from ingest_pipeline.sources import plain_document

    base = root / "scifact/beir_derived"
    documents = []
    with (base / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            documents.append(
                plain_document(
                    f"scifact-{record['_id']}", record["text"], f"scifact:{record['_id']}", record.get("title") or None
                )
            )
    asked = []
    with (base / "queries_validation.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            evidence = tuple(f"scifact-{d}" for d in (record.get("evidence") or {}))
            if not evidence:
                continue
            asked.append(GateAsked("scifact", "answerable", record["_id"], record["text"], "scifact", (), evidence))
            asked.append(
                GateAsked("scifact", "scifact_absent", record["_id"], record["text"], "scifact", _not_doc(evidence))
            )
    return {"scifact": documents}, asked


def climate_fever_documents_and_questions(root: Path) -> tuple[dict[str, list], list[GateAsked]]:
    """Held out: Climate-FEVER's evidence sentences, each its own document
    (titled by its article); a claim with supporting or refuting evidence is
    asked of them (answerable) and without its evidence articles
    ("climate_fever_absent")."""
    from ingest_pipeline.sources import plain_document

    documents, seen, asked = [], set(), []
    with (root / "climate_fever/climate-fever.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            own, articles = [], set()
            for e in record["evidences"]:
                doc = "cf-" + str(abs(hash_text(e["evidence_id"])))
                if doc not in seen:
                    seen.add(doc)
                    documents.append(
                        plain_document(doc, e["evidence"], f"climate_fever:{e['evidence_id']}", e["article"])
                    )
                if e["evidence_label"] in ("SUPPORTS", "REFUTES"):
                    own.append(doc)
                    articles.add(e["article"])
            if own:
                asked.append(
                    GateAsked(
                        "climate_fever",
                        "answerable",
                        str(record["claim_id"]),
                        record["claim"],
                        "climate_fever",
                        (),
                        tuple(own),
                    )
                )
                gone = [
                    "cf-" + str(abs(hash_text(e["evidence_id"])))
                    for e in record["evidences"]
                    if e["article"] in articles
                ]
                asked.append(
                    GateAsked(
                        "climate_fever",
                        "climate_fever_absent",
                        str(record["claim_id"]),
                        record["claim"],
                        "climate_fever",
                        _not_doc(gone),
                    )
                )
    return {"climate_fever": documents}, asked


def hash_text(text: str) -> int:
    """A stable small number for a text (Python's hash() is salted per process)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


# ------------------------------------------------------- reading the signals


def read_question(
    asked: GateAsked, retriever: Any, relevance: Any, judge: Any = None, row: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One question's cached row: per N of :data:`SIZES`, the gate's features
    over the first N candidates, whether they held the answer; the relevance
    model's log-odds on the best few (what the cross-encoder gate reads),
    and a judge embedder's cosines on them when one is given. With ``row``
    (read before, without the judge) only the judge is read and added."""
    from chunkrag_eval.gate_study import judge_cosines
    from chunkrag_filter.processors.calibration import relevance_logit
    from chunkrag_filter.processors.gate import GATE_TOP, gate_features

    started = time.perf_counter()
    chunks = retriever.search(asked.question, size=max(SIZES), filters=list(asked.filters)).chunks
    retrieve_s = time.perf_counter() - started
    top = [c.text for c in chunks[:GATE_TOP]]
    started = time.perf_counter()
    if row is not None:
        logits = list(row["relevance_logits"])
    else:
        logits = [relevance_logit(p) for p in relevance.score(asked.question, top)] if top else []
    relevance_s = time.perf_counter() - started
    started = time.perf_counter()
    judged = judge_cosines(judge, asked.question, top)
    out: dict[str, Any] = {
        "key": asked.key,
        "set": asked.set,
        "kind": asked.kind,
        "candidates": len(chunks),
        "relevance_logits": [round(x, 6) for x in logits],
        "retrieve_ms": round(retrieve_s * 1000, 1),
        "relevance_ms": row["relevance_ms"] if row is not None else round(relevance_s * 1000, 1),
    }
    if judge is not None:
        out |= {"judge_cosines": judged, "judge_ms": round((time.perf_counter() - started) * 1000, 1)}
    for n in SIZES:
        first = chunks[:n]
        features = gate_features(
            asked.question, [c.text for c in first], [c.stage_scores for c in first], logits, judged
        )
        out[f"features@{n}"] = {k: round(v, 6) for k, v in features.items()}
        out[f"holds@{n}"] = any(holds_answer(asked, c.doc_id, c.text) for c in first) if asked.answerable else None
    return out


def read_all(
    asked: Sequence[GateAsked],
    retrievers: Mapping[str, Any],
    relevance: Any,
    cache: Path,
    say: Callable[[str], None] = lambda line: None,
    judge: Any = None,
) -> list[dict[str, Any]]:
    """Every question's row, from ``cache`` where it is there already (a
    stopped run resumes); new rows are appended as they are read (a later
    line of a key replaces an earlier one). With ``judge``, a cached row
    without its cosines gets them, the rest of it kept."""
    done = {row["key"]: row for row in read_rows(cache)} if cache.is_file() else {}
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("a", encoding="utf-8") as out:
        for n, a in enumerate(asked):
            cached = done.get(a.key)
            if cached is not None and (judge is None or "judge_cosines" in cached):
                continue
            row = read_question(a, retrievers[a.index], relevance, judge, cached)
            done[a.key] = row
            out.write(json.dumps(row) + "\n")
            out.flush()
            if n % 250 == 0:
                say(f"{n} / {len(asked)} questions")
    return [done[a.key] for a in asked]


def every_question(root: Path, corpus_documents: Sequence[Any], samples: Path) -> tuple[dict[str, list], list]:
    """The documents of every index but the open corpus's and the sample
    corpus's (by index key), and every question the rule asks, in order."""
    documents: dict[str, list] = {}
    asked = open_corpus_questions(root, corpus_documents)
    for made in (
        wikiqa_documents_and_questions,
        scifact_documents_and_questions,
        climate_fever_documents_and_questions,
    ):
        docs, questions = made(root)
        documents |= docs
        asked += questions
    return documents, asked + sample_questions(samples)


def write_each_gate_cut(each_gate: Mapping[str, str | None], path: Path) -> None:
    """Each gate's cut as the rule chose it (``each_gate``: "retrieval=0.05"
    and the like) into the calibration file at ``path``."""
    from chunkrag_filter.processors.calibration import Calibrated, load_calibration, write_calibration

    current = load_calibration(str(path))
    cuts = {gate: float(name.split("=")[1]) for gate, name in each_gate.items() if name}
    gate, gate_relevance = current.gate, current.gate_relevance
    about = dict(current.about)
    if "retrieval" in cuts and cuts["retrieval"] != gate.cut:
        about["gate"] = (
            f"{about.get('gate', '').split('; cut ')[0]}; cut {cuts['retrieval']:g}: chosen by the rule that loses "
            f"no answers (`python -m bench.gate_fit choose`, results/gate_choice.json); before it {gate.cut:g}"
        )
    write_calibration(
        path,
        current.retrieval,
        current.judged,
        about,
        current.relevance,
        Calibrated(gate.model, cuts.get("retrieval", gate.cut)),
        Calibrated(gate_relevance.model, cuts.get("crossencoder", gate_relevance.cut)),
    )


def fitted_model(weights: Mapping[str, float]) -> Any:
    """A gate model from a fit's report (``{feature: weight, ..., "bias": b}``,
    results/gate_fit.json)."""
    from chunkrag_filter.processors.calibration import LogisticModel

    names = tuple(k for k in weights if k != "bias")
    return LogisticModel(names, tuple(float(weights[k]) for k in names), float(weights["bias"]))


def unread(asked: Sequence[GateAsked], cache: Path, judged: bool = False) -> int:
    """How many of ``asked`` have no cached row yet, or (``judged``) none
    with a judge's cosines (none: the rule reruns from the cache alone, no
    cluster needed)."""
    done = {row["key"]: row for row in read_rows(cache)} if cache.is_file() else {}
    return sum(a.key not in done or (judged and "judge_cosines" not in done[a.key]) for a in asked)


def read_rows(cache: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------- the decision


def gate_probability(gate: str, features: Mapping[str, float], models: Mapping[str, Any]) -> float:
    """What the candidate compares with its cut: the best raw cosine for
    ``cosine``, else the shipped gate model's P(some candidate answers)."""
    if gate == "cosine":
        return float(features["best_cosine"])
    return float(models[gate].probability(features))


def passes(candidate: tuple[str, float | None], features: Mapping[str, float], models: Mapping[str, Any]) -> bool:
    gate, cut = candidate
    if gate == "off" or cut is None:
        return True
    return gate_probability(gate, features, models) >= cut


def sign_test_p(turned_away: int) -> float:
    """One-sided exact sign test of a gate against the gate off, which turns
    no question away: every question the gate turns away is a discordant
    pair in the off gate's favour, so p = 0.5 ** k."""
    return 0.5**turned_away


def candidate_name(candidate: tuple[str, float | None]) -> str:
    gate, cut = candidate
    return gate if cut is None else f"{gate}={cut:g}"


def evaluate(
    rows: Iterable[Mapping[str, Any]],
    candidate: tuple[str, float | None],
    models: Mapping[str, Any],
    at: int = CHOSEN_AT,
) -> dict[str, Any]:
    """One candidate over every cached question at N = ``at``: per
    answerable set the questions, turned away, lost (the candidates held
    the answer) and the sign test; per unanswerable kind the share said
    "nothing relevant"."""
    answerable: dict[str, dict[str, Any]] = {}
    unanswerable: dict[str, dict[str, Any]] = {}
    for row in rows:
        passed = passes(candidate, row[f"features@{at}"], models)
        if row["kind"] == "answerable":
            entry = answerable.setdefault(row["set"], {"questions": 0, "turned_away": 0, "lost": 0, "held": 0})
            entry["questions"] += 1
            entry["held"] += bool(row[f"holds@{at}"])
            entry["turned_away"] += not passed
            entry["lost"] += (not passed) and bool(row[f"holds@{at}"])
        else:
            entry = unanswerable.setdefault(row["kind"], {"questions": 0, "nothing_relevant": 0})
            entry["questions"] += 1
            entry["nothing_relevant"] += not passed
    for entry in answerable.values():
        entry["turned_away_share"] = round(entry["turned_away"] / entry["questions"], 4)
        entry["sign_test_p"] = round(sign_test_p(entry["turned_away"]), 6)
    for entry in unanswerable.values():
        entry["share"] = round(entry["nothing_relevant"] / entry["questions"], 4)
    return {"candidate": candidate_name(candidate), "answerable": answerable, "unanswerable": unanswerable}


def eligible(evaluated: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """The rule's test of one evaluated candidate, and why it fails."""
    why = []
    for name in ANSWERABLE_SETS:
        entry = evaluated["answerable"].get(name)
        if entry is None:
            why.append(f"{name}: not measured")
            continue
        if entry["turned_away"] / entry["questions"] > MAX_TURNED_AWAY:
            why.append(f"{name}: turned away {entry['turned_away']} of {entry['questions']}")
        elif entry["sign_test_p"] < SIGNIFICANCE:
            why.append(f"{name}: {entry['turned_away']} turned away, p {entry['sign_test_p']:g} against the gate off")
    samples = evaluated["answerable"].get(SAMPLE_SET)
    if samples is None or samples["turned_away"]:
        why.append(f"sample questions turned away: {samples['turned_away'] if samples else 'not measured'}")
    return not why, why


def caught(evaluated: Mapping[str, Any], kinds: Sequence[str] = UNANSWERABLE_KINDS) -> float:
    """The mean share said "nothing relevant" over ``kinds`` (each the same weight)."""
    shares = [evaluated["unanswerable"][k]["share"] for k in kinds if k in evaluated["unanswerable"]]
    return round(sum(shares) / len(shares), 4) if shares else 0.0


def choose(rows: Sequence[Mapping[str, Any]], models: Mapping[str, Any]) -> dict[str, Any]:
    """The rule over :data:`CANDIDATES`: every candidate's figures, and the
    chosen one with the held-out check's figures."""
    choice_rows = [r for r in rows if r["set"] not in HELD_OUT_SETS]
    held_rows = [r for r in rows if r["set"] in HELD_OUT_SETS]
    table = []
    # A gate whose model is not given (the judge's, without a judge) is not read.
    readable = [c for c in CANDIDATES if c[0] in ("off", "cosine") or c[0] in models]
    for candidate in readable:
        evaluated = evaluate(choice_rows, candidate, models)
        ok, why = eligible(evaluated)
        evaluated.update(eligible=ok, why_not=why, caught=caught(evaluated))
        evaluated["at_20"] = evaluate(choice_rows, candidate, models, at=20)
        evaluated["at_20"]["caught"] = caught(evaluated["at_20"])
        table.append((candidate, evaluated))
    qualifying = [(c, e) for c, e in table if e["eligible"]]
    best = max(qualifying, key=lambda ce: (ce[1]["caught"], -GATE_COST[ce[0][0]], -(ce[0][1] or 0.0)))
    each = {
        gate: max(
            (c for c in qualifying if c[0][0] == gate),
            key=lambda ce: (ce[1]["caught"], -(ce[0][1] or 0.0)),
            default=None,
        )
        for gate in ("retrieval", "crossencoder", "judge")
        if gate in models
    }
    held = evaluate(held_rows, best[0], models) if held_rows else None
    if held is not None:
        held["caught"] = caught(held, HELD_OUT_UNANSWERABLE)
    return {
        "rule": {
            "candidates": [candidate_name(c) for c in readable],
            "at": CHOSEN_AT,
            "max_turned_away": MAX_TURNED_AWAY,
            "significance": SIGNIFICANCE,
            "answerable_sets": list(ANSWERABLE_SETS),
            "unanswerable_kinds": list(UNANSWERABLE_KINDS),
            "held_out_sets": list(HELD_OUT_SETS),
        },
        "candidates": {e["candidate"]: e for _, e in table},
        "chosen": candidate_name(best[0]),
        # The cut a caller naming a gate gets: that gate's eligible cut catching the most.
        "each_gate": {gate: candidate_name(ce[0]) if ce else None for gate, ce in each.items()},
        "held_out": held,
    }
