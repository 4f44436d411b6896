"""The frameworks' own chunk filters against the adapters', side by side.

    python -m bench.frameworks_bench --questions 200 --llm-questions 30

Each PopQA dev question's pool is split as a LangChain user splits text
(``RecursiveCharacterTextSplitter``, 500 characters, no overlap), the pieces
stored in LangChain's ``InMemoryVectorStore`` with the project's MiniLM
(``ChunkragEmbeddings``) and all of them retrieved by its retriever, best
first; then every row below filters the same documents. Measured per row:
answers kept (a gold answer in the kept text, PopQA's rule:
``chunkrag_eval.measures.answer_in_context``), characters kept, model calls
and seconds. Each framework row is also paired with the chunk filter given
the same characters per question (its calibrated scores, best first, within
the row's characters: ``measures.kept_within_budget``), and with cosine
given them. Rows marked ``llm`` run on the first ``--llm-questions`` only
(the local 1.5B model answers one call at a time per slot); every row is
also reported on that subset. The rule threshold of the cosine rows is the
shipped cut's rule (``answer_table.choose_cut``): the highest candidate
within one point of all retrieved and not significantly below it (exact
McNemar, p >= 0.05), here on answers kept since no model answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from bench.common import SHARED, machine

# Each row: what filters, with which settings. "rule" thresholds are chosen
# by the shipped cut's rule over COSINE_CANDIDATES on the run's questions.
ROWS: tuple[dict[str, Any], ...] = (
    {"name": "all", "kind": "none"},
    {"name": "embeddings_filter_default", "kind": "embeddings_filter", "threshold": None},
    {"name": "embeddings_filter_rule", "kind": "embeddings_filter", "threshold": "rule"},
    {"name": "similarity_postprocessor_default", "kind": "similarity_postprocessor", "cutoff": None},
    {"name": "similarity_postprocessor_rule", "kind": "similarity_postprocessor", "cutoff": "rule"},
    {"name": "llm_chain_filter", "kind": "llm_chain_filter", "llm": True},
    {"name": "chunkrag_default", "kind": "chunkrag", "options": {}, "split": False},
    {"name": "chunkrag_default_split", "kind": "chunkrag", "options": {}, "split": True},
    {"name": "chunkrag_judge", "kind": "chunkrag", "options": {"judge_top": 9}, "split": False, "llm": True},
)
# The cosine thresholds the rule chooses among (EmbeddingsFilter keeps a
# document whose cosine is above t; SimilarityPostprocessor one at or above).
COSINE_CANDIDATES = tuple(round(0.10 + 0.05 * i, 2) for i in range(11))
# How a LangChain user splits a pool: its recursive splitter's common size.
SPLIT_CHARS = 500
# The reference row and the chunk filter's ranking for "at the same characters".
REFERENCE, RANKING = "all", "chunkrag_default"


@dataclass
class Outcome:
    """One row on one question: the documents kept (by number), calls, seconds."""

    kept_text: str
    chars: int
    calls: int = 0
    seconds: float = 0.0
    failed: bool = False
    kept: list[int] = field(default_factory=list)


def read_questions(path, limit: int):
    from chunkrag_eval.datasets import read_items

    _, items, _ = read_items(path, "popqa", limit=limit)
    return items


def retrieved(items, embeddings) -> list[list[tuple[str, float]]]:
    """Each question's pool split and retrieved by LangChain's own store: (text, cosine), best first."""
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=SPLIT_CHARS, chunk_overlap=0)
    out = []
    for item in items:
        pieces = splitter.split_text(item.pool)
        store = InMemoryVectorStore(embeddings)
        store.add_texts(pieces)
        found = store.similarity_search_with_score(item.question, k=len(pieces))
        out.append([(doc.page_content, float(score)) for doc, score in found])
    return out


class CallCounter:
    """Counts the chat model calls a LangChain chain makes (a callback handler)."""

    def __new__(cls):
        from langchain_core.callbacks import BaseCallbackHandler

        class Counter(BaseCallbackHandler):
            calls = 0

            def on_chat_model_start(self, *args, **kwargs):
                self.calls += 1

            def on_llm_start(self, *args, **kwargs):
                self.calls += 1

        return Counter()


def run_row(row: dict[str, Any], question: str, docs: list[tuple[str, float]], parts: dict[str, Any], t) -> Outcome:
    """One row over one question's documents."""
    from langchain_core.documents import Document

    texts = [text for text, _ in docs]
    started = time.perf_counter()
    calls, failed = 0, False
    kind = row["kind"]
    if kind == "none":
        kept = list(range(len(texts)))
    elif kind == "embeddings_filter":
        from langchain_classic.retrievers.document_compressors import EmbeddingsFilter

        threshold = t if row["threshold"] == "rule" else row["threshold"]
        # LangChain's defaults: k=20, no threshold; with a threshold, k=None (every document above it).
        chosen = EmbeddingsFilter(
            embeddings=parts["embeddings"], similarity_fn=cosine, similarity_threshold=threshold, k=None
        )
        if threshold is None:
            chosen = EmbeddingsFilter(embeddings=parts["embeddings"], similarity_fn=cosine)
        found = chosen.compress_documents([Document(page_content=x, id=str(i)) for i, x in enumerate(texts)], question)
        kept = sorted(int(d.id) for d in found)
    elif kind == "similarity_postprocessor":
        from llama_index.core.postprocessor import SimilarityPostprocessor
        from llama_index.core.schema import NodeWithScore, TextNode

        cutoff = t if row["cutoff"] == "rule" else row["cutoff"]
        processor = SimilarityPostprocessor() if cutoff is None else SimilarityPostprocessor(similarity_cutoff=cutoff)
        nodes = [NodeWithScore(node=TextNode(text=x, id_=str(i)), score=s) for i, (x, s) in enumerate(docs)]
        kept = sorted(int(n.node.node_id) for n in processor.postprocess_nodes(nodes, query_str=question))
    elif kind == "llm_chain_filter":
        counter = CallCounter()
        try:
            found = parts["llm_chain_filter"].compress_documents(
                [Document(page_content=x, id=str(i)) for i, x in enumerate(texts)], question, callbacks=[counter]
            )
            kept = sorted(int(d.id) for d in found)
        except Exception as exc:  # an unparsable reply: LLMChainFilter raises, the user gets nothing
            print(f"llm_chain_filter failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            kept, failed = [], True
        calls = counter.calls
    elif kind == "chunkrag":
        compressor = parts[f"chunkrag:{row['name']}"]
        found = compressor.compress_documents(
            [Document(page_content=x, id=str(i)) for i, x in enumerate(texts)], question
        )
        calls = compressor.chunk_filter.last.model_calls
        if row["split"]:  # passages, not whole documents
            kept_text = "\n\n".join(d.page_content for d in found)
            chars = sum(len(d.page_content) for d in found)
            return Outcome(kept_text, chars, calls, time.perf_counter() - started)
        kept = sorted({int(d.id) for d in found})
    else:
        raise ValueError(f"unknown row kind {kind!r}")
    kept_text = "\n\n".join(texts[i] for i in kept)
    chars = sum(len(texts[i]) for i in kept)
    return Outcome(kept_text, chars, calls, time.perf_counter() - started, failed, kept)


def cosine(x, y):
    """EmbeddingsFilter's default similarity (langchain-community's
    cosine_similarity, the package it imports it from), here in numpy so the
    bench needs no langchain-community: rows of ``x`` against rows of ``y``."""
    import numpy as np

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1)[:, None] * np.linalg.norm(y, axis=1)[None, :]
    return (x @ y.T) / np.where(norms == 0, 1.0, norms)


