r"""The default chunk breakpoint, chosen by the rule in docs/ingest.md.

    python -m bench.chunking_default [--distractors 1000] [--cache PATH] [--limit N]

The rule was written down (docs/ingest.md, "How the default breakpoint is
chosen") before this module ran. For each candidate chunker:

- the chunk lengths over the PopQA dev and PubHealth dev pools (each
  question's ambiguous pool one document, as ``chunkrag eval`` reads it),
  chunked by the real chunker (``chunk_documents``) with that candidate's
  settings;
- PopQA dev's pools and the first ``--distractors`` paragraphs of SQuAD 2.0
  dev ingested into one Elasticsearch index through the real pipeline; each
  question searched with the default hybrid query (40 candidates) over the
  whole index (the open corpus) and within its own pool (as ``chunkrag
  eval``); answer in context (any gold alias as a case-insensitive
  substring) of the candidates taken in rank order within 1,000 and 2,000
  characters per question (``kept_within_budget``).

The embedder is the settings' (the local int8 MiniLM) behind a cache by text,
so every sentence and question is embedded once for all candidates; with
``vectors=mix`` (the default) chunk vectors are made from those sentence
vectors, so the candidates' indices hold exactly what ``chunkrag ingest``
would write. Results: ``bench/results/chunking_default.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import SHARED, write_result
from bench.header_vectors_bench import CachingEmbedder

POPQA = SHARED / "eval" / "popqa" / "dev.jsonl"
PUBHEALTH = SHARED / "eval" / "pubhealth" / "dev.jsonl"
SQUAD = SHARED / "eval" / "squad" / "squad2_cs224n_dev-v2.0.json"
INDEX_PREFIX = "bench-chunking"
# Candidates retrieved per question before the character budget is applied.
CANDIDATES = 40
BUDGETS = (1000, 2000)
# The rule's eligibility: mean chunk characters in this range, and fewer
# than this share of chunks a single sentence, on both sets' pools.
MEAN_CHARS_RANGE = (300.0, 600.0)
MAX_SINGLE_SENTENCE_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class Candidate:
    breakpoint: str  # "threshold" or "percentile"
    value: float  # θ, or the percentile
    min_chars: int = 0

    @property
    def name(self) -> str:
        head = f"theta{self.value:g}" if self.breakpoint == "threshold" else f"p{self.value:g}"
        return head + (f"_min{self.min_chars}" if self.min_chars else "")

    def chunking(self, base):
        if self.breakpoint == "threshold":
            return dataclasses.replace(base, breakpoint="threshold", similarity_threshold=self.value, min_chars=0)
        return dataclasses.replace(
            base, breakpoint="percentile", breakpoint_percentile=self.value, min_chars=self.min_chars
        )


# In the rule's order; θ 0.8 is the paper's and the reference.
CANDIDATE_SET = (
    Candidate("threshold", 0.8),
    Candidate("threshold", 0.5),
    Candidate("threshold", 0.4),
    Candidate("percentile", 95),
    Candidate("percentile", 90),
    Candidate("percentile", 80),
    Candidate("percentile", 70),
    Candidate("percentile", 95, 200),
    Candidate("percentile", 80, 200),
)
REFERENCE = CANDIDATE_SET[0]


def pools(path: Path, dataset: str, limit: int | None):
    from chunkrag_eval.datasets import read_items
    from chunkrag_eval.runner import doc_id_for
    from ingest_pipeline.sources import plain_document

    _, items, _ = read_items(path, limit=limit)
    documents = [plain_document(doc_id_for(dataset, i), i.pool, f"{dataset}:{i.item_id}") for i in items]
    return items, documents


def distractors(count: int):
    from ingest_pipeline.sources import plain_document

    data = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    paragraphs = [p["context"] for article in data for p in article["paragraphs"]][:count]
    return [plain_document(f"squad-{i}", text, "squad") for i, text in enumerate(paragraphs)]


def length_stats(documents, embedder, chunking) -> dict:
    from ingest_pipeline.chunker import chunk_documents
    from ingest_pipeline.pipeline import ChunkLengthStats

    chunks = [c for item in chunk_documents(documents, embedder, chunking) for c in item.chunks]
    stats = ChunkLengthStats.of([len(c.text) for c in chunks], [c.sentence_count for c in chunks])
    return dataclasses.asdict(stats)


def answer_rows(retriever, items, dataset: str, own_pool: bool) -> dict[int, list[bool]]:
    """Per budget, per question: a gold alias in the candidates kept within it."""
    from chunkrag_core.engines.schema import DOC_ID
    from chunkrag_eval.measures import answer_in_context, kept_within_budget
    from chunkrag_eval.runner import doc_id_for

    out: dict[int, list[bool]] = {b: [] for b in BUDGETS}
    for item in items:
        filters = [{"term": {DOC_ID: doc_id_for(dataset, item)}}] if own_pool else []
        chunks = retriever.search(item.question, size=CANDIDATES, filters=filters).chunks
        texts = [c.text for c in chunks]
        rank = [-float(i) for i in range(len(texts))]
        for budget in BUDGETS:
            kept = kept_within_budget(texts, rank, budget)
            out[budget].append(answer_in_context(" ".join(texts[i] for i in kept), item.answers))
    return out


def rates(rows: dict[int, list[bool]]) -> dict:
    per = {str(b): round(sum(v) / len(v), 4) for b, v in rows.items()}
    return {"by_budget": per, "mean": round(sum(per.values()) / len(per), 4)}


def eligible(row: dict) -> bool:
    low, high = MEAN_CHARS_RANGE
    return all(
        low <= s["mean_chars"] <= high and s["single_sentence_share"] < MAX_SINGLE_SENTENCE_SHARE
        for s in row["lengths"].values()
    )


def choose(rows: dict[str, dict]) -> str | None:
    """The eligible candidate with the highest open-corpus mean (three
    decimals); a tie goes to the higher own-pool mean."""
    ok = [name for name, row in rows.items() if row["eligible"]]
    if not ok:
        return None
    return max(ok, key=lambda n: (round(rows[n]["open_corpus"]["mean"], 3), rows[n]["own_pool"]["mean"]))


def paired(winner: list[bool], reference: list[bool]) -> dict:
    from chunkrag_eval.measures import mcnemar_exact

    b = sum(w and not r for w, r in zip(winner, reference))
    c = sum(r and not w for w, r in zip(winner, reference))
    return {"discordant": [b, c], "p": round(mcnemar_exact(b, c), 4)}


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    from chunkrag_core.engines import make_backend
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from ingest_pipeline.pipeline import ingest_documents
    from search_extension.retriever import HybridRetriever

    parser = argparse.ArgumentParser()
    parser.add_argument("--distractors", type=int, default=1000, help="SQuAD 2.0 dev paragraphs in the open corpus")
    parser.add_argument("--limit", type=int, help="the first N questions of each set (a quick look; not the rule's)")
    parser.add_argument("--cache", type=Path, help="an .npz keeping every embedded text across runs")
    parser.add_argument("--name", default="chunking_default")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    client = make_backend(settings)
    embedder = CachingEmbedder(make_embedder(settings.embedder), settings.embedder.dims, args.cache)
    popqa_items, popqa_docs = pools(POPQA, "popqa", args.limit)
    _, pubhealth_docs = pools(PUBHEALTH, "pubhealth", args.limit)
    extra = distractors(args.distractors)
    began, load_before = time.perf_counter(), os.getloadavg()

    rows: dict[str, dict] = {}
    flags: dict[str, dict] = {}
    for candidate in CANDIDATE_SET:
        chunking = candidate.chunking(settings.chunking)
        run_settings = dataclasses.replace(settings, chunking=chunking)
        index = f"{INDEX_PREFIX}-{candidate.name}".replace(".", "_")
        client.delete_index(index)
        for documents in (popqa_docs, extra):
            report = ingest_documents(
                documents, client=client, embedder=embedder, settings=run_settings, index=index, progress=False
            )
            if not report.ok:
                raise RuntimeError(report.errors[:3])
        embedder.save()
        retriever = HybridRetriever(client, embedder, index, settings.retrieval)
        open_rows = answer_rows(retriever, popqa_items, "popqa", own_pool=False)
        own_rows = answer_rows(retriever, popqa_items, "popqa", own_pool=True)
        flags[candidate.name] = {"open": open_rows, "own": own_rows}
        row = {
            "breakpoint": candidate.breakpoint,
            "value": candidate.value,
            "min_chars": candidate.min_chars,
            "max_chars": chunking.max_chars,
            "index": index,
            "lengths": {
                "popqa_pools": length_stats(popqa_docs, embedder, chunking),
                "pubhealth_pools": length_stats(pubhealth_docs, embedder, chunking),
            },
            "open_corpus": rates(open_rows),
            "own_pool": rates(own_rows),
        }
        row["eligible"] = eligible(row)
        rows[candidate.name] = row
        embedder.save()
        client.delete_index(index)
        print(
            f"{candidate.name}: open {row['open_corpus']}  own {row['own_pool']}  "
            f"popqa {row['lengths']['popqa_pools']['mean_chars']} chars "
            f"{row['lengths']['popqa_pools']['single_sentence_share']:.0%} single  eligible {row['eligible']}",
            file=sys.stderr,
        )

    winner = choose(rows)
    against = {}
    if winner is not None:
        for regime in ("open", "own"):
            for budget in BUDGETS:
                against[f"{regime}_{budget}"] = paired(
                    flags[winner][regime][budget], flags[REFERENCE.name][regime][budget]
                )
    path = write_result(
        args.name,
        "bench.chunking_default",
        {
            "commit": git_commit(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(time.perf_counter() - began, 1),
            "questions": len(popqa_items),
            "pubhealth_pools": len(pubhealth_docs),
            "distractors": len(extra),
            "candidates_retrieved": CANDIDATES,
            "budgets_chars": list(BUDGETS),
            "embedder": f"{settings.embedder.provider}:{settings.embedder.model}",
            "rule": "docs/ingest.md#how-the-default-breakpoint-is-chosen",
            "rows": rows,
            "winner": winner,
            "winner_vs_reference": {"reference": REFERENCE.name, **against},
        },
    )
    print(f"winner {winner}; wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
