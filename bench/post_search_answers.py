"""Answers from post-search's kept passages against whole hits cut to the model's context.

    python -m bench.post_search_answers [--queries 60] [--minutes 80] [--cache /work/runs/post_search_answers.sqlite]
    python -m bench.post_search_answers --queries 60 --contexts-only --out post_search_answers_contexts

The questions and hits of ``bench.post_search_bench`` (same seed, same
draws): SQuAD 2 dev whole documents of 1,000-3,000 words, ``--hits`` per
question, the gold document among random others in a random order (the
cluster's). From the same hits, per question, the local chat model answers
with the prompt and token cap of ``chunkrag eval --generate`` (the answer
table's) from one context per row:

- ``whole_hits``: every hit's title and text in the cluster's order, cut to
  the model's context (the last hit that reaches the limit cut at a word, the
  rest left out): what a caller without post-search would send;
- ``kept``: post-search's kept passages at the shipped default (the library
  call, passages from the warm cache), in the filter's order (the order of
  post-search's own answer), cut to the context as the answer table cuts;
- ``kept_best_first``: the same passages best first by the filter's score;
- ``cosine``: every passage of the hits by cosine with the question, best
  first, up to the characters of ``kept``'s context (the passages a plain
  vector ranking would send in the same room);
- ``gold_hit``: the gold document alone, cut to the context (an upper bound
  on what retrieval could give).

Graded as the answer table grades PopQA: a gold answer as a case-insensitive
substring of the answer. Each row is compared with ``whole_hits`` question by
question (exact McNemar). Answers go through the answer table's cache, so a
re-run resumes; the result is rewritten after every question, and
``--minutes`` stops taking new questions after that long. ``--contexts-only``
calls no model: per row, the share of questions whose gold answer is in the
context sent (the most a row's answers could get right).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any, Sequence

from bench.common import merge_result, write_result
from bench.post_search_bench import cluster_response, documents, queries
from chunkrag_core.chunk import Chunk
from chunkrag_eval.answer_table import (
    ANSWER_MAX_TOKENS,
    GenerationCache,
    MeteredChat,
    RowOutcome,
    context_budget_chars,
    discordant,
    fit_context,
    mcnemar_exact,
)
from chunkrag_eval.measures import answer_in_context, kept_within_budget
from chunkrag_filter.processors.answer import answer_from_chunks

ROWS = ("whole_hits", "kept", "kept_best_first", "cosine", "gold_hit")
REFERENCE = "whole_hits"

# ---------------------------------------------------------------- pure parts


def cut_to_budget(chunks: Sequence[Chunk], budget_chars: int) -> tuple[list[Chunk], bool]:
    """Chunks in order up to ``budget_chars`` of text; the one that reaches
    the limit is cut at the last word boundary before it (a whole document
    is longer than the context, so dropping it whole would send nothing) and
    the rest are left out. Returns the chunks and whether anything was cut."""
    out: list[Chunk] = []
    used = 0
    for chunk in chunks:
        room = budget_chars - used
        if len(chunk.text) <= room:
            out.append(chunk)
            used += len(chunk.text)
            continue
        head = chunk.text[: room + 1]
        head = head[: head.rfind(" ")] if " " in head else ""
        head = head.rstrip()
        if head:
            out.append(dataclasses.replace(chunk, text=head, end=chunk.start + len(head)))
        return out, True
    return out, False


def by_cosine_within(passages: Sequence[Chunk], cosines: Sequence[float], budget_chars: int) -> list[Chunk]:
    """Passages best first by cosine while they fit ``budget_chars`` (one
    that overflows is skipped; smaller ones after it may still fit)."""
    return [passages[i] for i in kept_within_budget([p.text for p in passages], cosines, budget_chars)]


def best_first(kept: Sequence[Chunk]) -> list[Chunk]:
    """Kept passages by the filter's combined score, best first."""
    return sorted(kept, key=lambda c: -c.stage_scores.get("combined", c.score or 0.0))


def row_figures(outcomes: Sequence[RowOutcome], reference: Sequence[RowOutcome]) -> dict[str, Any]:
    """A row's accuracy, prompt tokens per answer and context, and its exact
    McNemar against ``reference`` (the same questions in the same order)."""
    if [o.item_id for o in outcomes] != [r.item_id for r in reference]:
        raise ValueError("rows compared must cover the same questions in the same order")
    n = len(outcomes)
    if n == 0:
        return {"n": 0}
    right = [bool(o.correct) for o in outcomes]
    only_here, only_reference = discordant(right, [bool(r.correct) for r in reference])
    return {
        "n": n,
        "accuracy": round(sum(right) / n, 4),
        "prompt_tokens_per_answer": round(sum(o.prompt_tokens for o in outcomes) / n, 1),
        "context_chars_per_question": round(sum(o.context_chars for o in outcomes) / n, 1),
        "contexts_cut_to_fit": sum(o.context_cut for o in outcomes),
        "seconds_per_answer": round(sum(o.seconds for o in outcomes) / n, 2),
        "right_only_here": only_here,
        "right_only_whole_hits": only_reference,
        "p_vs_whole_hits": round(mcnemar_exact(only_here, only_reference), 4),
    }


