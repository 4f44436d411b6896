"""Figures of an evaluation run (matplotlib is imported only here).

- ``kept_vs_threshold.png``: with a threshold chosen per question, that
  threshold and the share of chunks kept (the ChunkRAG paper's Figure 3);
  with one fixed cut, the score distributions of chunks with and without a
  gold answer (all chunks where the set has no answer strings) and the cut.
  Either says in how many questions no chunk passed and the top-k fallback
  kept chunks.
- ``scores_by_gold.png``: the combined scores of chunks holding a gold
  answer against the others: how well the filter's score separates them.
- ``context_budget.png``: the answer-in-context rate of the filter and of
  every baseline (baselines.py), each labelled with its characters and the
  McNemar p against the filter.
- ``answers_vs_chars.png``: answers kept against characters kept, the
  curves of the swept baselines and the points of what ran once.
- ``accuracy.png`` (with --generate): the generated answers' accuracy, the
  filter's and, with --generate-baselines, all retrieved chunks'.

A set without gold answer strings (PubHealth, Biography) gets only the
figures that apply; what is not drawn is said through ``on_note``.

Each title names the filter that actually ran (:func:`method_title`), from
the options the run recorded: a run whose judge was off is titled by its
retrieval signals, not by the judging method it would have used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from chunkrag_eval import baselines as baseline_measures
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


def fallback_note(report: EvalReport, options: Mapping[str, Any] | None) -> str:
    """In how many questions no chunk passed and the top-k fallback kept
    chunks, in words."""
    used = sum(q.fallback for q in report.questions)
    k = (options or {}).get("fallback_k", 3)
    if not used:
        return f"the top-{k} fallback never ran"
    return f"top-{k} fallback kept chunks in {used} of {len(report.questions)} questions (none passed the cut)"


def fixed_cut(report: EvalReport, options: Mapping[str, Any] | None) -> float | None:
    """The one cut every question was filtered at, when there was one."""
    if options and options.get("threshold") == "fixed" and options.get("fixed_threshold") is not None:
        return float(options["fixed_threshold"])
    if options and options.get("threshold") not in (None, "fixed"):
        return None
    values = {q.threshold for q in report.questions if q.threshold is not None}
    return values.pop() if len(values) == 1 else None


def write_plots(
    report: EvalReport,
    folder: str | Path,
    label: str = "",
    options: Mapping[str, Any] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    title = plot_title(report, label, options)
    note = on_note or (lambda _: None)
    written = []
    has_gold = any(q.answer_in_context_before is not None for q in report.questions)
    scored = [(s, g) for q in report.questions for s, g in _scores_and_gold(q) if s is not None]
    bins = [i / 20 for i in range(21)]

    cut = fixed_cut(report, options)
    fallback = fallback_note(report, options)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    if cut is not None:
        # Finer bins than the other figures: the cut sits low, among most chunks.
        fine = [i / 40 for i in range(41)]
        groups = (
            [
                ("chunks holding a gold answer", [s for s, g in scored if g]),
                ("chunks without one", [s for s, g in scored if not g]),
            ]
            if has_gold
            else [("all chunks (no answer strings in this set)", [s for s, _ in scored])]
        )
        for name, values in groups:
            above = sum(v >= cut for v in values)
            ax.hist(values, bins=fine, alpha=0.6, label=f"{name}: {above} of {len(values)} at or above the cut")
        ax.axvline(cut, color="black", linestyle="--", label=f"cut at {cut:g}")
        ax.set_xlabel("combined score")
        ax.set_ylabel("chunks (log scale)")
        ax.set_yscale("symlog")
        ax.legend(fontsize=8)
        ax.set_title(f"Chunk scores against the cut\n{title}\n{fallback}", fontsize=9)
    else:
        questions = [q for q in report.questions if q.threshold is not None and q.candidates]
        fallback_ids = {q.item_id for q in questions if q.fallback}
        for used, marker, name in (
            (False, "o", "a question: chunks passed"),
            (True, "x", "a question: none passed, the top-k fallback kept chunks"),
        ):
            chosen = [q for q in questions if (q.item_id in fallback_ids) == used]
            if chosen:
                ax.scatter(
                    [q.threshold for q in chosen],
                    [q.kept / q.candidates for q in chosen],
                    s=14,
                    alpha=0.7,
                    marker=marker,
                    label=name,
                )
        if questions:
            ax.legend(fontsize=8)
        ax.set_xlabel("threshold chosen")
        ax.set_ylabel("share of chunks kept")
        ax.set_title(f"Chunks kept against the threshold\n{title}\n{fallback}", fontsize=9)
        ax.set_ylim(0, 1.05)
    written.append(_save(fig, folder / "kept_vs_threshold.png"))

    if not has_gold:
        if report.questions:
            note(
                f"{report.dataset} has no gold answer strings: scores_by_gold.png, context_budget.png and "
                "answers_vs_chars.png are not drawn"
            )
    elif scored:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.hist([s for s, g in scored if g], bins=bins, alpha=0.6, density=True, label="holds a gold answer")
        ax.hist([s for s, g in scored if not g], bins=bins, alpha=0.6, density=True, label="does not")
        if cut is not None:
            ax.axvline(cut, color="black", linestyle="--", label=f"cut at {cut:g}")
        ax.set_xlabel("combined score")
        ax.set_ylabel("density")
        ax.legend()
        ax.set_title(f"Scores of chunks with and without a gold answer\n{title}", fontsize=10)
        written.append(_save(fig, folder / "scores_by_gold.png"))

    summary = report.summary() if report.questions else {}
    if has_gold and summary.get("answer_in_context_after") is not None:
        written.append(_context_budget(plt, summary, folder, title))
        curves = baseline_measures.curves(report.questions)
        if curves:
            written.append(_answers_vs_chars(plt, curves, baseline_measures.points(report.questions), folder, title))
        else:
            note("answers_vs_chars.png is not drawn: the run recorded no per-candidate cosine and BM25")

    graded = [q for q in report.questions if q.correct is not None]
    if graded:
        written.append(_accuracy(plt, report, folder, title))
    return written


def _scores_and_gold(q) -> list[tuple[float | None, bool]]:
    gold = q.gold if len(q.gold) == len(q.scores) else (False,) * len(q.scores)
    return list(zip(q.scores, gold))


def _context_budget(plt, summary: Mapping[str, Any], folder: Path, title: str) -> Path:
    share = summary["context_chars_kept_share"]
    labels = [f"filter ({share:.0%} of chars)"]
    values = [summary["answer_in_context_after"]]
    for entry in summary.get("baselines", {}).values():
        if entry.get("answer_in_context") is None:
            continue
        b, c = entry["discordant"]
        labels.append(
            f"{entry['what']}\n({entry['context_chars_kept_share']:.0%} of chars; "
            f"{b} vs {c}, p = {entry['p_vs_filter']:.2g})"
        )
        values.append(entry["answer_in_context"])
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(labels) + 1.6))
    positions = list(range(len(labels)))[::-1]
    ax.barh(positions, values, color=["tab:red"] + ["tab:blue"] * (len(values) - 1))
    for y, v in zip(positions, values):
        ax.text(v + 0.01, y, f"{v:.3f}", va="center", fontsize=8)
    ax.set_yticks(positions, labels, fontsize=7)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel("answer-in-context rate (a kept chunk holds a gold answer)")
    ax.set_title(
        f"Answer in context: the filter and its baselines\n{title}\n"
        "(n vs m: questions only the filter / only the baseline kept; exact McNemar p)",
        fontsize=9,
    )
    return _save(fig, folder / "context_budget.png")


# One colour per method family, so a baseline's curve and its point match.
COLOURS = {
    "filter": "tab:red",
    "filter, its score cut swept": "tab:red",
    "cosine_one_cut_for_set": "tab:purple",
    "cosine_fixed_share": "tab:blue",
    "cosine_same_chars_per_question": "tab:blue",
    "bm25_fixed_share": "tab:olive",
    "bm25_same_chars_per_question": "tab:olive",
    "all_retrieved": "black",
}


def _answers_vs_chars(plt, curves, points, folder: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, curve in curves.items():
        ax.plot(
            [c for c, _ in curve],
            [k for _, k in curve],
            marker=".",
            linewidth=1.2,
            linestyle="--" if name.startswith("filter") else "-",
            color=COLOURS.get(name),
            label=baseline_measures.BASELINES.get(name, name),
        )
    markers = {"filter": "*", "cosine_same_chars_per_question": "s", "bm25_same_chars_per_question": "D"}
    for name, (chars, kept) in points.items():
        ax.scatter(
            [chars],
            [kept],
            marker=markers.get(name, "o"),
            s=160 if name == "filter" else 50,
            zorder=3,
            color=COLOURS.get(name),
            edgecolors="black",
            label=("filter as run" if name == "filter" else baseline_measures.BASELINES.get(name, name)),
        )
    ax.set_xlabel("characters kept (share of the set's candidates)")
    ax.set_ylabel("answers kept (share of questions whose pool held one)")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"Answers kept against characters kept\n{title}", fontsize=9)
    return _save(fig, folder / "answers_vs_chars.png")


def _accuracy(plt, report: EvalReport, folder: Path, title: str) -> Path:
    graded = [q for q in report.questions if q.correct is not None]
    labels, values = [f"filter ({len(graded)} graded)"], [sum(q.correct for q in graded) / len(graded)]
    summary_all = baseline_measures.baselines_summary(report.questions).get("all_retrieved", {})
    if summary_all.get("accuracy") is not None:
        b, c = summary_all["accuracy_discordant"]
        labels.append(
            f"all retrieved chunks ({summary_all['accuracy_graded']} graded;\n"
            f"{b} vs {c}, p = {summary_all['accuracy_p_vs_filter']:.2g})"
        )
        values.append(summary_all["accuracy"])
    fig, ax = plt.subplots(figsize=(6, 1.0 * len(labels) + 1.6))
    positions = list(range(len(labels)))[::-1]
    ax.barh(positions, values, color=["tab:red"] + ["tab:blue"] * (len(values) - 1))
    for y, v in zip(positions, values):
        ax.text(v + 0.01, y, f"{v:.3f}", va="center", fontsize=8)
    ax.set_yticks(positions, labels, fontsize=8)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel("accuracy of the generated answers")
    ax.set_title(f"Answer accuracy\n{title}", fontsize=9)
    return _save(fig, folder / "accuracy.png")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
