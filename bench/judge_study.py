"""Does the LLM filter earn its cost? One model run per dataset, then every
variant of the filter replayed on the same model outputs.

    python -m bench.judge_study collect popqa          # all 200 dev questions, the local model
    python -m bench.judge_study ablate                 # -> results/filter_popqa_dev.json
    python -m bench.judge_study collect pubhealth      # all 150 dev claims

`collect` runs the real filter path (`evaluate` -> `run_filter`) with the
listwise judge asked in both orders over every batch, so each candidate
carries its retrieval signals (cosine, BM25, rank) and its share in each
order. Scores go to a Redis score cache (database 12) as the product
caches them, so a later run of the chosen default on the same questions
costs no model call and checks that the product reproduces the replay.

`ablate` replays each variant (evaluation/ablation.py): which share (as
retrieved, or both orders), which candidates the model sees (all, or the
best nine: one batch), which score (the judge's share, a cheap signal, or a
logistic model over both fitted with 5-fold cross-validation by question),
and which cut. The baselines (cosine and BM25 kept to the same characters)
are computed per variant at that variant's own budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import RESULTS, SHARED, write_result
from chunkrag_eval import ablation
from chunkrag_eval.ablation import Variant
from chunkrag_filter.processors.calibration import CHEAP_FEATURES, FEATURES

STUDY_DB = 12
# The candidates judged together in the first batch (a full listwise batch).
HEAD = 9


def collect(
    dataset: str,
    limit: int | None,
    orders: int,
    judge: str,
    seed: int | None,
    name: str | None,
    skip_from: tuple[str, ...] = (),
) -> int:
    """``judge``: "cascade" (the best nine in one batch, in ``orders``
    orders), "study" (that, plus the rest as retrieved), or "none" (no model:
    the retrieval signals alone, on every question in minutes).
    Questions run in a seeded random order when ``seed`` is given, and the
    report is rewritten after each one, so a run stopped early leaves a
    random sample, not a prefix. ``skip_from`` names earlier runs whose
    questions are left out, so a stopped run is continued under a new name
    (in the same seeded order) and ``ablate --judged a+b`` reads both."""
    import dataclasses
    import random

    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.report import print_outcome, write_report
    from chunkrag_eval.runner import EvalReport, evaluate
    from chunkrag_filter.judging import judge_in_threads
    from chunkrag_filter.pipeline import FilterOptions
    from chunkrag_filter.processors.relevance import Judgement, ScoringOptions
    from workers.score_cache import RedisScoreCache

    settings = Settings.from_env()
    _, items, bad = read_items(SHARED / "eval" / dataset / "dev.jsonl", dataset, "ambiguous", limit)
    if seed is not None:
        items = list(items)
        random.Random(seed).shuffle(items)
    done_before = {
        str(q["item_id"])
        for run in skip_from
        for q in json.loads((RESULTS / f"{run}.questions.json").read_text())["questions"]
    }
    items = [item for item in items if str(item.item_id) not in done_before]
    cache_url = settings.redis_url.rsplit("/", 1)[0] + f"/{STUDY_DB}"
    cache = RedisScoreCache.from_url(cache_url, ttl_s=30 * 24 * 3600)
    model = make_chat(settings.chat)
    options = FilterOptions(
        scoring=ScoringOptions(method="listwise", orders=1), answer=False, judge_top=0 if judge == "none" else None
    )
    # Two threads: the local server has two slots, so two batches run at once.
    threads = judge_in_threads(model, threads=settings.chat.parallel, cache=cache, model_name=settings.chat.model)
    head_options = dataclasses.replace(options.scoring, orders=orders)

    def judge_many(query, chunks, scoring):
        # The best HEAD candidates in one batch, in `orders` orders (what the
        # cascade sends, so its cache entries serve it later); for "study"
        # the rest as retrieved, in batches of their own.
        head = threads(query, chunks[:HEAD], head_options)
        if judge == "study" and len(chunks) > HEAD:
            return head + threads(query, chunks[HEAD:], scoring)
        return head + [Judgement(None, None, None, None, notes=("not judged: below the best nine",))] * max(
            0, len(chunks) - HEAD
        )

    path = RESULTS / f"{name or f'filter_{dataset}_dev'}.questions.json"
    done: list = []
    started = time.perf_counter()
    options_record = {
        "method": "listwise",
        "judge": judge,
        "head": HEAD,
        "head_orders": orders,
        "rest_orders": 1 if judge == "study" else None,
        "threshold": "dynamic",
        "redundancy": 0.9,
        "judge_threads": settings.chat.parallel,
        "question_order": f"seeded shuffle ({seed})" if seed is not None else "file order",
        "continues": list(skip_from) or None,
    }

    def summary_of(report):
        return {
            **report.summary(),
            "skipped_records": len(bad),
            "records_in_file": len(items),
            "wall_seconds": round(time.perf_counter() - started, 1),
            "options": options_record,
            "model": settings.chat.model if judge != "none" else None,
            "model_base_url": settings.chat.base_url if judge != "none" else None,
        }

    def on_question(outcome):
        print_outcome(outcome, sys.stderr)
        done.append(outcome)
        partial = EvalReport(dataset, tuple(done), f"chunkrag-eval-{dataset}", 0.0, 0)
        write_report(path, summary_of(partial), partial)

    report = evaluate(
        items,
        dataset,
        client=make_backend(settings),
        embedder=make_embedder(settings.embedder),
        settings=settings,
        model=model,
        options=options,
        judge_many=judge_many if judge != "none" else None,
        index=f"chunkrag-eval-{dataset}",
        generate=False,
        on_question=on_question,
    )
    write_report(path, summary_of(report), report)
    print(json.dumps(summary_of(report), indent=2))
    return 0


# Cut rules tried for probabilities: Algorithm 1 on them, fixed
# probabilities, and a share of the question's best probability.
CUTS = ("algorithm1", "fixed:0.3", "fixed:0.4", "relative:0.5", "relative:0.7")
CHEAP_LABEL = "calibrated, retrieval signals only (no model)"
JUDGE_LABELS = {
    ("forward", 9): "calibrated, judge (best 9, as retrieved) + retrieval signals",
    ("both", 9): "calibrated, judge (best 9, both orders) + retrieval signals",
}


def cheap_variants() -> list[Variant]:
    out = [
        Variant("cosine, Algorithm 1", "cosine", "algorithm1"),
        Variant("BM25, Algorithm 1", "bm25", "algorithm1"),
        Variant("hybrid retrieval score, Algorithm 1", "retrieval", "algorithm1"),
    ]
    return out + [Variant(f"{CHEAP_LABEL}, {cut}", "calibrated", cut, features=CHEAP_FEATURES) for cut in CUTS]


def judge_variants() -> list[Variant]:
    out = [
        Variant("listwise judge (best 9, as retrieved), Algorithm 1", "judge", "algorithm1", judge="forward", top=9),
        Variant("listwise judge (best 9, both orders), Algorithm 1", "judge", "algorithm1", judge="both", top=9),
    ]
    for (judge, top), label in JUDGE_LABELS.items():
        out += [Variant(f"{label}, {cut}", "calibrated", cut, judge=judge, top=top, features=FEATURES) for cut in CUTS]
    return out


def meets_goals(row: dict, before: float) -> bool:
    return (
        row["answer_in_context_after"] >= row["baseline_cosine_answer_in_context_after"] + 0.05
        and row["answer_in_context_after"] >= 0.90 * before
        and row["context_chars_kept_share"] <= 0.25
    )


def asked_both_orders(question) -> bool:
    """Whether the run asked this question's first batch in both orders (a
    continuation may have asked one order only)."""
    head = question.judged_rows[:HEAD]
    return bool(head) and all(r.get("reverse") is not None for r in head)


def questions_for(questions, variant: Variant) -> list:
    """Both-order variants replay only the questions asked in both orders."""
    return [q for q in questions if asked_both_orders(q)] if variant.judge == "both" else list(questions)


def table_for(all_questions, variants, folds: int, per_call: float | None) -> tuple[list[dict], float]:
    before = sum(any(r["gold"] for r in q.rows) for q in all_questions) / len(all_questions)
    rows = []
    for variant in variants:
        questions = questions_for(all_questions, variant)
        if not questions:
            continue
        if variant.score == "calibrated":
            results, probabilities, labels = ablation.cross_validated(questions, variant, k=folds)
            auc = ablation.roc_auc(probabilities, labels)
        else:
            results = [ablation.replay(q, variant) for q in questions]
            auc = ablation.chunk_auc(questions, lambda q, v=variant: ablation.scores_for(q, v))
        row = {
            "variant": variant.name,
            "score": variant.score,
            "cut": variant.cut,
            "judge": variant.judge,
            "judge_top": variant.top,
            "questions": len(questions),
            "answer_in_context_before": round(sum(r.before for r in results) / len(results), 4),
            **ablation.summarise(results, per_call),
            "chunk_roc_auc": None if auc is None else round(auc, 4),
        }
        row["margin_over_cosine"] = round(
            row["answer_in_context_after"] - row["baseline_cosine_answer_in_context_after"], 4
        )
        row["meets_goals"] = meets_goals(row, row["answer_in_context_before"])
        rows.append(row)
        print(
            f"{row['answer_in_context_after']:.3f} (cos {row['baseline_cosine_answer_in_context_after']:.3f}, bm25 "
            f"{row['baseline_bm25_answer_in_context_after']:.3f}) "
            f"chars {row['context_chars_kept_share']:.3f} calls {row['model_calls_per_question']:.2f} auc "
            f"{row['chunk_roc_auc']}  {variant.name}",
            file=sys.stderr,
        )
    return rows, before


def ablate(dataset: str, folds: int, judged_name: str, cheap_name: str, default_name: str | None = None) -> int:
    cheap_payload = json.loads((RESULTS / f"{cheap_name}.questions.json").read_text())
    judged_payload = merged_runs(judged_name.split("+"))
    whole = ablation.questions_from_report(cheap_payload)
    sample = ablation.questions_from_report(judged_payload)
    per_call = ablation.median_seconds_per_call(judged_payload)
    print(f"--- whole set: {len(whole)} questions", file=sys.stderr)
    whole_table, whole_before = table_for(whole, cheap_variants(), folds, None)
    print(f"--- judged sample: {len(sample)} questions", file=sys.stderr)
    sample_table, sample_before = table_for(sample, cheap_variants() + judge_variants(), folds, per_call)
    fitted = {}
    for variant in [
        v for v in cheap_variants() + judge_variants() if v.score == "calibrated" and v.cut == "algorithm1"
    ]:
        fitted_on = questions_for(sample if variant.judge else whole, variant)
        model = ablation.fit(fitted_on, variant)
        fitted[variant.name.rsplit(",", 1)[0]] = {
            "features": list(model.names),
            "weights": list(model.weights),
            "bias": model.bias,
            "fitted_on": f"{len(fitted_on)} questions",
        }
    summary = judged_payload["summary"]
    path = write_result(
        f"filter_{dataset}_dev_ablation",
        "bench.judge_study",
        {
            "dataset": f"{dataset}/dev.jsonl, pool contexts.ambiguous",
            "model": summary.get("model"),
            "whole_set": {
                "questions": len(whole),
                "answer_in_context_before": round(whole_before, 4),
                "ablation": whole_table,
                "note": "Every dev question, retrieval signals only: no model call.",
            },
            "judged_sample": {
                "questions": len(sample),
                "answer_in_context_before": round(sample_before, 4),
                "how_chosen": (
                    (
                        "every question, run in a seeded random order "
                        f"({summary.get('options', {}).get('question_order')}) over "
                        f"{len(summary.get('runs', [])) or 1} run(s)"
                    )
                    if len(sample) == len(whole)
                    else (
                        "questions run in a seeded random order "
                        f"({summary.get('options', {}).get('question_order')}); the run was stopped before the end, "
                        "leaving a random sample, not a prefix"
                    )
                ),
                "median_seconds_per_call": per_call,
                "collection_run": {
                    k: summary.get(k)
                    for k in (
                        "questions",
                        "model_calls_per_question",
                        "seconds_per_question",
                        "wall_seconds",
                        "options",
                        "model_base_url",
                    )
                },
                "ablation": sample_table,
            },
            "cross_validation_folds": folds,
            "fitted": fitted,
            "note": (
                "Answer-in-context is per-chunk gold (some kept chunk holds a gold answer). Baselines keep chunks by "
                "cosine (or BM25) to the question until they hold as many characters as the variant kept, per "
                "question. Calibrated rows are cross-validated by question (5 folds): each question is scored by a "
                "model fitted on the other folds only. Seconds per question are calls times the median seconds per "
                "call measured in the collection run (one llama-server thread on a loaded 2-core machine)."
            ),
        },
    )
    print(path)
    if default_name:
        _write_headline(
            dataset,
            default_name,
            sample_table,
            sample_before,
            whole_table,
            whole_before,
            len(sample),
            len(whole),
            judged_payload,
            cheap_payload,
            fitted,
            judged_name.split("+") + [cheap_name],
        )
    return 0


def merged_runs(names: list[str]) -> dict:
    """One payload from a run and its continuations: their questions in
    run order, the first run's summary with the totals of all."""
    payloads = [json.loads((RESULTS / f"{name}.questions.json").read_text()) for name in names]
    questions = [q for p in payloads for q in p["questions"]]
    ids = [str(q["item_id"]) for q in questions]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"runs {names} share questions: a continuation must skip the questions of the runs before it")
    summary = dict(payloads[0]["summary"])
    summary["questions"] = len(questions)
    summary["wall_seconds"] = round(sum(p["summary"].get("wall_seconds") or 0 for p in payloads), 1)
    summary["runs"] = [
        {"name": n, "questions": len(p["questions"]), "wall_seconds": p["summary"].get("wall_seconds")}
        for n, p in zip(names, payloads)
    ]
    return {"summary": summary, "questions": questions}


