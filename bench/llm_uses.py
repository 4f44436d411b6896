"""Two uses of the local chat model beside the retrieval-signal filter, on
the candidates of the leave-one-dataset-out cache (``bench.filter_loo build``).

    python -m bench.llm_uses peer  --questions 40   # LangChain's LLMChainFilter, one yes/no call per chunk
    python -m bench.llm_uses draft --questions 60   # one draft answer per question, then favour chunks holding it

``peer``: LangChain's ``LLMChainFilter`` (langchain-classic, its own default
prompt and ``BooleanOutputParser``) with the same local model, on the same
candidates the shipped default filter scores; answer kept and characters
kept for the peer, the shipped default at its cut and at the peer's
characters, cosine at the peer's characters.

``draft``: the model reads the best passages (by the filter's probability)
and writes a short answer (one call per question); each candidate's share
of the draft's words it holds raises its score (``draft_support``,
``boosted``). Compared with the retrieval-signal model fitted without the
set it is scored on (leave one dataset out), at 25% of the characters.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "filter_loo"
# The model serves two parallel slots; more concurrent calls only queue.
CONCURRENCY = 2
SEED = 7
# Passages the draft answer is written from (the best by probability).
DRAFT_PASSAGES = 4
# Longest draft answer asked for: PopQA and NQ answers are a few words.
DRAFT_TOKENS = 24
# The yes/no call needs one word; a cap keeps a rambling reply short (the
# parser reads YES/NO anywhere in it).
PEER_TOKENS = 16
# How far (in log-odds) a candidate holding every word of the draft is
# raised: fixed before the run, not tuned.
BOOST = 2.0
# The shared server queues calls from every client on the machine: a
# draft waits its turn rather than failing the run.
DRAFT_TIMEOUT_S = 600.0
_STOP = frozenset(
    "a an the of in on at to for and or is was are were be by with as from that this it its his her their "
    "he she they i you not no unknown".split()
)


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words of two or more characters, stop words out."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1 and w not in _STOP]


def draft_support(draft: str, chunk: str) -> float:
    """Share of the draft answer's distinct words found in the chunk (0 for
    an empty draft)."""
    wanted = set(words(draft))
    if not wanted:
        return 0.0
    have = set(words(chunk))
    return len(wanted & have) / len(wanted)


def boosted(probability: float, support: float, boost: float = BOOST) -> float:
    """The probability moved by ``boost * support`` in log-odds."""
    p = min(max(probability, 1e-9), 1 - 1e-9)
    z = math.log(p / (1 - p)) + boost * support
    return 1.0 / (1.0 + math.exp(-z))


def _sample(records: list[dict], count: int) -> list[dict]:
    return random.Random(SEED).sample(records, min(count, len(records)))


def _llm():
    """The local server's URL and model name (chunkrag services status / /v1/models)."""
    import httpx

    from chunkrag_core.settings import Settings

    settings = Settings.from_env()
    base = settings.chat.base_url or "http://127.0.0.1:8088/v1"
    base = base.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    model = httpx.get(f"{base}/models", timeout=10).json()["data"][0]["id"]
    return base, model


def _read_log(log: Path | None) -> dict[str, dict]:
    if log is None or not log.exists():
        return {}
    entries = (json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip())
    return {e["query_id"]: e for e in entries}


