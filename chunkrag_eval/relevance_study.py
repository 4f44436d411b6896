"""Within-question rankings on every labelled set of shared/eval: the
retrieval's own orders against the project's relevance model.

:func:`build` indexes each labelled set (chunkrag_eval/labelled.py) with the
real ingest pipeline (one index per set, ``chunkrag-loo-<set>``), searches
each question with the hybrid query restricted to its pool (the best 64
candidates), drops near-duplicates as the filter can, and caches per
candidate the signals the filter has at query time (cosine, BM25, hybrid
rank, length), the context features, the text and the gold label: one JSON
line per question. :func:`compare` then ranks each question's candidates
by the hybrid order (top-k), by cosine, by the relevance model and by a
calibration over it, and counts the questions whose relevant chunk is kept
within 25% and 50% of the question's candidate characters.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

SHARES = (0.25, 0.5)
# The sets the relevance model was trained on: the calibration over it is
# fitted on their candidates, and their rows are not held out.
TRAINED_ON = ("nq", "squad")
RELEVANCE_CALIBRATION_FEATURES = (
    "relevance_logit",
    "relevance_gap",
    "cosine",
    "cosine_gap",
    "bm25",
    "inv_rank",
    "log_chars",
)
# Questions per set (a fixed-seed sample; seed 7): the machine has two
# shared cores, so the big sets are subsampled. None: every question.
COUNTS = {
    "popqa": None,  # all 200
    "nq": 300,
    "squad": 300,  # and 150 unanswerable
    "scifact": None,  # the 188 claims with rationale sentences
    "wikiqa": None,  # all 126 (questions without a correct sentence included)
    "healthver": 250,
    "climate_fever": 300,
}
CANDIDATES = 64


def build(names: Sequence[str], cache: Path, eval_dir: Path) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.engines.schema import DOC_ID
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.labelled import read_labelled, unique_docs
    from chunkrag_filter.processors.redundancy import drop_redundant
    from ingest_pipeline.pipeline import ingest_documents
    from ingest_pipeline.sources import plain_document
    from search_extension.retriever import HybridRetriever

    settings = Settings.from_env()
    client = make_backend(settings)
    embedder = make_embedder(settings.embedder)
    cache.mkdir(parents=True, exist_ok=True)
    for name in names:
        started = time.perf_counter()
        queries = read_labelled(name, eval_dir, COUNTS.get(name), seed=7)
        docs = unique_docs(queries)
        index = f"chunkrag-loo-{name}"
        report = ingest_documents(
            (plain_document(d.doc_id, d.text, f"{name}:{d.doc_id}", title=d.title) for d in docs),
            client=client,
            embedder=embedder,
            settings=settings,
            index=index,
            progress=False,
        )
        if not report.ok:
            raise RuntimeError(f"indexing {name} failed: {report.errors[:3]}")
        ingested = time.perf_counter() - started
        retriever = HybridRetriever(client, embedder, index, settings.retrieval)
        path = cache / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for query in queries:
                pool = [{"terms": {DOC_ID: [d.doc_id for d in query.docs]}}]
                found = retriever.search(query.question, size=CANDIDATES, filters=pool, include_vectors=True)
                kept, redundant = drop_redundant(list(found.chunks), 0.9)
                record = {
                    "dataset": name,
                    "query_id": query.query_id,
                    "question": query.question,
                    "answerable": query.answerable,
                    "rows": candidate_rows(query, kept),
                    "redundant": [{"chars": len(r.chunk.text), "gold": query.gold(r.chunk.text)} for r in redundant],
                }
                out.write(json.dumps(record) + "\n")
        print(
            f"{name}: {len(queries)} questions, {len(docs)} documents, {report.chunks} chunks; "
            f"indexed in {ingested:.0f} s, total {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
    return 0


def candidate_rows(query, chunks) -> list[dict]:
    """Per candidate (after redundancy, in retrieval order): every feature
    the filter can compute at query time, the text and the gold label."""
    from chunkrag_filter.processors.calibration import chunk_features
    from chunkrag_filter.processors.features import context_features

    base = chunk_features([c.stage_scores for c in chunks], [None] * len(chunks), [len(c.text) for c in chunks])
    context = context_features(
        query.question,
        [c.text for c in chunks],
        [c.header for c in chunks],
        [c.doc_id for c in chunks],
        [c.position for c in chunks],
        [c.lead for c in chunks],
        [c.stage_scores for c in chunks],
    )
    rows = []
    for rank, (chunk, b, x) in enumerate(zip(chunks, base, context)):
        rows.append(
            {
                "rank": rank,
                "doc_id": chunk.doc_id,
                "position": chunk.position,
                "chars": len(chunk.text),
                "text": chunk.text,
                "gold": query.gold(chunk.text),
                "knn": round(float(chunk.stage_scores.get("knn", 0.0)), 6),
                "retrieval": chunk.score,
                **{k: round(float(v), 6) for k, v in b.items() if k not in ("judge", "judged", "judge_top")},
                **{k: round(float(v), 6) for k, v in x.items()},
            }
        )
    return rows


def load_set(cache: Path, name: str) -> list[dict]:
    path = cache / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def cached_scores(cache_file: Path) -> dict[str, list[float]]:
    """A score sidecar's P(relevant) per question id (the last line wins)."""
    cached: dict[str, list[float]] = {}
    if cache_file.exists():
        for line in cache_file.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            cached[entry["query_id"]] = entry["scores"]
    return cached