def chunkrag_scores(compressor, question: str, texts: Sequence[str]) -> list[float]:
    """The chunk filter's calibrated score of each whole document (kept or not)."""
    filtered = compressor.chunk_filter.filter(question, list(texts))
    scores = [0.0] * len(texts)
    for passage in (*filtered.kept, *filtered.dropped):
        scores[passage.source] = passage.score or 0.0
    return scores


def choose_threshold(items, docs, kind: str) -> dict[str, Any]:
    """The rule's cosine threshold for ``kind`` on these questions."""
    from chunkrag_eval.answer_table import cut_row
    from chunkrag_eval.measures import answer_in_context

    above = (lambda s, t: s > t) if kind == "embeddings_filter" else (lambda s, t: s >= t)
    reference = [answer_in_context("\n\n".join(x for x, _ in d), item.answers) for item, d in zip(items, docs)]
    rows = {"rag": reference}
    for t in COSINE_CANDIDATES:
        rows[cut_row(t)] = [
            answer_in_context("\n\n".join(x for x, s in d if above(s, t)), item.answers) for item, d in zip(items, docs)
        ]
    from chunkrag_eval.answer_table import choose_cut

    choice = choose_cut({"popqa": rows}, COSINE_CANDIDATES)
    return {"threshold": choice.cut, "held": choice.held, "holding": list(choice.holding)}


