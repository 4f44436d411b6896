"""Run the chunk filter over an evaluation set and measure it.

Each question's context pool is ingested as one document of an evaluation
index (re-runs skip what is already there). The question is then searched
with the hybrid query restricted to its own pool, every chunk of the pool
becomes a candidate, and :func:`run_filter` decides what is kept. Beside it,
a cosine baseline keeps the pool's chunks in order of embedding similarity
to the question until it holds as many characters as the filter kept; each
candidate's cosine, BM25 and length are recorded so the set-level baselines
(baselines.py) are drawn from the same pools after the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from chunkrag_core.chunk import Chunk
from chunkrag_core.engines.schema import DOC_ID
from chunkrag_core.providers.chat import ChatModel
from chunkrag_core.settings import Settings
from chunkrag_eval.baselines import baselines_summary
from chunkrag_eval.datasets import EvalItem
from chunkrag_eval.measures import answer_in_context, kept_within_budget, rate, summary
from chunkrag_filter.judging import JudgeMany
from chunkrag_filter.pipeline import FilterOptions, FilterResult, run_filter
from chunkrag_filter.processors.answer import answer_from_chunks, verdict_from_chunks
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from search_extension.retriever import HybridRetriever
from search_extension.segments import SegmentSettings

# The largest pool in popqa/pubhealth dev is 63 chunks; a pool past this cap
# is judged on its best-retrieved chunks only (reported as `pool_truncated`).
MAX_CANDIDATES = 64
# The paper's cost: a score, a self-reflection and a critic call per chunk.
NAIVE_CALLS_PER_CHUNK = 3
# The "all retrieved" answer with --generate-baselines: candidates in
# retrieval order up to this many characters (about 2,500 tokens at ~4
# characters a token), so the prompt fits the local model's 4,096-token
# context with the instructions and the answer.
ALL_RETRIEVED_MAX_CHARS = 10_000


@dataclass(frozen=True, slots=True)
class QuestionOutcome:
    item_id: str
    question: str
    candidates: int
    kept: int
    pool_truncated: bool
    chars_before: int
    chars_after: int
    threshold: float | None
    nothing_relevant: bool
    model_calls: int
    cached_calls: int
    prompt_tokens: int
    seconds: float
    # PopQA only (None elsewhere): is a gold answer in the context?
    answer_in_context_before: bool | None = None
    answer_in_context_after: bool | None = None
    baseline_answer_in_context_after: bool | None = None
    # With a generator: the answer/verdict and whether it was right.
    generated: str | None = None
    correct: bool | None = None
    baseline_bm25_answer_in_context_after: bool | None = None
    # Combined scores of the candidates, and which held a gold answer (for plots).
    scores: tuple[float | None, ...] = ()
    gold: tuple[bool, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # Per candidate, in retrieval order: its signals and the filter's
    # decision, so other scoring and threshold rules can be replayed offline
    # on the same model outputs (evaluation/ablation.py).
    rows: tuple[dict[str, Any], ...] = ()
    # With segments: is a gold answer in the RSE segments of the judged
    # candidates, within the characters the filter kept?
    segments_answer_in_context_after: bool | None = None
    # Per candidate, in retrieval order: embedding cosine to the question,
    # BM25 and length (for the set-level baselines and the curves).
    cosine: tuple[float, ...] = ()
    bm25: tuple[float, ...] = ()
    chars: tuple[int, ...] = ()
    # With --generate-baselines: the answer/verdict from all retrieved
    # chunks (up to ALL_RETRIEVED_MAX_CHARS) and whether it was right.
    all_retrieved_generated: str | None = None
    all_retrieved_correct: bool | None = None
    # The answers' own model calls and tokens (--generate, both answers),
    # apart from the filter's (model_calls, prompt_tokens).
    generation_calls: int = 0
    generation_prompt_tokens: int = 0
    generation_completion_tokens: int = 0

    @property
    def fallback(self) -> bool:
        """Whether no chunk passed and the top-k fallback kept chunks."""
        return any(row.get("reason") == "fallback" for row in self.rows)


@dataclass(frozen=True, slots=True)
class EvalReport:
    dataset: str
    questions: tuple[QuestionOutcome, ...]
    index: str
    ingest_seconds: float
    skipped_records: int

    def summary(self) -> dict[str, Any]:
        qs = self.questions
        chars_before = sum(q.chars_before for q in qs)
        chars_after = sum(q.chars_after for q in qs)
        before = rate([q.answer_in_context_before for q in qs if q.answer_in_context_before is not None])
        after = rate([q.answer_in_context_after for q in qs if q.answer_in_context_after is not None])
        baseline = rate(
            [q.baseline_answer_in_context_after for q in qs if q.baseline_answer_in_context_after is not None]
        )
        bm25_baseline = rate(
            [q.baseline_bm25_answer_in_context_after for q in qs if q.baseline_bm25_answer_in_context_after is not None]
        )
        graded = [q.correct for q in qs if q.correct is not None]
        answer_strings = before is not None
        return {
            "dataset": self.dataset,
            "questions": len(qs),
            "skipped_records": self.skipped_records,
            "answer_in_context_before": before,
            "answer_in_context_after": after,
            "answer_in_context_kept_share": round(after / before, 4) if before and after is not None else None,
            # The same-characters-per-question baselines (also in `baselines`).
            "baseline_cosine_answer_in_context_after": baseline,
            "baseline_bm25_answer_in_context_after": bm25_baseline,
            "baselines": baselines_summary(qs),
            "answer_strings": answer_strings,
            "segments_answer_in_context_after": rate(
                [q.segments_answer_in_context_after for q in qs if q.segments_answer_in_context_after is not None]
            ),
            "context_chars_before": chars_before,
            "context_chars_after": chars_after,
            "context_chars_kept_share": round(chars_after / chars_before, 4) if chars_before else None,
            "candidates_per_question": summary([q.candidates for q in qs]),
            "kept_per_question": summary([q.kept for q in qs]),
            "nothing_relevant_rate": rate([q.nothing_relevant for q in qs]),
            "fallback_rate": rate([q.fallback for q in qs]),
            # Every call a question costs: the filter's and, with --generate,
            # the answers' (also apart, in filter_* and generation_*).
            "model_calls_per_question": per_question(qs, lambda q: q.model_calls + q.generation_calls, 3),
            # A judge per chunk, writing the same answers.
            "naive_model_calls_per_question": per_question(
                qs, lambda q: NAIVE_CALLS_PER_CHUNK * q.candidates + q.generation_calls, 3
            ),
            "cached_calls_per_question": per_question(qs, lambda q: q.cached_calls, 3),
            "prompt_tokens_per_question": per_question(qs, lambda q: q.prompt_tokens + q.generation_prompt_tokens, 1),
            "filter_model_calls_per_question": per_question(qs, lambda q: q.model_calls, 3),
            "filter_prompt_tokens_per_question": per_question(qs, lambda q: q.prompt_tokens, 1),
            "generation_calls_per_question": per_question(qs, lambda q: q.generation_calls, 3),
            "generation_prompt_tokens_per_question": per_question(qs, lambda q: q.generation_prompt_tokens, 1),
            "generation_completion_tokens_per_question": per_question(qs, lambda q: q.generation_completion_tokens, 1),
            "seconds_per_question": summary([q.seconds for q in qs]),
            "accuracy": rate(graded),
            "graded": len(graded),
            "ingest_seconds": self.ingest_seconds,
        }


def per_question(qs: Sequence[QuestionOutcome], count: Callable[[QuestionOutcome], int], digits: int) -> float | None:
    """The mean of ``count`` over the questions (None for none)."""
    return round(sum(count(q) for q in qs) / len(qs), digits) if qs else None


def doc_id_for(dataset: str, item: EvalItem) -> str:
    return f"{dataset}-{item.item_id}"


def index_pools(items: Sequence[EvalItem], dataset: str, *, client, embedder, settings: Settings, index: str) -> float:
    """Ingest each question's pool as one document; returns the seconds spent."""
    documents = [plain_document(doc_id_for(dataset, item), item.pool, f"{dataset}:{item.item_id}") for item in items]
    report = ingest_documents(
        documents, client=client, embedder=embedder, settings=settings, index=index, progress=False
    )
    if not report.ok:
        raise RuntimeError(f"indexing the evaluation pools failed: {report.errors[:3]}")
    return report.seconds