def summary_of(questions: Sequence[dict[str, Any]], rows: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each row's figures over the questions answered by every row."""
    done = [q for q in questions if all(r in q["rows"] for r in rows)]
    reference = [q["rows"][REFERENCE]["outcome"] for q in done]
    out = {}
    for row in rows:
        figures = row_figures([q["rows"][row]["outcome"] for q in done], reference)
        if done:
            figures["answer_in_context_share"] = round(
                sum(q["rows"][row]["answer_in_context"] for q in done) / len(done), 4
            )
        out[row] = figures
    return out


def context_figures(records: Sequence[dict[str, Any]], rows: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Without the model: per row, the share of questions whose gold answer
    is in the context sent, its characters, and how many were cut to fit.
    ``records[i][row]`` is {"answer_in_context", "context_chars", "cut"}."""
    n = len(records)
    if n == 0:
        return {row: {"n": 0} for row in rows}
    return {
        row: {
            "n": n,
            "answer_in_context_share": round(sum(r[row]["answer_in_context"] for r in records) / n, 4),
            "context_chars_per_question": round(sum(r[row]["context_chars"] for r in records) / n, 1),
            "contexts_cut_to_fit": sum(r[row]["cut"] for r in records),
        }
        for row in rows
    }


# ---------------------------------------------------------------- model edge


def answer(question: str, answers: Sequence[str], item_id: str, row: str, context: list[Chunk], cut: bool, chat):
    """The answer from ``context`` (the answer table's prompt and cap), graded."""
    metered = chat.fresh()
    reply = answer_from_chunks(question, context, metered, max_tokens=ANSWER_MAX_TOKENS)
    return RowOutcome(
        item_id=item_id,
        row=row,
        text=reply.text,
        correct=answer_in_context(reply.text, answers),
        score=None,
        context_chars=sum(len(c.text) for c in context),
        chunks=len(context),
        calls=metered.calls,
        prompt_tokens=metered.prompt_tokens,
        completion_tokens=metered.completion_tokens,
        seconds=round(metered.seconds, 3),
        context_cut=cut,
    )


def whole_chunk(doc: dict, position: int) -> Chunk:
    """A hit's whole text as one passage, its title as the header."""
    return Chunk(doc["id"], position, doc["body"], 0, len(doc["body"]), title=doc["title"], header=doc["title"])


def contexts(question: str, gold: dict, hits: list[dict], run, budget: int) -> dict[str, tuple[list[Chunk], bool]]:
    """Each row's context for one question; ``run(all_passages)`` is the
    post-search library call (the default filter, or every passage)."""
    out = {"whole_hits": cut_to_budget([whole_chunk(d, i) for i, d in enumerate(hits)], budget)}
    result = run(False)
    kept = list(result.filtered.kept) if result.filtered is not None else []
    out["kept"] = fit_context(kept, budget)
    out["kept_best_first"] = fit_context(best_first(kept), budget)
    every = [c for h in run(True).hits for c in h.kept]
    room = sum(len(c.text) for c in out["kept"][0])
    chosen = by_cosine_within(every, [c.stage_scores.get("cosine", 0.0) for c in every], room)
    out["cosine"] = (chosen, False)  # chosen within the room, never cut
    out["gold_hit"] = cut_to_budget([whole_chunk(gold, 0)], budget)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--hits", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"among {', '.join(ROWS)}")
    parser.add_argument("--minutes", type=float, default=None, help="take no new question after this long")
    parser.add_argument("--cache", default="/work/runs/post_search_answers.sqlite", help="the generation cache")
    parser.add_argument("--out", default="post_search_answers", help="the result's name under bench/results/")
    parser.add_argument(
        "--contexts-only",
        action="store_true",
        help="no model call: whether each row's context holds the answer, added to the result as 'contexts'",
    )
    args = parser.parse_args()
    rows = tuple(r.strip() for r in args.rows.split(",") if r.strip())
    if REFERENCE not in rows or not set(rows) <= set(ROWS):
        parser.error(f"--rows: among {', '.join(ROWS)}, with {REFERENCE}")

    from chunkrag_core.providers import make_chat, make_embedder
    from chunkrag_core.settings import Settings
    from local_services.llm_server import DEFAULT_CTX
    from search_extension.options import parse_options
    from search_extension.passages import QueryTimePassages
    from search_extension.post_search import post_search
    from search_extension.text_fields import TextFields

    started = time.monotonic()
    started_utc = time.strftime("%H:%M UTC", time.gmtime())
    settings = Settings.from_env()
    embedder = make_embedder(settings.embedder)
    chat = MeteredChat(make_chat(settings.chat), GenerationCache(args.cache), settings.chat.model)
    default = parse_options({}, surface="search")
    budget = context_budget_chars(DEFAULT_CTX, ANSWER_MAX_TOKENS)
    shared = QueryTimePassages(embedder, settings)
    docs = documents(args.seed)
    meta = {
        "model": settings.chat.model,
        "filter": "shipped default for a search client (calibrated, no model call), passages from the warm cache",
        "context_tokens": DEFAULT_CTX,
        "context_budget_chars": budget,
        "answer_max_tokens": ANSWER_MAX_TOKENS,
        "grading": "a gold answer as a case-insensitive substring of the answer",
        "hit_order": "the cluster's: the gold document among random others in a random order",
        "started": started_utc,
        "load_1m_before": round(os.getloadavg()[0], 2),
    }
    questions: list[dict[str, Any]] = []
    in_context: list[dict[str, Any]] = []
    stopped_by_time = False
    for n, (gold, question, answers, hits) in enumerate(queries(docs, args.seed, args.hits, args.queries)):
        if args.minutes is not None and time.monotonic() - started > args.minutes * 60:
            stopped_by_time = True
            break
        response = cluster_response("bench", hits)

        def run(every: bool):
            options = default.post_search
            if every:  # every passage of every hit, unfiltered, with its cosine
                options = dataclasses.replace(options, stages=False, max_passages=10**6)
            return post_search(
                response,
                query=question,
                options=options,
                filter_options=default.filter,
                fields_of=lambda index: TextFields(("body",), "title"),
                passage_source=shared,
                embedder=embedder,
            )

        run(False)  # the hits' documents into the shared cache: the warm path below
        item_id = f"q{n}"
        record: dict[str, Any] = {
            "id": item_id,
            "question": question,
            "answers": answers,
            "gold_position": hits.index(gold),
            "hit_words": sum(len(d["body"].split()) for d in hits),
            "rows": {},
        }
        built = contexts(question, gold, hits, run, budget)
        if args.contexts_only:
            in_context.append(
                {
                    row: {
                        "answer_in_context": answer_in_context(" ".join(c.text for c in context), answers),
                        "context_chars": sum(len(c.text) for c in context),
                        "cut": cut,
                    }
                    for row, (context, cut) in built.items()
                    if row in rows
                }
            )
            continue
        for row, (context, cut) in built.items():
            if row not in rows:
                continue
            outcome = answer(question, answers, item_id, row, context, cut, chat)
            record["rows"][row] = {
                "outcome": outcome,
                "answer_in_context": answer_in_context(" ".join(c.text for c in context), answers),
            }
            print(
                f"[{item_id}] {row}: {outcome.prompt_tokens} tokens, {outcome.seconds:.1f} s, "
                f"{'right' if outcome.correct else 'wrong'}: {outcome.text[:80]!r}",
                flush=True,
            )
        questions.append(record)
        _write(args.out, rows, questions, meta, stopped_by_time)
    if args.contexts_only:
        figures = context_figures(in_context, rows)
        merge_result(
            args.out,
            "bench.post_search_answers",
            "contexts",
            {**meta, "stopped_by_time": stopped_by_time, "load_1m_after": round(os.getloadavg()[0], 2)},
            "contexts_summary",
            figures,
        )
        print(json.dumps(figures, indent=1))
        return
    _write(args.out, rows, questions, meta, stopped_by_time)
    print(json.dumps(summary_of(questions, rows), indent=1))


def _write(out: str, rows, questions: list[dict[str, Any]], meta: dict[str, Any], stopped_by_time: bool) -> None:
    def plain(q: dict[str, Any]) -> dict[str, Any]:
        return {
            **{k: v for k, v in q.items() if k != "rows"},
            "rows": {
                row: {
                    "answer": cell["outcome"].text,
                    "right": cell["outcome"].correct,
                    "answer_in_context": cell["answer_in_context"],
                    "prompt_tokens": cell["outcome"].prompt_tokens,
                    "context_chars": cell["outcome"].context_chars,
                    "passages": cell["outcome"].chunks,
                    "cut": cell["outcome"].context_cut,
                    "seconds": cell["outcome"].seconds,
                }
                for row, cell in q["rows"].items()
            },
        }

    write_result(
        out,
        "bench.post_search_answers",
        {
            **meta,
            "written": time.strftime("%H:%M UTC", time.gmtime()),
            "load_1m_at_write": round(os.getloadavg()[0], 2),
            "stopped_by_time": stopped_by_time,
            "summary": summary_of(questions, rows),
            "questions": [plain(q) for q in questions],
        },
    )


if __name__ == "__main__":
    main()
