"""The markdown tables of bench/REPORT.md from results/filter_loo.json.

python -m bench.filter_loo_tables
"""

from __future__ import annotations

import json
import sys

from bench.common import RESULTS

SETS = ("popqa", "nq", "squad", "scifact", "wikiqa", "healthver", "climate_fever")


def f(value, pct: bool = False) -> str:
    if value is None:
        return "never"
    return f"{value:.1%}" if pct else f"{value:.3f}"


def tables(payload) -> str:
    c, sets = payload["candidates"], payload["sets"]
    lines = [
        "| held-out set (questions) | cosine | BM25 | A | B | C | cosine | BM25 | A | B | C |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in SETS:
        row = [f"{s} ({sets[s]['questions']})"]
        row += [f(sets[s]["cosine"]["kept_at_25"]), f(sets[s]["bm25"]["kept_at_25"])]
        row += [f(c[k]["held_out"][s]["kept_at_25"]) for k in "ABC"]
        row += [f(sets[s]["cosine"]["chars_for_90"], True), f(sets[s]["bm25"]["chars_for_90"], True)]
        row += [f(c[k]["held_out"][s]["chars_for_90"], True) for k in "ABC"]
        lines.append("| " + " | ".join(row) + " |")
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    row = [
        "**mean**",
        f(mean([sets[s]["cosine"]["kept_at_25"] for s in SETS])),
        f(mean([sets[s]["bm25"]["kept_at_25"] for s in SETS])),
    ]
    row += [f(c[k]["mean"]["kept_at_25"]) for k in "ABC"]
    row += ["", "", "", "", ""]
    lines.append("| " + " | ".join(row) + " |")
    chosen = payload["chosen"]["key"]
    lines += [
        "",
        f"The default cut of {chosen} on each held-out set (cut chosen on the other six):",
        "",
        "| held-out set | cut | characters kept | answer kept | cosine, same per-question characters | "
        "cosine, same total characters | characters cosine needs for the same answer kept | "
        "'nothing relevant' rate | its precision | answer kept with the top-3 fallback |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in SETS:
        d = c[chosen]["held_out"][s]["default"]
        lines.append(
            f"| {s} | {d['cut']} | {f(d['chars'], True)} | {f(d['kept'])} | {f(d['cosine_same_budgets'])} | "
            f"{f(d['cosine_same_chars'])} | {f(d['cosine_chars_for_same_kept'], True)} | "
            f"{f(d['nothing_relevant_rate'], True)} | {f(d['nothing_relevant_precision']).replace('never', '–')} | "
            f"{f(d['kept_with_top3_fallback'])} |"
        )
    m = c[chosen]["mean"]["default"]
    lines.append(
        f"| **mean** | | {f(m['chars'], True)} | {f(m['kept'])} | {f(m['cosine_same_budgets'])} | "
        f"{f(m['cosine_same_chars'])} | | | | |"
    )
    lines += [
        "",
        "| model | mean answer kept at 25% | mean chunk AUC | mean default: answer kept | characters |",
        "|---|---|---|---|---|",
    ]
    for key, res in {**c, **payload["references"]}.items():
        if "mean" in res:
            lines.append(
                f"| {key}: {res['label']} | {f(res['mean']['kept_at_25'])} | {f(res['mean']['chunk_auc'])} | "
                f"{f(res['mean']['default']['kept'])} | {f(res['mean']['default']['chars'], True)} |"
            )
    prev = payload["references"]["shipped_2026_11_23"]["held_out"]
    lines += [
        "",
        "The model shipped before (PopQA dev only, cut 0.4), on every set:",
        "",
        "| set | answer kept at 25% | characters for 0.90 | at 0.4: answer kept | characters |",
        "|---|---|---|---|---|",
    ]
    for s in SETS:
        lines.append(
            f"| {s} | {f(prev[s]['kept_at_25'])} | {f(prev[s]['chars_for_90'], True)} | "
            f"{f(prev[s]['default']['kept'])} | {f(prev[s]['default']['chars'], True)} |"
        )
    ex = payload["context_expansion"]["sets"]
    lines += [
        "",
        "| set | cosine at 25% | more chunks at 25% | neighbours at 25% | more chunks: chars for 0.90 | "
        "neighbours: chars for 0.90 |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETS:
        e = ex[s]
        lines.append(
            f"| {s} | {f(e['cosine_kept_at_25'])} | {f(e['more chunks']['kept_at_25'])} | "
            f"{f(e['neighbours']['kept_at_25'])} | {f(e['more chunks']['chars_for_90'], True)} | "
            f"{f(e['neighbours']['chars_for_90'], True)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(tables(json.loads((RESULTS / "filter_loo.json").read_text())))
    sys.exit(0)