def evaluate(
    items: Sequence[EvalItem],
    dataset: str,
    *,
    client,
    embedder,
    settings: Settings,
    model: ChatModel,
    options: FilterOptions,
    judge_many: JudgeMany | None = None,
    index: str,
    generate: bool = False,
    generate_baselines: bool = False,
    on_question: Callable[[QuestionOutcome], None] | None = None,
    segments: SegmentSettings | None = None,
    ensemble: Sequence[int] | None = None,
) -> EvalReport:
    """With ``ensemble`` (scales the pools are indexed at: ``settings.chunking.scales``),
    candidates come from multi-scale ensembling instead of the base chunks.
    With ``generate`` and ``generate_baselines``, an answer is written from
    all retrieved chunks too (one more model call per question), so the
    filter's accuracy is paired against it."""
    ingest_seconds = index_pools(items, dataset, client=client, embedder=embedder, settings=settings, index=index)
    retriever = HybridRetriever(client, embedder, index, settings.retrieval)
    # The filter writes no answer; with --generate one (or a verdict) is
    # written here, so the "nothing kept" case is graded the same way for
    # every method.
    filter_options = replace(options, answer=False)
    outcomes = []
    for item in items:
        outcome = evaluate_one(
            item,
            dataset,
            retriever=retriever,
            embedder=embedder,
            model=model,
            options=filter_options,
            judge_many=judge_many,
            generate=generate,
            generate_baselines=generate_baselines,
            segments=segments,
            ensemble=ensemble,
        )
        outcomes.append(outcome)
        if on_question:
            on_question(outcome)
    return EvalReport(dataset, tuple(outcomes), index, ingest_seconds, 0)