def relevance_scores(records: list[dict], cache_file: Path, model) -> list[list[float]]:
    """The model's P(relevant) for every candidate, cached by question id."""
    cached = cached_scores(cache_file)
    out = []
    with cache_file.open("a", encoding="utf-8") as handle:
        for record in records:
            key = str(record["query_id"])
            if key not in cached or len(cached[key]) != len(record["rows"]):
                cached[key] = [
                    round(s, 6) for s in model.score(record["question"], [r["text"] for r in record["rows"]])
                ]
                handle.write(json.dumps({"query_id": key, "scores": cached[key]}) + "\n")
            out.append(cached[key])
    return out


def with_relevance(records: list[dict], scores: list[list[float]]) -> list[dict]:
    """Each candidate row with the relevance features the filter computes."""
    from chunkrag_filter.processors.calibration import relevance_logit

    out = []
    for record, per in zip(records, scores):
        logits = [relevance_logit(p) for p in per]
        best = max(logits, default=0.0)
        rows = [
            {**row, "relevance": p, "relevance_logit": z, "relevance_gap": z - best}
            for row, p, z in zip(record["rows"], per, logits)
        ]
        out.append({**record, "rows": rows})
    return out


def kept_answer(records: Sequence[dict], ranking: Sequence[Sequence[float]], share: float) -> list[bool]:
    """Per question with a relevant candidate: is one kept within ``share``
    of the question's candidate characters?"""
    from chunkrag_eval.measures import share_kept

    flags = []
    for record, scores in zip(records, ranking):
        rows = record["rows"]
        if not any(r["gold"] for r in rows):
            continue
        kept = share_kept([r["chars"] for r in rows], scores, share)
        flags.append(any(rows[i]["gold"] for i in kept))
    return flags


def rankings(records: Sequence[dict], calibration) -> dict[str, list[list[float]]]:
    return {
        "top_k": [[-r["rank"] for r in rec["rows"]] for rec in records],
        "cosine": [[r["cosine"] for r in rec["rows"]] for rec in records],
        "relevance": [[r["relevance"] for r in rec["rows"]] for rec in records],
        "relevance_calibrated": [[calibration.probability(r) for r in rec["rows"]] for rec in records],
    }


def compare(records: Sequence[dict], calibration) -> dict:
    from chunkrag_eval.measures import discordant, mcnemar_exact, rate
    from chunkrag_filter.processors.calibration import roc_auc

    ranked = rankings(records, calibration)
    out: dict = {
        "questions": len(records),
        "with_relevant_candidate": sum(any(r["gold"] for r in rec["rows"]) for rec in records),
        "candidates_per_question": round(sum(len(rec["rows"]) for rec in records) / max(len(records), 1), 1),
        "auc": {},
    }
    for name, scores in ranked.items():
        flat = [s for per in scores for s in per]
        labels = [bool(r["gold"]) for rec in records for r in rec["rows"]]
        auc = roc_auc(flat, labels)
        out["auc"][name] = None if auc is None else round(auc, 4)
    for share in SHARES:
        flags = {name: kept_answer(records, scores, share) for name, scores in ranked.items()}
        block = {name: round(rate(f) or 0.0, 4) for name, f in flags.items()}
        for mine in ("relevance", "relevance_calibrated"):
            for base in ("top_k", "cosine"):
                b, c = discordant(flags[mine], flags[base])
                block[f"{mine}_vs_{base}"] = {
                    "points": round(100 * (block[mine] - block[base]), 1),
                    "only_mine": b,
                    "only_base": c,
                    "p": round(mcnemar_exact(b, c), 6),
                }
        out[f"at_{int(share * 100)}pct_chars"] = block
    return out


