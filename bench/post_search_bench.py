"""What post-search adds to a caller's own search, and what it keeps.

    python -m bench.post_search_bench [--queries 100] [--cold 5] [--hits 10] [--seed 7]
    python -m bench.post_search_bench --companion [--compare engine-fetch,...] [--repeat 3] [--busy 2]
    python -m bench.post_search_bench --gates off,retrieval,crossencoder --queries 60 --out post_search_gate
    python -m bench.post_search_bench --budgets 0,1 --queries 10 --out post_search_budget
    python -m bench.post_search_bench --queries 100 --cold 10 --preselect 0,8,12 --out post_search_cold_preselect

SQuAD 2 dev articles cut into documents of 1,000-3,000 words; each question's "cluster response"
is ``--hits`` of them (the gold one and others at random, in a random order) with a plain
``title``/``body`` source, and post-search runs on it as the gateway does after the search (the
cluster's search and the field listing are not in the figures). Cold (first ``--cold`` queries):
a new query-time passage source for each of ``--preselect`` (sentences a field; default the
setting's) in a rotating order, its answers kept from one source of its own shared by all queries
(exact McNemar against the first); warm: one shared by all queries. ``--companion``: the documents
in a real index with ``chunkrag sync``'s companion, read as the gateway reads it (``engine``: the
engine's BM25 and kNN, candidates rebuilt from the hits' text, one request; ``engine-fetch``: the
candidates read in a second request; ``engine-passages``: BM25 counted here; ``fetched``: every
chunk read with its vector); the ways are timed on each query in a rotating order. ``--gates``:
companion post-search with each gate setting in turn (the gate's added ms, hits kept empty,
answers kept). ``--busy N``: N processes spin on the CPU meanwhile. With the default filter (no
model call) it records the added ms (p50 / p95), the share of questions whose answer is in the
gold hit's kept passages, and the characters kept. The first search after `chunkrag serve`
starts (post_search_first*.json) and the cold path three ways (post_search_cold.json) were
measured by modes since retired (bench/REPORT.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

from bench.common import SHARED, burn_cpu, write_result
from bench.metrics import percentile as quantile

SQUAD = SHARED / "eval" / "squad" / "squad2_cs224n_dev-v2.0.json"
MIN_WORDS, MAX_WORDS = 1000, 3000
COMPANION_SCORING = ("engine", "engine-passages", "engine-fetch", "fetched")


def documents(seed: int) -> list[dict]:
    """Whole documents of MIN..MAX words: consecutive paragraphs of one
    article; each with its paragraphs' answerable questions."""
    rng = random.Random(seed)
    articles = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    out = []
    for article in articles:
        paragraphs = article["paragraphs"]
        i = 0
        while i < len(paragraphs):
            target = rng.randint(MIN_WORDS, MAX_WORDS)
            taken, words = [], 0
            while i < len(paragraphs) and words < target:
                taken.append(paragraphs[i])
                words += len(paragraphs[i]["context"].split())
                i += 1
            if words < MIN_WORDS:
                break
            questions = [
                (qa["question"], [a["text"] for a in qa["answers"]])
                for p in taken
                for qa in p["qas"]
                if not qa.get("is_impossible") and qa["answers"]
            ]
            title = article["title"].replace("_", " ")
            out.append(
                {
                    "id": f"{article['title']}-{len(out)}",
                    "title": title,
                    "body": "\n\n".join(p["context"] for p in taken),
                    "questions": questions,
                }
            )
    return out


def queries(docs: list[dict], seed: int, hits: int, limit: int):
    """The first ``limit`` questions in a random order, each as (gold
    document, question, answers, hits): the gold document and ``hits - 1``
    others drawn at random, in a random order (the cluster's)."""
    rng = random.Random(seed)
    asked = [(d, q) for d in docs for q in d["questions"]]
    rng.shuffle(asked)
    for gold, (question, answers) in asked[:limit]:
        chosen = [gold, *rng.sample([d for d in docs if d is not gold], hits - 1)]
        rng.shuffle(chosen)
        yield gold, question, answers, chosen


def cluster_response(index: str, hits: list[dict]) -> dict:
    """The documents as the hits of a caller's search with a plain source."""
    return {
        "hits": {
            "hits": [
                {"_index": index, "_id": d["id"], "_score": 1.0, "_source": {"title": d["title"], "body": d["body"]}}
                for d in hits
            ]
        }
    }