def evaluate_one(
    item: EvalItem,
    dataset: str,
    *,
    retriever: HybridRetriever,
    embedder,
    model: ChatModel,
    options: FilterOptions,
    judge_many: JudgeMany | None,
    generate: bool,
    generate_baselines: bool = False,
    segments: SegmentSettings | None = None,
    ensemble: Sequence[int] | None = None,
) -> QuestionOutcome:
    pool_filter = {"term": {DOC_ID: doc_id_for(dataset, item)}}
    started = time.perf_counter()
    if ensemble is not None:
        retrieval = retriever.search_ensemble(
            item.question, scales=ensemble, size=MAX_CANDIDATES, filters=[pool_filter], include_vectors=True
        )
    else:
        retrieval = retriever.search(item.question, size=MAX_CANDIDATES, filters=[pool_filter], include_vectors=True)
    candidates = list(retrieval.chunks)
    result = run_filter(item.question, candidates, model=model, options=options, judge_many=judge_many)
    seconds = time.perf_counter() - started

    kept_text = " ".join(c.text for c in result.kept)
    chars_before = sum(len(c.text) for c in candidates)
    chars_after = sum(len(c.text) for c in result.kept)
    by_id = {d.chunk.chunk_id: d.chunk for d in result.decisions}
    scores = tuple(by_id[c.chunk_id].stage_scores.get("combined") if c.chunk_id in by_id else None for c in candidates)
    cosine = cosine_similarities(item.question, candidates, embedder, retrieval.query_vector)
    bm25 = tuple(float(c.stage_scores.get("bm25", 0.0)) for c in candidates)

    aic_before = aic_after = baseline_after = bm25_after = segments_after = None
    gold: tuple[bool, ...] = ()
    if item.answers:
        gold = tuple(answer_in_context(c.text, item.answers) for c in candidates)
        aic_before = answer_in_context(" ".join(c.text for c in candidates), item.answers)
        aic_after = answer_in_context(kept_text, item.answers)
        texts = [c.text for c in candidates]
        baseline = kept_within_budget(texts, cosine, chars_after)
        baseline_after = answer_in_context(" ".join(candidates[i].text for i in baseline), item.answers)
        bm25_kept = kept_within_budget(texts, bm25, chars_after)
        bm25_after = answer_in_context(" ".join(candidates[i].text for i in bm25_kept), item.answers)
        if segments is not None:
            segments_after = _segments_hook(candidates, result, item.answers, retriever, segments, chars_after)

    generated = correct = all_generated = all_correct = None
    usage = (0, 0, 0)
    if generate:
        generated, correct, usage = _generate(item, result.kept, model)
        if generate_baselines:
            texts = [c.text for c in candidates]
            head = kept_within_budget(texts, [-float(i) for i in range(len(texts))], ALL_RETRIEVED_MAX_CHARS)
            all_generated, all_correct, more = _generate(item, [candidates[i] for i in sorted(head)], model)
            usage = tuple(a + b for a, b in zip(usage, more))

    return QuestionOutcome(
        item_id=item.item_id,
        question=item.question,
        candidates=len(candidates),
        kept=len(result.kept),
        pool_truncated=len(candidates) >= MAX_CANDIDATES,
        chars_before=chars_before,
        chars_after=chars_after,
        threshold=result.threshold.value if result.threshold else None,
        nothing_relevant=result.nothing_relevant,
        model_calls=result.model_calls,
        cached_calls=result.cached_calls,
        prompt_tokens=result.prompt_tokens,
        seconds=round(seconds, 3),
        answer_in_context_before=aic_before,
        answer_in_context_after=aic_after,
        baseline_answer_in_context_after=baseline_after,
        generated=generated,
        correct=correct,
        baseline_bm25_answer_in_context_after=bm25_after,
        scores=scores,
        gold=gold,
        rows=candidate_rows(candidates, result, gold),
        segments_answer_in_context_after=segments_after,
        cosine=cosine,
        bm25=bm25,
        chars=tuple(len(c.text) for c in candidates),
        all_retrieved_generated=all_generated,
        all_retrieved_correct=all_correct,
        generation_calls=usage[0],
        generation_prompt_tokens=usage[1],
        generation_completion_tokens=usage[2],
    )


