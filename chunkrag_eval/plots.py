"""Figures of an evaluation run (matplotlib is imported only here).

- ``kept_vs_threshold.png``: per question, the threshold chosen and the
  share of chunks kept, as in the ChunkRAG paper's Figure 3.
- ``scores_by_gold.png``: the combined scores of chunks holding a gold
  answer against the others: how well the filter's score separates them.
- ``context_budget.png``: answer-in-context rate after filtering against
  the share of characters kept, filter and cosine baseline side by side.

Each title names the filter that actually ran (:func:`method_title`), from
the options the run recorded: a run whose judge was off is titled by its
retrieval signals, not by the judging method it would have used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from chunkrag_eval.runner import EvalReport

THRESHOLD_NAMES = {
    "dynamic": "Algorithm 1 threshold",
    "algorithm1": "Algorithm 1 threshold",
    "llm": "LLM-chosen threshold",
}


def method_title(options: Mapping[str, Any] | None) -> str:
    """The filter a run used, in words, from its recorded options.

    Two shapes are read: the ``options`` of ``chunkrag eval`` (``judge_top``:
    0 means no judge, None every candidate, N the best N; ``calibrated``) and
    those of ``bench/judge_study.py collect`` (``judge``: ``none`` or
    ``cascade`` / ``study`` with ``head`` candidates judged). "" when nothing
    was recorded (runs older than the options block)."""
    if not options:
        return ""
    method = options.get("method") or "listwise"
    if "judge_top" in options:
        top = options["judge_top"]
        judged = top != 0
        scope = "every candidate" if top is None else f"best {top}"
    elif "judge" in options and options["judge"] in ("none", "cascade", "study"):
        judged = options["judge"] != "none"
        scope = (
            f"best {options['head']}" if options["judge"] == "cascade" and options.get("head") else "every candidate"
        )
    else:
        # Runs that recorded only the method judged every candidate with it.
        judged, scope = True, ""
    if judged:
        parts = [f"LLM judge, {method}" + (f" ({scope})" if scope else "")]
        if (options.get("orders") or options.get("head_orders") or 1) >= 2:
            parts.append("both orders")
    else:
        parts = ["retrieval signals (no judge)"]
    if options.get("calibrated"):
        parts.append("calibrated")
    if options.get("prior_weight"):
        parts.append(f"prior weight {options['prior_weight']}")
    threshold = options.get("threshold")
    if threshold == "fixed":
        parts.append(f"cut at {options.get('fixed_threshold', 0.4)}")
    elif threshold == "relative":
        parts.append(f"cut at {options.get('fixed_threshold', 0.5)} of the best")
    elif threshold:
        parts.append(THRESHOLD_NAMES.get(threshold, f"{threshold} threshold"))
    return ", ".join(parts)


def plot_title(report: EvalReport, label: str = "", options: Mapping[str, Any] | None = None) -> str:
    """The lines under every figure's heading: the data set, its size and
    the caller's label (a result name, say), then the filter that ran."""
    lines = [f"{report.dataset} ({len(report.questions)} questions){' - ' + label if label else ''}"]
    method = method_title(options)
    if method:
        lines.append(method)
    return "\n".join(lines)


def write_plots(
    report: EvalReport, folder: str | Path, label: str = "", options: Mapping[str, Any] | None = None
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    title = plot_title(report, label, options)
    written = []

    questions = [q for q in report.questions if q.threshold is not None and q.candidates]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([q.threshold for q in questions], [q.kept / q.candidates for q in questions], s=14, alpha=0.7)
    ax.set_xlabel("threshold chosen")
    ax.set_ylabel("share of chunks kept")
    ax.set_title(f"Chunks kept against the threshold\n{title}", fontsize=10)
    ax.set_ylim(0, 1.05)
    written.append(_save(fig, folder / "kept_vs_threshold.png"))

    pairs = [(s, g) for q in report.questions for s, g in zip(q.scores, q.gold) if s is not None]
    if pairs:
        fig, ax = plt.subplots(figsize=(6, 4))
        bins = [i / 20 for i in range(21)]
        ax.hist([s for s, g in pairs if g], bins=bins, alpha=0.6, density=True, label="holds a gold answer")
        ax.hist([s for s, g in pairs if not g], bins=bins, alpha=0.6, density=True, label="does not")
        ax.set_xlabel("combined score")
        ax.set_ylabel("density")
        ax.legend()
        ax.set_title(f"Scores of chunks with and without a gold answer\n{title}", fontsize=10)
        written.append(_save(fig, folder / "scores_by_gold.png"))

    graded = [q for q in report.questions if q.answer_in_context_after is not None and q.chars_before]
    if graded:
        summary = report.summary()
        fig, ax = plt.subplots(figsize=(6, 4))
        share = summary["context_chars_kept_share"]
        ax.bar(
            ["before", "filter", "cosine baseline"],
            [
                summary["answer_in_context_before"],
                summary["answer_in_context_after"],
                summary["baseline_cosine_answer_in_context_after"],
            ],
        )
        ax.set_ylabel("answer-in-context rate")
        ax.set_ylim(0, 1)
        ax.set_title(f"Answer in context at {share:.0%} of the characters\n{title}", fontsize=10)
        written.append(_save(fig, folder / "context_budget.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