def study_model(model_path: Path | None = None, max_tokens: int | None = None):
    """The relevance model a study scores with (None: the shipped
    graph), what it is (file, sha256, max_tokens) and the key of its score
    sidecars: the file's sha256, and the cut when it is not the trained one."""
    from chunkrag_core.artifacts import RELEVANCE_ONNX, file_sha256
    from chunkrag_core.providers.local_relevance import MAX_TOKENS, LocalRelevanceModel

    tokens = max_tokens or MAX_TOKENS
    if model_path is None:
        name, sha = RELEVANCE_ONNX.relative_path, RELEVANCE_ONNX.sha256
    else:
        name, sha = str(model_path), file_sha256(Path(model_path))
    key = sha[:12] if tokens == MAX_TOKENS else f"{sha[:12]}-t{tokens}"
    model = LocalRelevanceModel(path=model_path, max_tokens=tokens)
    return model, {"file": name, "sha256": sha, "max_tokens": tokens}, key


# The share of the training questions with a relevant candidate that the
# calibration's cut must keep one for (chunkrag_train/cut.py's rule).
CALIBRATION_KEEP = 0.95


def calibration_cut(calibration, records: Sequence[dict]) -> float:
    """The calibration's cut by the relevance model's own rule: the highest
    probability at which :data:`CALIBRATION_KEEP` of the questions with a
    relevant candidate keep one (their best relevant candidate passes)."""
    from chunkrag_eval.measures import cut_keeping

    best = [
        max(calibration.probability(r) for r in rec["rows"] if r["gold"])
        for rec in records
        if any(r["gold"] for r in rec["rows"])
    ]
    return round(cut_keeping(best, [True] * len(best), CALIBRATION_KEEP), 4)


def score_differences(scores: Sequence[Sequence[float]], reference: Sequence[Sequence[float]]) -> dict:
    """How far one model's P(relevant) is from another's on the same
    candidates: the largest and mean absolute difference, and the share of
    questions whose best candidate differs."""
    pairs = [(a, b) for mine, theirs in zip(scores, reference) for a, b in zip(mine, theirs)]
    if not pairs:
        return {"candidates": 0}
    tops = [
        max(range(len(mine)), key=mine.__getitem__) != max(range(len(theirs)), key=theirs.__getitem__)
        for mine, theirs in zip(scores, reference)
        if mine
    ]
    return {
        "candidates": len(pairs),
        "max_abs": round(max(abs(a - b) for a, b in pairs), 6),
        "mean_abs": round(statistics.fmean(abs(a - b) for a, b in pairs), 6),
        "best_candidate_differs": round(statistics.fmean(tops), 4),
    }


def heldout_table(
    cache: Path,
    sets: Sequence[str],
    model_path: Path | None = None,
    max_tokens: int | None = None,
    limit: int | None = None,
) -> dict:
    """Every ranking on every cached set, the relevance model's scores made
    (or read from its sidecar) with ``model_path`` cut at ``max_tokens``;
    ``limit``: each set's first questions only. A model other than the
    shipped one is also compared, score by score, with the shipped one's
    cached scores (``versus_shipped``)."""
    from chunkrag_core.artifacts import RELEVANCE_ONNX
    from chunkrag_filter.processors.calibration import RELEVANCE_ONLY, fit_logistic

    model, described, key = study_model(model_path, max_tokens)
    started, data, versus = time.perf_counter(), {}, {}
    for name in sets:
        records = load_set(cache, name)[:limit]
        if not records:
            print(f"{name}: nothing cached under {cache}; run `python -m bench.relevance_heldout build {name}`")
            continue
        scores = relevance_scores(records, cache / f"{name}.relevance-{key}.jsonl", model)
        data[name] = with_relevance(records, scores)
        if key != RELEVANCE_ONNX.sha256[:12]:
            shipped = cached_scores(cache / f"{name}.relevance-{RELEVANCE_ONNX.sha256[:12]}.jsonl")
            both = [(s, shipped[str(r["query_id"])]) for r, s in zip(records, scores) if str(r["query_id"]) in shipped]
            versus[name] = score_differences([a for a, _ in both], [b for _, b in both])
    rows = [r for name in TRAINED_ON for rec in data.get(name, []) for r in rec["rows"]]
    # Without the training sets' candidates the model's own probability stands in.
    calibration = (
        fit_logistic(rows, [bool(r["gold"]) for r in rows], RELEVANCE_CALIBRATION_FEATURES) if rows else RELEVANCE_ONLY
    )
    cut = calibration_cut(calibration, [rec for name in TRAINED_ON for rec in data.get(name, [])]) if rows else None
    results = {name: {"held_out": name not in TRAINED_ON, **compare(recs, calibration)} for name, recs in data.items()}
    for name, differences in versus.items():
        results[name]["versus_shipped"] = differences
    for name, block in results.items():
        print(
            f"{name:14s}{' (held out)' if block['held_out'] else ' (trained) '}",
            *(
                f"@{int(s * 100)}%: "
                + " ".join(f"{k} {block[f'at_{int(s * 100)}pct_chars'][k]:.3f}" for k in block["auc"])
                for s in SHARES
            ),
        )
    largest = [d["max_abs"] for d in versus.values() if d.get("candidates")]
    return {
        "model": described,
        "questions_per_set": limit or "all cached",
        **({"versus_shipped_max_abs": max(largest)} if largest else {}),
        "calibration_fitted_on": [name for name in TRAINED_ON if data.get(name)],
        "calibration": {
            "features": list(calibration.names),
            "weights": list(calibration.weights),
            "bias": calibration.bias,
            "cut": cut,
            "cut_rule": f"the highest at which {CALIBRATION_KEEP:.0%} of the training sets' questions with a relevant "
            "candidate keep one (chunkrag_train/cut.py's rule)",
        },
        "seconds": round(time.perf_counter() - started, 1),
        "sets": results,
    }