def _write_headline(
    dataset,
    default_name,
    sample_table,
    sample_before,
    whole_table,
    whole_before,
    n_sample,
    n_whole,
    judged_payload,
    cheap_payload,
    fitted,
    runs,
) -> None:
    """results/filter_<dataset>_dev.json: the shipped default's figures (the
    judged sample, cross-validated), its baselines, and the goals."""
    row = next(r for r in sample_table if r["variant"] == default_name)
    cheap_best = max(
        (r for r in whole_table if r["context_chars_kept_share"] <= 0.25), key=lambda r: r["margin_over_cosine"]
    )
    summary = judged_payload["summary"]
    naive = summary.get("naive_model_calls_per_question")
    write_result(
        f"filter_{dataset}_dev",
        "bench.judge_study",
        {
            "dataset": (
                f"{dataset}/dev.jsonl: all {n_whole} questions judged"
                if n_sample == n_whole
                else (
                    f"{dataset}/dev.jsonl: {n_sample} of {n_whole} questions judged (a seeded random sample); "
                    f"retrieval-only figures on all {n_whole}"
                )
            ),
            "model": summary.get("model"),
            "default": default_name,
            "questions": n_sample,
            "answer_in_context_before": round(sample_before, 4),
            "answer_in_context_after": row["answer_in_context_after"],
            "answer_in_context_kept_share": row["kept_share_of_before"],
            "baseline_cosine_answer_in_context_after": row["baseline_cosine_answer_in_context_after"],
            "baseline_bm25_answer_in_context_after": row["baseline_bm25_answer_in_context_after"],
            "context_chars_kept_share": row["context_chars_kept_share"],
            "model_calls_per_question": row["model_calls_per_question"],
            "naive_model_calls_per_question": naive,
            "calls_reduction_vs_naive": round(naive / row["model_calls_per_question"], 2)
            if naive and row["model_calls_per_question"]
            else None,
            "seconds_per_question_estimated": row["seconds_per_question_estimated"],
            "chunk_roc_auc": row["chunk_roc_auc"],
            "goals": {
                "5_points_above_cosine_at_same_characters": {
                    "margin": row["margin_over_cosine"],
                    "met": row["margin_over_cosine"] >= 0.05,
                },
                "0.90_of_before_at_most_25_percent_characters": {
                    "kept_share_of_before": row["kept_share_of_before"],
                    "characters": row["context_chars_kept_share"],
                    "met": (row["kept_share_of_before"] or 0) >= 0.90 and row["context_chars_kept_share"] <= 0.25,
                },
                "calls_2x_fewer_than_naive": {
                    "met": bool(naive)
                    and (row["model_calls_per_question"] == 0 or naive / row["model_calls_per_question"] >= 2)
                },
            },
            "judge_on_at_the_same_cut": next(
                (
                    r
                    for r in sample_table
                    if r["judge"] == "forward" and r["score"] == "calibrated" and r["cut"] == row["cut"]
                ),
                None,
            ),
            "whole_set_retrieval_only": {
                "questions": n_whole,
                "answer_in_context_before": round(whole_before, 4),
                "best_within_25_percent_characters": cheap_best,
            },
            "coefficients": fitted,
            "ablation_file": f"bench/results/filter_{dataset}_dev_ablation.json",
            "per_question_files": [f"bench/results/{run}.questions.json" for run in runs],
        },
    )


