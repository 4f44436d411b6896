"""Scoring filters side by side on the same retrieved documents
(``python -m bench.frameworks_bench``; ``chunkrag_adapters.comparison`` runs
the frameworks' rows).

Per row: answers kept (a gold answer in the kept text, PopQA's rule:
``measures.answer_in_context``), characters kept, model calls and seconds,
paired with the reference row (exact McNemar). Each framework row is also
paired with the chunk filter given the same characters per question (its
calibrated scores, best first, within the row's characters:
``measures.kept_within_budget``), and with cosine given them. A cosine
row's rule threshold is the shipped cut's rule (``answer_table.choose_cut``):
the highest candidate within one point of all retrieved and not
significantly below it, here on answers kept since no model answers.
"""

from __future__ import annotations

from typing import Any

from chunkrag_eval.answer_table import choose_cut, cut_row, discordant, mcnemar_exact
from chunkrag_eval.measures import answer_in_context, kept_within_budget

# The cosine thresholds the rule chooses among (EmbeddingsFilter keeps a
# document whose cosine is above t; SimilarityPostprocessor one at or above).
COSINE_CANDIDATES = tuple(round(0.10 + 0.05 * i, 2) for i in range(11))
# The reference row and the chunk filter's ranking for "at the same characters".
REFERENCE, RANKING = "all", "chunkrag_default"


def choose_threshold(items, docs, kind: str) -> dict[str, Any]:
    """The rule's cosine threshold for ``kind`` on these questions; ``docs``
    holds each question's (text, cosine) pairs."""
    above = (lambda s, t: s > t) if kind == "embeddings_filter" else (lambda s, t: s >= t)
    reference = [answer_in_context("\n\n".join(x for x, _ in d), item.answers) for item, d in zip(items, docs)]
    rows = {"rag": reference}
    for t in COSINE_CANDIDATES:
        rows[cut_row(t)] = [
            answer_in_context("\n\n".join(x for x, s in d if above(s, t)), item.answers) for item, d in zip(items, docs)
        ]
    choice = choose_cut({"popqa": rows}, COSINE_CANDIDATES)
    return {"threshold": choice.cut, "held": choice.held, "holding": list(choice.holding)}


def summarise(items, outcomes: dict[str, list], docs, scores) -> dict[str, Any]:
    """The table over ``items``: ``outcomes`` maps a row name to its per-question
    outcomes (``kept_text``, ``chars``, ``calls``, ``seconds``, ``failed``);
    ``scores`` holds the chunk filter's score of each document."""
    n = len(items)
    reference = [answer_in_context(o.kept_text, i.answers) for o, i in zip(outcomes[REFERENCE], items)]
    all_chars = sum(o.chars for o in outcomes[REFERENCE]) or 1
    table = {}
    for name, per in outcomes.items():
        per = per[:n]
        kept = [answer_in_context(o.kept_text, i.answers) for o, i in zip(per, items)]
        only_all, only_row = discordant(reference, kept)
        entry = {
            "answers_kept": round(sum(kept) / n, 4),
            "chars_share": round(sum(o.chars for o in per) / all_chars, 4),
            "chars_per_question": round(sum(o.chars for o in per) / n, 1),
            "model_calls": sum(o.calls for o in per),
            "seconds": round(sum(o.seconds for o in per), 2),
            "failed_questions": sum(o.failed for o in per),
            "vs_all": {
                "right_only_all": only_all,
                "right_only_row": only_row,
                "p": round(mcnemar_exact(only_all, only_row), 4),
            },
        }
        if name not in (REFERENCE, RANKING) and not name.startswith("chunkrag"):
            same, cosine = [], []
            for o, item, d, s in zip(per, items, docs, scores):
                texts = [x for x, _ in d]
                ours = kept_within_budget(texts, s, o.chars)
                theirs = kept_within_budget(texts, [c for _, c in d], o.chars)
                same.append(answer_in_context("\n\n".join(texts[i] for i in ours), item.answers))
                cosine.append(answer_in_context("\n\n".join(texts[i] for i in theirs), item.answers))
            b, c = discordant(kept, same)
            entry["chunkrag_at_same_chars"] = {
                "answers_kept": round(sum(same) / n, 4),
                "right_only_row": b,
                "right_only_chunkrag": c,
                "p": round(mcnemar_exact(b, c), 4),
            }
            entry["cosine_at_same_chars"] = round(sum(cosine) / n, 4)
        table[name] = entry
    return {"questions": n, "with_answer_in_pool": sum(reference), "rows": table}