def peer(
    cache: Path, count: int, concurrency: int = CONCURRENCY, log: Path | None = None, only_logged: bool = False
) -> int:
    from langchain_classic.retrievers.document_compressors import LLMChainFilter
    from langchain_core.documents import Document
    from langchain_openai import ChatOpenAI

    from bench.common import write_result
    from bench.filter_loo_run import CUTS, SHARES, baseline_set, load, pool
    from chunkrag_eval.curves import budget_curve, filter_curve, filter_point, kept_at_chars, point
    from chunkrag_filter.processors.calibration import load_calibration

    base, model = _llm()
    llm = ChatOpenAI(base_url=base, model=model, api_key="local", temperature=0, max_tokens=PEER_TOKENS)
    chain_filter = LLMChainFilter.from_llm(llm)
    records = _sample(load(cache)["popqa"], count)
    done = _read_log(log)
    if only_logged:  # the questions an interrupted run answered, in sample order
        records = [r for r in records if r["query_id"] in done]
    shipped = load_calibration(None).retrieval
    default_scores = [[shipped.model.probability(r) for r in rec["rows"]] for rec in records]
    questions = [pool(r) for r in records]
    kept, calls, failures, seconds = [], [], 0, []
    for n, rec in enumerate(records):
        if rec["query_id"] in done:  # replies of an interrupted run, kept in --log
            entry = done[rec["query_id"]]
            kept.append(entry["kept"])
            calls.append(entry["calls"])
            failures += entry["failures"]
            seconds.append(entry["seconds"])
            continue
        started = time.perf_counter()
        inputs = [{"question": rec["question"], "context": row["text"]} for row in rec["rows"]]
        # LLMChainFilter.compress_documents batches every candidate without a
        # concurrency cap and raises on the first unparsable reply; the same
        # chain, batched at the server's two slots, an unparsable reply
        # counted and dropped (as the filter drops a falsy output).
        outputs = chain_filter.llm_chain.batch(inputs, config={"max_concurrency": concurrency}, return_exceptions=True)
        failures += sum(isinstance(o, Exception) for o in outputs)
        kept.append([i for i, o in enumerate(outputs) if o is True])
        calls.append(len(inputs))
        seconds.append(time.perf_counter() - started)
        if log is not None:
            entry = {"query_id": rec["query_id"], "kept": kept[-1], "calls": calls[-1], "seconds": seconds[-1]}
            entry["failures"] = sum(isinstance(o, Exception) for o in outputs)
            with log.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
        print(f"{n + 1}/{len(records)} kept {len(kept[-1])}/{len(inputs)} {seconds[-1]:.1f} s", file=sys.stderr)
    assert isinstance(Document, type)  # the peer's document type, imported as a user would
    peer_point = point(questions, kept)
    default_point = filter_point(questions, default_scores, shipped.cut)
    curve = filter_curve(questions, default_scores, CUTS)
    cos = baseline_set(records)["cosine_signal"]
    cos_curve = budget_curve(questions, cos, SHARES)
    payload = {
        "what": "PopQA dev questions (seed 7 sample of the leave-one-out cache), each question's candidates after "
        "redundancy; the peer: langchain-classic LLMChainFilter.from_llm(ChatOpenAI(local model, temperature 0, "
        f"max_tokens {PEER_TOKENS})), its default prompt and BooleanOutputParser, at most {concurrency} call(s) "
        "in flight; the default: chunkrag_filter/calibration/default.json (fitted on all seven sets, "
        "PopQA included)",
        "model": model,
        "questions": len(records),
        "sampled": count,
        "with_answer_in_pool": sum(q.has_gold for q in questions),
        "candidates": sum(calls),
        "calls_per_question": round(statistics.fmean(calls), 2),
        "unparsable_replies": failures,
        "seconds_per_question_median": round(statistics.median(seconds), 2),
        "peer": {"chars": round(peer_point.chars, 4), "kept": _r(peer_point.kept)},
        "default_at_cut": {"cut": shipped.cut, "chars": round(default_point.chars, 4), "kept": _r(default_point.kept)},
        "default_at_peer_chars": _r(kept_at_chars(curve, peer_point.chars)),
        "cosine_at_peer_chars": _r(kept_at_chars(cos_curve, peer_point.chars)),
        "cosine_at_default_chars": _r(kept_at_chars(cos_curve, default_point.chars)),
        "per_question": [
            {"query_id": r["query_id"], "kept": k, "n": len(r["rows"])} for r, k in zip(records, kept, strict=True)
        ],
    }
    path = write_result("llm_peer_popqa", "bench.llm_uses", payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "per_question"}, indent=1), file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _draft(base: str, model: str, question: str, passages: Sequence[str]) -> str:
    import httpx

    context = "\n".join(f"[{i + 1}] {p}" for i, p in enumerate(passages))
    prompt = (
        "Answer the question in a few words, using the passages. If they do not say, give your best guess.\n\n"
        f"Passages:\n{context}\n\nQuestion: {question}\nAnswer:"
    )
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": DRAFT_TOKENS,
    }
    reply = httpx.post(f"{base}/chat/completions", json=body, timeout=DRAFT_TIMEOUT_S)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"].strip()