def kept_of(result, gold: dict, hits: list[dict], answers: list[str]) -> dict:
    """Whether an answer is in the gold hit's kept passages, and the share
    of all the hits' characters kept."""
    gold_hit = next(h for h in result.hits if h.doc_id == gold["id"])
    kept_gold = " ".join(c.text for c in gold_hit.kept).lower()
    kept_chars = sum(len(c.text) for h in result.hits for c in h.kept)
    return {
        "answer_kept": any(a.lower() in kept_gold for a in answers),
        "kept_share_of_chars": round(kept_chars / sum(len(d["body"]) for d in hits), 4),
        "kept_passages": sum(len(h.kept) for h in result.hits),
    }


class _Companion:
    """Passage sources reading the synced companion first; counts the fields
    it left to query-time chunking."""

    def __init__(self, client, settings, embedder, scoring: str = "engine"):
        from search_extension.passages import QueryTimePassages

        self.client, self.settings, self.missed, self.scoring = client, settings, 0, scoring
        self.fallback = QueryTimePassages(embedder, settings)

    def source(self, scoring: str | None = None):
        from search_extension.companion import CompanionsFirst

        scoring, bench = scoring or self.scoring, self

        class Counting:
            def passages(self, fields, *, query=""):
                bench.missed += len(fields)
                return bench.fallback.passages(fields, query=query)

        return CompanionsFirst(
            self.client,
            Counting(),
            settings=self.settings,
            engine_scoring=scoring != "fetched",
            bm25="passages" if scoring == "engine-passages" else "engine",
            rebuild=scoring != "engine-fetch",
        )


