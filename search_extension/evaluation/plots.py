"""Figures of an evaluation run (matplotlib is imported only here).

- ``kept_vs_threshold.png``: per question, the threshold chosen and the
  share of chunks kept, as in the ChunkRAG paper's Figure 3.
- ``scores_by_gold.png``: the combined scores of chunks holding a gold
  answer against the others: how well the judge separates them.
- ``context_budget.png``: answer-in-context rate after filtering against
  the share of characters kept, filter and cosine baseline side by side.
"""

from __future__ import annotations

from pathlib import Path

from search_extension.evaluation.runner import EvalReport


def write_plots(report: EvalReport, folder: str | Path, label: str = "") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    title = f"{report.dataset} ({len(report.questions)} questions){' - ' + label if label else ''}"
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
        ax.set_title(f"Judge scores by gold\n{title}", fontsize=10)
        written.append(_save(fig, folder / "scores_by_gold.png"))

    graded = [q for q in report.questions if q.answer_in_context_after is not None and q.chars_before]
    if graded:
        summary = report.summary()
        fig, ax = plt.subplots(figsize=(6, 4))
        share = summary["context_chars_kept_share"]
        ax.bar(["before", "filter", "cosine baseline"], [summary["answer_in_context_before"], summary["answer_in_context_after"], summary["baseline_cosine_answer_in_context_after"]])
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