def _segments_hook(
    candidates, result, answers, retriever: HybridRetriever, segments: SegmentSettings, budget_chars: int
) -> bool:
    from chunkrag_eval.segments_eval import segment_answer_in_context
    from search_extension.neighbours import position_fetcher

    return segment_answer_in_context(
        candidates, result, answers, position_fetcher(retriever.client, retriever.index), segments, budget_chars
    )


def candidate_rows(
    candidates: Sequence[Chunk], result: FilterResult, gold: Sequence[bool]
) -> tuple[dict[str, Any], ...]:
    decided = {d.chunk.chunk_id: d for d in result.decisions}
    rows = []
    for rank, chunk in enumerate(candidates):
        decision = decided.get(chunk.chunk_id)
        scores = dict(decision.chunk.stage_scores) if decision else dict(chunk.stage_scores)
        rows.append(
            {
                "chunk_id": chunk.chunk_id,
                "rank": rank,
                "chars": len(chunk.text),
                "retrieval": chunk.score,
                "gold": bool(gold[rank]) if gold else None,
                "reason": decision.reason if decision else None,
                **{name: round(float(value), 6) for name, value in scores.items()},
            }
        )
    return tuple(rows)


def cosine_similarities(
    question: str, candidates: Sequence[Chunk], embedder, query_vector: Sequence[float] | None = None
) -> tuple[float, ...]:
    """Each candidate's embedding cosine to the question (-1 for a chunk
    without a vector, so it ranks last)."""
    if not candidates:
        return ()
    query = np.asarray(query_vector if query_vector is not None else embedder.embed([question])[0], dtype=np.float32)
    return tuple(float(np.dot(c.vector, query)) if c.vector is not None else -1.0 for c in candidates)


def cosine_baseline(
    question: str, candidates: Sequence[Chunk], budget_chars: int, embedder, query_vector: Sequence[float] | None = None
) -> list[Chunk]:
    """The pool's chunks by embedding cosine to the question, taken until
    ``budget_chars`` (the characters the filter kept)."""
    similarity = cosine_similarities(question, candidates, embedder, query_vector)
    return [candidates[i] for i in kept_within_budget([c.text for c in candidates], similarity, budget_chars)]


def _generate(
    item: EvalItem, passages: Sequence[Chunk], model: ChatModel
) -> tuple[str, bool | None, tuple[int, int, int]]:
    """The answer (or verdict), whether it is right, and its (calls, prompt
    tokens, completion tokens)."""
    if item.label is not None:
        verdict = verdict_from_chunks(item.question, passages, model)
        usage = (verdict.calls, verdict.prompt_tokens, verdict.completion_tokens)
        return verdict.text, (verdict.label == item.label) if verdict.label else False, usage
    # One sentence is asked for; the cap stops a small model that rambles.
    answer = answer_from_chunks(item.question, passages, model, max_tokens=48)
    usage = (answer.calls, answer.prompt_tokens, answer.completion_tokens)
    return answer.text, answer_in_context(answer.text, item.answers) if item.answers else None, usage