def summarise(items, outcomes: dict[str, list[Outcome]], docs, scores) -> dict[str, Any]:
    from chunkrag_eval.answer_table import discordant, mcnemar_exact
    from chunkrag_eval.measures import answer_in_context, kept_within_budget

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED / "eval" / "popqa" / "dev.jsonl"))
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--llm-questions", type=int, default=30)
    parser.add_argument("--rows", default=",".join(r["name"] for r in ROWS), help="comma-separated row names")
    parser.add_argument("--out", default="bench/results/frameworks_popqa.json")
    args = parser.parse_args(argv)
    load_start, started = os.getloadavg(), time.time()

    from chunkrag_adapters.langchain import ChunkragCompressor, ChunkragEmbeddings
    from chunkrag_core.settings import Settings

    settings = Settings.load()
    rows = [r for r in ROWS if r["name"] in args.rows.split(",")]
    if REFERENCE not in [r["name"] for r in rows] or RANKING not in [r["name"] for r in rows]:
        raise SystemExit(f"--rows must include {REFERENCE} and {RANKING}")
    embeddings = ChunkragEmbeddings(settings=settings)
    parts: dict[str, Any] = {"embeddings": embeddings}
    for row in rows:
        if row["kind"] == "chunkrag":
            parts[f"chunkrag:{row['name']}"] = ChunkragCompressor(options=row["options"], split=row["split"])
    if any(r["kind"] == "llm_chain_filter" for r in rows):
        from langchain_classic.retrievers.document_compressors import LLMChainFilter
        from langchain_openai import ChatOpenAI

        chat = settings.chat
        llm = ChatOpenAI(base_url=chat.base_url, model=chat.model, api_key="local", temperature=0, max_tokens=16)
        parts["llm_chain_filter"] = LLMChainFilter.from_llm(llm)

    items = read_questions(args.data, args.questions)
    docs = retrieved(items, embeddings)
    thresholds = {
        kind: choose_threshold(items, docs, kind) for kind in ("embeddings_filter", "similarity_postprocessor")
    }
    ranking = parts[f"chunkrag:{RANKING}"]
    scores = [chunkrag_scores(ranking, item.question, [x for x, _ in d]) for item, d in zip(items, docs)]
    outcomes: dict[str, list[Outcome]] = {}
    for row in rows:
        limit = args.llm_questions if row.get("llm") else len(items)
        t = thresholds.get(row["kind"], {}).get("threshold")
        outcomes[row["name"]] = []
        for n, (item, d) in enumerate(zip(items[:limit], docs[:limit])):
            outcomes[row["name"]].append(run_row(row, item.question, d, parts, t))
            if row.get("llm"):
                print(f"{row['name']} {n + 1}/{limit}", file=sys.stderr)
    full = {name: per for name, per in outcomes.items() if len(per) == len(items)}
    payload = {
        "command": " ".join(["python", "-m", "bench.frameworks_bench", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "what": __doc__.split("\n\n", 2)[1].strip(),
        "data": args.data,
        "documents_per_question": round(sum(len(d) for d in docs) / len(docs), 2),
        "split_chars": SPLIT_CHARS,
        "model": settings.chat.model,
        "rule_thresholds": thresholds,
        "rows_declared": list(rows),
        "all_questions": summarise(items, full, docs, scores),
        "llm_subset": summarise(items[: args.llm_questions], outcomes, docs, scores),
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")
    print(json.dumps({k: payload[k] for k in ("all_questions", "llm_subset")}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