def scoring_speed(
    eval_dir: Path,
    runs: int,
    batch_sizes: Sequence[int],
    models: Sequence[tuple[str, Path | None]] = (("shipped", None),),
    max_tokens: Sequence[int] = (),
) -> dict:
    """Median and p90 ms (and median CPU ms, all threads) to score a SQuAD
    question's 20 chunks of ~500 characters, per model (label, graph; None: the shipped one), cut
    (the trained one, then each of ``max_tokens``) and batch size. A row's
    name is ``LABEL_batchB``, with ``_tT`` for a shorter cut than trained."""
    from chunkrag_core.providers.local_relevance import MAX_TOKENS, LocalRelevanceModel

    texts, query = speed_texts(eval_dir)
    rows, cuts = {}, [MAX_TOKENS, *(t for t in max_tokens if t != MAX_TOKENS)]
    for label, path in models:
        for tokens in cuts:
            for batch in batch_sizes:
                model = LocalRelevanceModel(batch_size=batch, path=path, max_tokens=tokens)
                model.score(query, texts)  # load and warm
                times, cpu = [], []
                for _ in range(runs):
                    began, began_cpu = time.perf_counter(), time.process_time()
                    model.score(query, texts)
                    times.append((time.perf_counter() - began) * 1000)
                    cpu.append((time.process_time() - began_cpu) * 1000)
                times.sort()
                name = f"{label}_batch{batch}" + ("" if tokens == MAX_TOKENS else f"_t{tokens}")
                rows[name] = {
                    "p50_ms": round(statistics.median(times), 2),
                    "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2),
                    "runs": runs,
                    # CPU time of every thread: what the scoring costs whatever else runs beside it
                    "p50_cpu_ms": round(statistics.median(cpu), 2),
                    "max_tokens": tokens,
                    "mean_tokens": round(statistics.fmean(model.token_counts(query, texts)), 1),
                }
                print(name, rows[name], file=sys.stderr)
    return {
        "candidates": len(texts),
        "mean_chars": round(statistics.fmean(map(len, texts))),
        "goal_p50_ms": 30,
        "models": {label: str(path) if path else "shipped" for label, path in models},
        "rows": rows,
    }


def speed_texts(eval_dir: Path) -> tuple[list[str], str]:
    """20 chunks of a SQuAD article (runs of whole sentences up to ~500
    characters, the longer than 300 ones) and its first question."""
    from ingest_pipeline.sentences import sentence_spans

    article = json.loads((eval_dir / "squad" / "squad2_cs224n_dev-v2.0.json").read_text("utf-8"))["data"][0]
    texts = []
    for paragraph in article["paragraphs"]:  # runs of whole sentences up to ~500 characters
        spans: list[tuple[int, int]] = []
        for start, end in sentence_spans(paragraph["context"], 0, len(paragraph["context"])):
            if spans and end - spans[-1][0] <= 500:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        texts.extend(paragraph["context"][s:e] for s, e in spans)
    return [t for t in texts if len(t) > 300][:20], article["paragraphs"][0]["qas"][0]["question"]