def draft(
    cache: Path,
    count: int,
    sets: Sequence[str],
    concurrency: int = CONCURRENCY,
    log: Path | None = None,
    only_logged: bool = False,
) -> int:
    from bench.common import write_result
    from bench.filter_loo_run import (
        CUTS,
        FEATURES_A,
        GOAL,
        SETS,
        TRAIN_TARGET,
        Logistic,
        baseline_set,
        load,
        pool,
    )
    from chunkrag_eval.curves import chars_for_kept, filter_curve, filter_point, highest_cut, kept_at_chars

    base, model = _llm()
    data = load(cache)
    out = {}
    for held in sets:
        train = [s for s in SETS if s != held]
        predict = Logistic(FEATURES_A).fit([r for s in train for r in data[s]])
        cut = highest_cut([([pool(r) for r in data[s]], predict(data[s])) for s in train], CUTS, TRAIN_TARGET)
        records = _sample(data[held], count)
        done = _read_log(log.with_name(f"{log.stem}.{held}.jsonl")) if log else {}
        if only_logged:  # the questions an interrupted run drafted, in sample order
            records = [r for r in records if r["query_id"] in done]
        scores = predict(records)
        questions = [pool(r) for r in records]

        def one(args):
            rec, sc = args
            if rec["query_id"] in done:  # drafted by an interrupted run, kept in --log
                return done[rec["query_id"]]["draft"], done[rec["query_id"]]["seconds"]
            best = sorted(range(len(sc)), key=lambda i: -sc[i])[:DRAFT_PASSAGES]
            started = time.perf_counter()
            text = _draft(base, model, rec["question"], [rec["rows"][i]["text"] for i in best])
            took = time.perf_counter() - started
            if log is not None:
                with log.with_name(f"{log.stem}.{held}.jsonl").open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"query_id": rec["query_id"], "draft": text, "seconds": took}) + "\n")
            return text, took

        with ThreadPoolExecutor(concurrency) as pool_:
            drafted = list(pool_.map(one, zip(records, scores)))
        drafts = [d for d, _ in drafted]
        support = [[draft_support(d, row["text"]) for row in rec["rows"]] for d, rec in zip(drafts, records)]
        boost = [[boosted(p, s) for p, s in zip(ps, ss)] for ps, ss in zip(scores, support)]
        cos_curve = baseline_set(records)["cosine_curve"]
        result = {"questions": len(records), "with_gold_in_pool": sum(q.has_gold for q in questions)}
        for label, sc in (("loo_retrieval", scores), ("loo_retrieval_plus_draft", boost)):
            curve = filter_curve(questions, sc, CUTS)
            at_cut = filter_point(questions, sc, cut)
            result[label] = {
                "kept_at_25": _r(kept_at_chars(curve, 0.25)),
                "chars_for_90": _r(chars_for_kept(curve, GOAL)),
                "at_loo_cut": {"cut": cut, "chars": _r(at_cut.chars), "kept": _r(at_cut.kept)},
            }
        result["cosine"] = {
            "kept_at_25": _r(kept_at_chars(cos_curve, 0.25)),
            "chars_for_90": _r(chars_for_kept(cos_curve, GOAL)),
        }
        result["calls"] = len(records)
        result["seconds_per_call_median"] = round(statistics.median(s for _, s in drafted), 2)
        result["drafts"] = [{"query_id": r["query_id"], "draft": d} for r, d in zip(records, drafts)]
        out[held] = result
        print(held, json.dumps({k: v for k, v in result.items() if k != "drafts"}), file=sys.stderr)
    gains = {s: _gain(out[s]) for s in sets}
    mean_gain = statistics.fmean(g for g in gains.values() if g is not None)
    payload = {
        "what": "each set scored by the retrieval-signal logistic model fitted on the other six sets (leave one "
        f"dataset out, bench/filter_loo_run.py, candidate A); the draft: one call per question, the local model "
        f"reads the {DRAFT_PASSAGES} best candidates by that model's probability and answers in a few words "
        f"(temperature 0, max_tokens {DRAFT_TOKENS}); each candidate's score raised by {BOOST} log-odds times "
        "the share of the draft's words it holds",
        "rule": "keep the draft boost (as an option) only if it beats the leave-one-out retrieval-signal model by "
        ">= 2 points of answer kept at 25% of the characters on the mean of the held-out sets measured",
        "model": model,
        "sets": out,
        "gain_at_25_points": {s: g for s, g in gains.items()},
        "mean_gain_at_25_points": round(mean_gain, 2),
        "kept": mean_gain >= 2.0,
    }
    path = write_result("llm_draft", "bench.llm_uses", payload)
    print(json.dumps({k: payload[k] for k in ("gain_at_25_points", "mean_gain_at_25_points", "kept")}), file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _gain(result: dict) -> float | None:
    a, b = result["loo_retrieval"]["kept_at_25"], result["loo_retrieval_plus_draft"]["kept_at_25"]
    return None if a is None or b is None else round(100 * (b - a), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_uses")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("peer")
    p.add_argument("--questions", type=int, default=40)
    p.add_argument("--cache", type=Path, default=CACHE)
    p.add_argument("--log", type=Path, help="one line per question answered; a rerun reuses them")
    p.add_argument("--only-logged", action="store_true", help="report only the questions already in --log")
    d = sub.add_parser("draft")
    d.add_argument("--questions", type=int, default=60)
    d.add_argument("--sets", nargs="+", default=["popqa", "nq"])
    d.add_argument("--cache", type=Path, default=CACHE)
    d.add_argument("--log", type=Path, help="drafts written so far (LOG.<set>.jsonl); a rerun reuses them")
    d.add_argument("--only-logged", action="store_true", help="report only the questions already in --log")
    for sub_parser in (p, d):
        sub_parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="calls in flight at once")
    args = parser.parse_args(argv)
    if args.command == "peer":
        return peer(args.cache, args.questions, args.concurrency, args.log, args.only_logged)
    return draft(args.cache, args.questions, args.sets, args.concurrency, args.log, args.only_logged)


if __name__ == "__main__":
    sys.exit(main())