def companion_setup(docs: list[dict], settings, embedder, seed: int):
    """The documents as a real index of the configured engine, synced into
    its companion; returns (index, companion reader, the sync's figures)."""
    from chunkrag_core.engines import make_backend
    from ingest_pipeline.sync import sync_index

    client = make_backend(settings)
    index = f"bench-post-search-{seed}"
    if not client.index_exists(index):
        mapping = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}
        client.create_index(index, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": mapping})
        actions = (
            {"_op_type": "index", "_index": index, "_id": d["id"], "_source": {"title": d["title"], "body": d["body"]}}
            for d in docs
        )
        assert all(ok for ok, _ in client.bulk(actions, chunk_size=50, max_retries=0, initial_backoff=1))
        client.refresh(index)
    started = time.perf_counter()
    report = sync_index(index, client=client, embedder=embedder, settings=settings)
    figures = {
        "documents": len(docs),
        "seconds": round(time.perf_counter() - started, 1),
        "rechunked": report.rechunked,
        "unchanged": report.unchanged,
        "errors": len(report.errors),
    }
    return index, _Companion(client, settings, embedder), figures


def compared_summary(kept: list[dict], kept_present: list[dict]) -> dict:
    """What one way of scoring kept, against the warm path's decisions."""
    return {
        "scored_by_engine": sum(k["scored_by"] == "engine" for k in kept),
        "answer_kept_share": round(sum(k["answer_kept"] for k in kept_present) / len(kept_present), 4),
        "kept_share_of_chars_mean": round(sum(k["kept_share_of_chars"] for k in kept) / len(kept), 4),
        "kept_passages_mean": round(sum(k["kept_passages"] for k in kept) / len(kept), 1),
        "same_as_warm_mean": round(sum(k["same_as_warm"] for k in kept) / len(kept), 4),
        "extra_over_warm_mean": round(sum(k["extra_over_warm"] for k in kept) / len(kept), 1),
    }


def repeat_summary(warm: list[float], companion: list[float]) -> dict:
    """One pass over the queries: the warm and companion p50 / p95, and the load after it."""
    return {
        "warm_p50": percentile(warm, 0.5),
        "warm_p95": percentile(warm, 0.95),
        "companion_p50": percentile(companion, 0.5),
        "companion_p95": percentile(companion, 0.95),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def timed_post_search(response: dict, question: str, options, source, embedder):
    """Post-search as the gateway runs it after the caller's search (``options``: the parsed
    ``ext.chunkrag``); the result and its ms."""
    from search_extension.post_search import post_search
    from search_extension.text_fields import TextFields

    started = time.perf_counter()
    result = post_search(
        response,
        query=question,
        options=options.post_search,
        filter_options=options.filter,
        fields_of=lambda index: TextFields(("body",), "title"),
        passage_source=source,
        embedder=embedder,
    )
    return result, (time.perf_counter() - started) * 1000


def gate_ways(args, docs, settings, embedder) -> dict:
    """``--gates``: companion post-search (one request, engine scoring) with
    each gate setting on every query, in a rotating order: the ms each
    adds to the search without a gate (paired per query), the hits it kept
    nothing of (each hit is filtered, and gated, on its own) and whether the
    answer stayed in the gold hit's kept passages. ``--budgets``: the same, relevance crossencoder
    within each budget_s (0: none), and the share of passages the model read."""
    from chunkrag_filter.budget import Budget, bound
    from chunkrag_gateway.heap import settle_heap
    from search_extension.options import parse_options

    index, companion, sync_report = companion_setup(docs, settings, embedder, args.seed)
    options = {gate: parse_options({"gate": gate}, surface="search") for gate in args.gates}
    seconds = {f"budget_s={float(b):g}": float(b) for b in args.budgets}
    options |= {way: parse_options({"relevance": "crossencoder"}, surface="search") for way in seconds}
    ways = list(options)
    settle_heap()
    ms: dict[str, list[float]] = {way: [] for way in ways}
    kept: dict[str, list[dict]] = {way: [] for way in ways}
    emptied: dict[str, list[float]] = {way: [] for way in ways}
    read: dict[str, list[float]] = {way: [] for way in ways}
    for n, (gold, question, answers, hits) in enumerate(queries(docs, args.seed, args.hits, args.queries)):
        response = cluster_response(index, hits)
        shift = n % len(ways)
        for way in ways[shift:] + ways[:shift]:
            with bound(Budget(seconds[way]) if seconds.get(way) else None):  # one budget a search, as the gateway binds
                result, took = timed_post_search(response, question, options[way], companion.source("engine"), embedder)
            ms[way].append(took)
            kept[way].append(
                kept_of(result, gold, hits, answers)
                | {"present": any(a.lower() in gold["body"].lower() for a in answers)}
            )
            emptied[way].append(sum(1 for h in result.hits if not h.kept) / len(result.hits))
            decisions = result.filtered.decisions if result.filtered is not None else ()
            read[way].append(sum("relevance" in d.chunk.stage_scores for d in decisions) / max(1, len(decisions)))
    base = ways[0]
    summary = {
        way: {
            "ms": p50_p95(ms[way]),
            "added_ms_over_" + base: p50_p95([a - b for a, b in zip(ms[way], ms[base])]),
            "hits_kept_empty_share": round(statistics.fmean(emptied[way]), 4),
            "answer_kept_share": round(statistics.fmean(k["answer_kept"] for k in kept[way] if k["present"]), 4),
            "kept_share_of_chars_mean": round(statistics.fmean(k["kept_share_of_chars"] for k in kept[way]), 4),
            **({"relevance_read_share": round(statistics.fmean(read[way]), 4)} if way in seconds else {}),
        }
        for way in ways
    }
    return {"summary": {"queries": len(ms[base]), "hits_per_query": args.hits, "gates": summary, "sync": sync_report}}


def ordered_ways(turn: int, chosen, others: list[str], run, companion) -> dict:
    """Each companion scoring (``chosen`` first, then ``others``) run once,
    the order rotated by ``turn``: whichever runs first on a query pays its
    first reads, so no way is always the first."""
    ways = [chosen, *others]
    shift = turn % len(ways)
    return {way: run(companion.source(way)) for way in ways[shift:] + ways[:shift]}


def p50_p95(values: list[float]) -> dict:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}


def percentile(values: list[float], q: float) -> float | None:
    return round(quantile(values, q), 1) if values else None  # None: that way did not run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--cold", type=int, default=5, help="queries also measured cold (each costs seconds)")
    parser.add_argument("--hits", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    listed = lambda value: [v for v in value.split(",") if v]  # noqa: E731
    ways = ", ".join(COMPANION_SCORING)
    parser.add_argument("--compare", type=listed, default=[], help=f"scorings of {ways} timed beside engine")
    parser.add_argument("--repeat", type=int, default=1, help="passes timed (warm and companion); the median reported")
    parser.add_argument("--out", default="post_search", help="the result's name under bench/results/")
    parser.add_argument("--busy", type=int, default=0, metavar="N", help="processes spinning on the CPU meanwhile")
    parser.add_argument("--companion", action="store_true", help="also passages read from a synced companion index")
    parser.add_argument("--gates", type=listed, default=[], help="off,retrieval,crossencoder: each in turn")
    parser.add_argument("--budgets", type=listed, default=[], help="0,1: relevance crossencoder in each budget_s")
    parser.add_argument("--preselect", type=listed, default=[], help="0,12: sentences a field, each timed cold in turn")
    args = parser.parse_args()

    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import Settings
    from chunkrag_eval.measures import discordant, mcnemar_exact
    from chunkrag_gateway.heap import settle_heap
    from search_extension.options import parse_options
    from search_extension.passages import QueryTimePassages

    settings = Settings.from_env()
    embedder = make_embedder(settings.embedder)
    default = parse_options({}, surface="search")  # the gateway's default for a search client
    docs = documents(args.seed)
    # The model, the sentence splitter and the chunker read before the clock (a source thrown away).
    timed_post_search(cluster_response("w", docs[:1]), "warm", default, QueryTimePassages(embedder, settings), embedder)
    burn_cpu(args.busy)
    load_before = os.getloadavg()[0]
    if args.gates or args.budgets:
        found = gate_ways(args, docs, settings, embedder)
        found["summary"] |= {"load_1m_before": round(load_before, 2), "load_1m_after": round(os.getloadavg()[0], 2)}
        print(json.dumps(found["summary"]))
        write_result(args.out, "bench.post_search_bench", found)
        return
    rows = []
    timed = []  # each query's measurement, to repeat
    shared = QueryTimePassages(embedder, settings)
    ks = [int(k) for k in args.preselect] or [settings.post_search.preselect_sentences]
    narrowed = {k: QueryTimePassages(embedder, settings, preselect=k) for k in ks}  # each k's answers kept
    index = "bench"
    companion = sync_report = None
    if args.companion:
        index, companion, sync_report = companion_setup(docs, settings, embedder, args.seed)
    settle_heap()  # as the gateway does once its models are read
    for n, (gold, question, answers, hits) in enumerate(queries(docs, args.seed, args.hits, args.queries)):
        response = cluster_response(index, hits)

        def run(source, options=default, response=response, question=question):
            return timed_post_search(response, question, options, source, embedder)

        timed.append(run)

        by_k = {}
        for k in ks[n % len(ks) :] + ks[: n % len(ks)]:
            ms = run(QueryTimePassages(embedder, settings, preselect=k))[1] if n < args.cold else None
            by_k[k] = {"cold_ms": ms and round(ms, 1), **kept_of(run(narrowed[k])[0], gold, hits, answers)}
        companion_ms = companion_missed = companion_result = None
        compared = {}
        if companion is not None:
            timed_ways = ordered_ways(n, None, args.compare, run, companion)
            companion_result, companion_ms = timed_ways.pop(None)
            companion_missed = companion.missed
            compared = timed_ways
        run(shared)  # the hits' documents into the shared cache
        result, warm_ms = run(shared)

        def against_warm(found, warm=result, gold=gold, hits=hits, answers=answers):
            warm_ids = {c.chunk_id for h in warm.hits for c in h.kept}
            found_ids = {c.chunk_id for h in found.hits for c in h.kept}
            return {
                **kept_of(found, gold, hits, answers),
                "scored_by": found.scored_by,
                # Of the passages the warm path keeps (the same chunks, scored here), the share kept.
                "same_as_warm": round(len(warm_ids & found_ids) / len(warm_ids), 4) if warm_ids else 1.0,
                "extra_over_warm": len(found_ids - warm_ids),
            }

        companion_kept = None if companion_result is None else against_warm(companion_result)
        rows.append(
            {
                "question": question,
                "warm_ms": round(warm_ms, 1),
                "companion_ms": None if companion_ms is None else round(companion_ms, 1),
                "companion_missed_fields": companion_missed,
                "companion_kept": companion_kept,
                "companion_timings_ms": None if companion_result is None else dict(companion_result.timings_ms),
                "compared": {
                    name: {"ms": round(ms, 1), **against_warm(found)} for name, (found, ms) in compared.items()
                },
                "answer_in_gold_hit": any(a.lower() in gold["body"].lower() for a in answers),
                "preselect": by_k,
                **kept_of(run(shared)[0], gold, hits, answers),
                "candidates": result.candidates,
                "capped": result.capped,
                "words": sum(len(d["body"].split()) for d in hits),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    repeats = [repeat_summary([r["warm_ms"] for r in rows], [r["companion_ms"] for r in rows if r["companion_ms"]])]
    compared_ms = {name: [[r["compared"][name]["ms"] for r in rows]] for name in args.compare}
    # Each companion run's own steps (embedding, passages, filter stages),
    # every pass: less sensitive to the machine's load than the totals.
    steps = [r["companion_timings_ms"] for r in rows if r["companion_timings_ms"] is not None]
    for _ in range(args.repeat - 1):
        warm, again = [], []
        again_compared: dict[str, list[float]] = {name: [] for name in args.compare}
        for n, run in enumerate(timed):
            if companion is not None:
                timed_ways = ordered_ways(n + 1, None, args.compare, run, companion)
                result, ms = timed_ways.pop(None)
                again.append(ms)
                steps.append(dict(result.timings_ms))
                for name in args.compare:
                    again_compared[name].append(timed_ways[name][1])
            warm.append(run(shared)[1])
        repeats.append(repeat_summary(warm, again))
        for name, values in again_compared.items():
            compared_ms[name].append(values)
        print(json.dumps(repeats[-1]), flush=True)
    present = [r for r in rows if r["answer_in_gold_hit"]]
    kept_k = {k: [r["preselect"][k]["answer_kept"] for r in present] for k in ks}
    companion_kept = {} if companion is None else {"scoring": "engine"}
    if companion is not None:
        companion_kept |= compared_summary(*([r["companion_kept"] for r in g] for g in (rows, present)))
    summary = {
        "queries": len(rows),
        "hits_per_query": args.hits,
        "words_per_hit_mean": round(sum(r["words"] for r in rows) / len(rows) / args.hits),
        "warm_ms": p50_p95([r["warm_ms"] for r in rows]),
        "companion_ms": {
            **p50_p95([r["companion_ms"] for r in rows if r["companion_ms"] is not None]),
            "fields_not_served": None if companion is None else companion.missed,
            "sync": sync_report,
            "steps_ms": {
                step: p50_p95([t[step] for t in steps if step in t])
                for step in dict.fromkeys(step for t in steps for step in t)
            },
            **companion_kept,
        },
        # The other ways to score the companion's chunks, timed on the same
        # queries in a rotating order with the chosen one (the same load).
        "compared": {
            name: {
                **compared_summary([r["compared"][name] for r in rows], [r["compared"][name] for r in present]),
                "p50_per_repeat": [percentile(values, 0.5) for values in compared_ms[name]],
                "p95_per_repeat": [percentile(values, 0.95) for values in compared_ms[name]],
                "median_of_repeats": {
                    "p50": statistics.median(percentile(values, 0.5) for values in compared_ms[name]),
                    "p95": statistics.median(percentile(values, 0.95) for values in compared_ms[name]),
                },
            }
            for name in args.compare
        },
        "answer_kept_share": round(sum(r["answer_kept"] for r in present) / len(present), 4),
        "preselect": {  # cold ms; answers kept of those in the gold hit, exact McNemar against the first k
            k: {
                "cold_ms": p50_p95([r["preselect"][k]["cold_ms"] for r in rows if r["preselect"][k]["cold_ms"]]),
                "answers_kept": sum(kept_k[k]),
                "mcnemar_p": round(mcnemar_exact(*discordant(kept_k[ks[0]], kept_k[k])), 4),
            }
            for k in ks
        },
        "kept_share_of_chars_mean": round(sum(r["kept_share_of_chars"] for r in rows) / len(rows), 4),
        "kept_passages_mean": round(sum(r["kept_passages"] for r in rows) / len(rows), 1),
        "capped_mean": round(sum(r["capped"] for r in rows) / len(rows), 1),
        "repeats": repeats,
        "median_of_repeats": {
            key: statistics.median(found) if (found := [r[key] for r in repeats if r[key] is not None]) else None
            for key in ("warm_p50", "warm_p95", "companion_p50", "companion_p95")
        },
        "load_1m_before": round(load_before, 2),
        "load_1m_after": round(os.getloadavg()[0], 2),
        "busy_processes": args.busy,
    }
    print(json.dumps(summary))
    found = {"filter": "default (calibrated, no model call)", "summary": summary, "rows": rows}
    write_result(args.out, "bench.post_search_bench", found)


if __name__ == "__main__":
    main()