JUDGE_ALONE = "the judge alone (its judged candidates, Algorithm 1)"
DEFAULT_LABEL = "default (retrieval signals calibrated, no judge)"
JUDGE_ON = "judge on (best nine, calibrated with the retrieval signals)"
COSINE_AT_DEFAULT = "cosine at the default's characters"


def verdicts(dataset: str, limit: int | None, with_judge_alone: bool = False, runs: tuple[str, ...] = ()) -> int:
    """True/false accuracy of a verdict written from what each variant keeps
    (PubHealth has labels, not answer strings): the shipped default (the
    retrieval signals calibrated, no judge), the judge turned on (its share
    calibrated with the same signals), cosine kept to the default's
    characters, and optionally the judge's share alone cut by Algorithm 1.
    Both calibrations were fitted on PopQA dev only. Each verdict is one
    model call; a variant keeping the same chunks as another reuses its
    verdict (the model answers deterministically)."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from chunkrag_core.engines import make_backend
    from chunkrag_core.engines.schema import chunk_from_hit
    from chunkrag_core.providers import make_chat
    from chunkrag_core.settings import Settings
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.measures import kept_within_budget
    from chunkrag_filter.pipeline import JUDGE_TOP_WHEN_ASKED, FilterOptions, resolve_calibration
    from chunkrag_filter.processors.answer import verdict_from_chunks

    runs = runs or (f"filter_{dataset}_dev",)
    payload = merged_runs(list(runs))
    questions = ablation.questions_from_report(payload, need_gold=False)[:limit]
    _, items, _ = read_items(SHARED / "eval" / dataset / "dev.jsonl", dataset, "ambiguous", None)
    claims = {item.item_id: item for item in items}
    settings = Settings.from_env()
    client, model = make_backend(settings), make_chat(settings.chat)
    default = FilterOptions()
    judged = dataclasses.replace(default, judge_top=JUDGE_TOP_WHEN_ASKED)
    default_model, default_cut = resolve_calibration(default)
    judged_model, judged_cut = resolve_calibration(judged)
    default = dataclasses.replace(default, fixed_threshold=default_cut)
    judged = dataclasses.replace(judged, fixed_threshold=judged_cut)
    variants = {
        DEFAULT_LABEL: (
            Variant(DEFAULT_LABEL, "calibrated", _cut_rule(default), features=default_model.names),
            default_model,
        ),
        JUDGE_ON: (
            Variant(
                JUDGE_ON,
                "calibrated",
                _cut_rule(judged),
                judge="forward",
                top=judged.judge_top,
                features=judged_model.names,
            ),
            judged_model,
        ),
    }
    if with_judge_alone:
        variants[JUDGE_ALONE] = (Variant(JUDGE_ALONE, "judge", "algorithm1", judge="forward"), None)
    names = list(variants) + [COSINE_AT_DEFAULT]
    tallies: dict[str, list[bool]] = {name: [] for name in names}
    chars: dict[str, list[int]] = {k: [] for k in tallies}
    per_claim: list[dict] = []

    def one(question) -> tuple[dict[str, tuple[bool, int, str | None]], int]:
        """Each variant's (right, kept characters, verdict), and the verdict
        calls made (one per distinct kept set)."""
        rows = question.judged_rows
        ids = [r["chunk_id"] for r in question.rows]
        found = client.fetch(f"chunkrag-eval-{dataset}", ids)
        chunks = {doc["_id"]: chunk_from_hit(doc) for doc in found if doc.get("found")}
        kept_sets = {
            name: [rows[i]["chunk_id"] for i in ablation.kept_indices(question, variant, calibration)]
            for name, (variant, calibration) in variants.items()
        }
        budget = sum(len(chunks[c].text) for c in kept_sets[DEFAULT_LABEL] if c in chunks)
        every = list(question.rows)
        taken = kept_within_budget(["x" * r["chars"] for r in every], [r.get("cosine", 0.0) for r in every], budget)
        kept_sets[COSINE_AT_DEFAULT] = [every[i]["chunk_id"] for i in taken]
        item = claims[question.item_id]
        out, asked = {}, {}
        for name, kept_ids in kept_sets.items():
            kept = [chunks[c] for c in kept_ids if c in chunks]
            key = tuple(c.chunk_id for c in kept)
            if key not in asked:
                asked[key] = verdict_from_chunks(item.question, kept, model).label
            out[name] = (asked[key] == item.label, sum(len(c.text) for c in kept), asked[key])
        return out, len(asked)

    # Claims two at a time: the local server has two slots.
    calls = 0
    with ThreadPoolExecutor(max_workers=max(1, settings.chat.parallel)) as pool:
        for n, (question, (outcome, asked_calls)) in enumerate(zip(questions, pool.map(one, questions))):
            for name, (right, kept_chars, _) in outcome.items():
                tallies[name].append(right)
                chars[name].append(kept_chars)
            calls += asked_calls
            per_claim.append(
                {
                    "item_id": question.item_id,
                    "label": claims[question.item_id].label,
                    "verdicts": {
                        name: {"verdict": said, "kept_chars": kept_chars}
                        for name, (_, kept_chars, said) in outcome.items()
                    },
                }
            )
            print(
                f"{n + 1}/{len(questions)} " + " ".join(f"{k[:12]}={sum(v)}" for k, v in tallies.items()),
                file=sys.stderr,
            )
    chars_before = sum(r["chars"] for q in questions for r in q.rows)
    path = write_result(
        f"filter_{dataset}_dev",
        "bench.judge_study",
        {
            "dataset": f"{dataset}/dev.jsonl (all {len(questions)} claims; pool: contexts.ambiguous)",
            "model": settings.chat.model,
            "collection_run": {
                k: payload["summary"].get(k)
                for k in (
                    "questions",
                    "context_chars_kept_share",
                    "model_calls_per_question",
                    "naive_model_calls_per_question",
                    "seconds_per_question",
                    "wall_seconds",
                    "options",
                )
            },
            "true_share": round(sum(claims[q.item_id].label == "true" for q in questions) / len(questions), 4),
            "accuracy": {k: round(sum(v) / len(v), 4) for k, v in tallies.items()},
            "context_chars_kept_share": {k: round(sum(v) / chars_before, 4) for k, v in chars.items()},
            "judge_calls_per_claim": {
                DEFAULT_LABEL: 0,
                JUDGE_ON: 1,
                COSINE_AT_DEFAULT: 0,
                **({JUDGE_ALONE: "as collected"} if with_judge_alone else {}),
            },
            "verdict_calls": calls,
            "note": (
                "Judge outputs from one collection run (collection_run.options); each variant's kept chunks replayed "
                "from them, then one verdict call per claim per distinct kept set. Both calibrations were fitted on "
                "PopQA dev only: PubHealth is data they were not fitted on. Accuracy is the share of claims whose "
                "verdict matches the label (a verdict that names neither true nor false counts as wrong); true_share "
                "is what always answering 'true' would score."
            ),
            "per_question_files": [f"bench/results/{run}.questions.json" for run in runs],
            "per_claim": per_claim,
        },
    )
    print(path)
    return 0


def _cut_rule(options) -> str:
    if options.threshold == "fixed":
        return f"fixed:{options.fixed_threshold}"
    if options.threshold == "relative":
        return f"relative:{options.fixed_threshold}"
    return "algorithm1"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("dataset", choices=["popqa", "pubhealth"])
    c.add_argument("--limit", type=int)
    c.add_argument("--orders", type=int, default=2, choices=[1, 2])
    c.add_argument("--judge", default="cascade", choices=["cascade", "study", "none"])
    c.add_argument("--seed", type=int, help="run the questions in this seeded random order")
    c.add_argument("--name", help="result name (default filter_<dataset>_dev)")
    c.add_argument(
        "--skip-from",
        action="append",
        default=[],
        metavar="NAME",
        help="leave out the questions of this earlier run (repeatable)",
    )
    a = sub.add_parser("ablate")
    a.add_argument("dataset", nargs="?", default="popqa", choices=["popqa"])
    a.add_argument("--folds", type=int, default=5)
    a.add_argument(
        "--judged",
        default="filter_popqa_dev",
        help="the result name of the judged collection run; a+b for a run and its continuation",
    )
    a.add_argument(
        "--cheap", default="filter_popqa_dev_cheap", help="the result name of the no-model run over every question"
    )
    a.add_argument("--default", help="the variant shipped as the default: also write results/filter_<dataset>_dev.json")
    v = sub.add_parser("verdicts")
    v.add_argument("dataset", nargs="?", default="pubhealth", choices=["pubhealth"])
    v.add_argument("--limit", type=int)
    v.add_argument(
        "--judge-alone",
        action="store_true",
        help="also the judge's share alone cut by Algorithm 1 (one more verdict per claim)",
    )
    v.add_argument("--judged", help="the collection run(s) to read, a+b (default filter_<dataset>_dev)")
    args = parser.parse_args(argv)
    if args.command == "verdicts":
        return verdicts(
            args.dataset, args.limit, args.judge_alone, tuple(args.judged.split("+")) if args.judged else ()
        )
    if args.command == "collect":
        return collect(args.dataset, args.limit, args.orders, args.judge, args.seed, args.name, tuple(args.skip_from))
    return ablate(args.dataset, args.folds, args.judged, args.cheap, args.default)


if __name__ == "__main__":
    sys.exit(main())
