"""Can the configured chat model grade a biography? Its support verdicts
checked against human labels first.

    python -m bench.grader_check [--per-class 50]

The answer table's Biography column (`chunkrag table`) asks the configured
model, for each atomic fact of an answer, whether the retrieved passages
support it (`answer_table.SUPPORT_PROMPT`, `parse_support`). Before that
column can mean anything the verdicts must be right where the truth is
known. HealthVer (`shared/eval/healthver/healthver_dev.csv`) labels
claim-evidence pairs Supports, Refutes or Neutral; the same prompt asks
about each claim with its evidence as the only passage:

- `supports`: labelled Supports, the answer should be True;
- `refutes`, `neutral`: labelled so, the answer should be False;
- `unrelated`: a Supports claim with the evidence of a claim on another
  topic, the answer should be False: this is the invented fact, a
  statement the passage does not mention.

The first ``--per-class`` pairs of each class in file order (the
`unrelated` ones pair the `supports` claims with evidence shifted by one
topic). Results: `bench/results/grader_check.json` with every verdict.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

from bench.common import SHARED, write_result

HEALTHVER = SHARED / "eval" / "healthver" / "healthver_dev.csv"
CLASSES = ("supports", "refutes", "neutral", "unrelated")
EXPECTED = {"supports": True, "refutes": False, "neutral": False, "unrelated": False}


def pairs(rows: list[dict], per_class: int) -> list[tuple[str, str, str]]:
    """(class, claim, evidence), ``per_class`` of each class."""
    by_label: dict[str, list[dict]] = {"Supports": [], "Refutes": [], "Neutral": []}
    for row in rows:
        if row["label"] in by_label and len(by_label[row["label"]]) < per_class:
            by_label[row["label"]].append(row)
    chosen = [("supports", r["claim"], r["evidence"]) for r in by_label["Supports"]]
    chosen += [("refutes", r["claim"], r["evidence"]) for r in by_label["Refutes"]]
    chosen += [("neutral", r["claim"], r["evidence"]) for r in by_label["Neutral"]]
    supports = by_label["Supports"]
    for i, row in enumerate(supports):
        other = next(
            (o for o in supports[i + 1 :] + supports[:i] if o["topic_ip"] != row["topic_ip"]),
            None,
        )
        if other is not None:
            chosen.append(("unrelated", row["claim"], other["evidence"]))
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=50)
    args = parser.parse_args(argv)

    from chunkrag_core.providers import make_chat
    from chunkrag_core.providers.chat import ChatRequest, Message
    from chunkrag_core.settings import Settings
    from chunkrag_eval.answer_table import SUPPORT_MAX_TOKENS, SUPPORT_PROMPT, parse_support

    settings = Settings.from_env()
    chat = make_chat(settings.chat)
    with HEALTHVER.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    verdicts = []
    started = time.perf_counter()
    for kind, claim, evidence in pairs(rows, args.per_class):
        passages = " ".join(evidence.split())
        response = chat.complete(
            ChatRequest(
                messages=(Message("user", SUPPORT_PROMPT.format(passages=passages, fact=claim)),),
                max_tokens=SUPPORT_MAX_TOKENS,
            )
        )
        verdicts.append(
            {"class": kind, "claim": claim, "said": response.text.strip(), "true": parse_support(response.text)}
        )
    seconds = time.perf_counter() - started
    by_class = {}
    for kind in CLASSES:
        said = [v["true"] for v in verdicts if v["class"] == kind]
        by_class[kind] = {
            "n": len(said),
            "said_true": sum(said),
            "right": sum(s == EXPECTED[kind] for s in said),
            "right_share": round(sum(s == EXPECTED[kind] for s in said) / len(said), 3) if said else None,
        }
    negatives = [v for v in verdicts if not EXPECTED[v["class"]]]
    summary = {
        "model": settings.chat.model,
        "base_url_is_local": settings.chat.base_url.startswith(("http://127.0.0.1", "http://localhost")),
        "by_class": by_class,
        "true_positive_rate": by_class["supports"]["right_share"],
        "false_positive_rate": round(sum(v["true"] for v in negatives) / len(negatives), 3) if negatives else None,
        "balanced_accuracy": round(
            (by_class["supports"]["right_share"] + sum(not v["true"] for v in negatives) / len(negatives)) / 2, 3
        )
        if negatives and by_class["supports"]["n"]
        else None,
        "seconds": round(seconds, 1),
    }
    print(json.dumps(summary, indent=2))
    payload = {
        "dataset": "shared/eval/healthver/healthver_dev.csv",
        "prompt": "chunkrag_eval.answer_table.SUPPORT_PROMPT, parse_support (the Biography column's grader)",
        "load_average_end": round(os.getloadavg()[0], 2),
        "summary": summary,
        "verdicts": verdicts,
    }
    print(write_result("grader_check", "bench.grader_check", payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
