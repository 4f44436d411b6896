"""Writing an evaluation run: one line per question while it runs, and a
JSON file with the summary and every question's outcome."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TextIO

from chunkrag_eval.runner import EvalReport, QuestionOutcome


def print_outcome(outcome: QuestionOutcome, out: TextIO) -> None:
    flags = ""
    if outcome.answer_in_context_before is not None:
        flags = (
            f" answer in context {_mark(outcome.answer_in_context_before)}->{_mark(outcome.answer_in_context_after)}"
            f" (cosine at the same chars {_mark(outcome.baseline_answer_in_context_after)})"
        )
    if outcome.correct is not None:
        flags += f" generated {'right' if outcome.correct else 'wrong'}"
    if outcome.all_retrieved_correct is not None:
        flags += f" (all retrieved {'right' if outcome.all_retrieved_correct else 'wrong'})"
    if outcome.fallback:
        flags += " [nothing passed: top-k fallback]"
    print(
        f"[{outcome.item_id}] kept {outcome.kept}/{outcome.candidates} chunks, "
        f"{outcome.chars_after}/{outcome.chars_before} chars, {outcome.model_calls} calls, "
        f"{outcome.seconds:.1f}s{flags}",
        file=out,
        flush=True,
    )


def format_baselines(summary: dict[str, Any]) -> str:
    """The baselines block of a summary as lines a reader can scan: each
    baseline named, its answer-in-context rate and characters against the
    filter's, the discordant questions and the exact McNemar p."""
    lines, accuracy = [], []
    if summary.get("answer_in_context_after") is not None:
        lines.append(
            f"answer in context, filter: {summary['answer_in_context_after']:.3f} at "
            f"{summary['context_chars_kept_share']:.0%} of the characters"
        )
    for name, entry in (summary.get("baselines") or {}).items():
        if entry.get("answer_in_context") is not None:
            b, c = entry["discordant"]
            detail = ""
            if "cut" in entry:
                detail = f", cut {entry['cut']}"
            elif "share" in entry:
                detail = f", {entry['share']:.0%} of each pool"
            lines.append(
                f"  {entry['what']} [{name}{detail}]: {entry['answer_in_context']:.3f} at "
                f"{entry['context_chars_kept_share']:.0%}; filter only {b}, baseline only {c}, "
                f"p = {entry['p_vs_filter']:.3g}"
            )
        if entry.get("accuracy") is not None:
            b, c = entry["accuracy_discordant"]
            accuracy.append(
                f"accuracy, filter {entry['filter_accuracy']:.3f} against {entry['what']} {entry['accuracy']:.3f}"
                f" ({entry['accuracy_graded']} graded); filter only {b}, baseline only {c},"
                f" p = {entry['accuracy_p_vs_filter']:.3g}"
            )
    if not lines and summary.get("answer_strings") is False:
        lines.append("no gold answer strings in this set: no answer-in-context baselines")
    return "\n".join(lines + accuracy)


def write_report(path: str | Path, summary: dict[str, Any], report: EvalReport) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"summary": summary, "questions": [dataclasses.asdict(q) for q in report.questions]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def _mark(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "no")


def load_report(path: str | Path) -> EvalReport:
    """An :class:`EvalReport` back from a file :func:`write_report` wrote
    (to plot or re-summarise a finished run without running it again)."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    questions = tuple(
        QuestionOutcome(**{k: tuple(v) if isinstance(v, list) else v for k, v in q.items()})
        for q in payload["questions"]
    )
    summary = payload["summary"]
    return EvalReport(
        summary["dataset"], questions, "", summary.get("ingest_seconds", 0.0), summary.get("skipped_records", 0)
    )
