"""The relevance model's command: ``python -m chunkrag_train pairs|train|export``.

    python -m chunkrag_train pairs  --out .cache/relevance/pairs.jsonl    # labelled pairs from shared/eval (no torch)
    python -m chunkrag_train train  --pairs .cache/relevance/pairs.jsonl --out .cache/relevance/model   # [train] extra
    python -m chunkrag_train export --model .cache/relevance/model        # ONNX, int8, into chunkrag_core/model_files
    python -m chunkrag_train float-arithmetic GRAPH.int8.onnx   # a dynamic-int8 graph as the shipped one (onnx)
    python -m chunkrag_train cut      # the shipped cut, by the rule of chunkrag_train/cut.py

``make train-relevance`` runs all three in the ``.venv-train`` environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "eval"
WORK = Path(__file__).resolve().parents[1] / ".cache" / "relevance"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chunkrag_train", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pairs", help="build the labelled pairs from shared/eval")
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--out", type=Path, default=WORK / "pairs.jsonl")
    p.add_argument(
        "--written", type=Path, default=None, help="also the kept questions of write-questions (its JSON-lines file)"
    )
    w = sub.add_parser("write-questions", help="the local chat model writes questions for licensed sentences")
    w.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    w.add_argument("--seed", type=int, default=13)
    w.add_argument("--out", type=Path, default=WORK / "written.jsonl")
    w.add_argument("--minutes", type=float, default=None, help="stop after this long (the next run goes on)")
    t = sub.add_parser("train", help="fine-tune MiniLM on the pairs (needs the train extra)")
    t.add_argument("--pairs", type=Path, default=WORK / "pairs.jsonl")
    t.add_argument("--out", type=Path, default=WORK / "model")
    t.add_argument("--layers", type=int, default=6)
    t.add_argument("--max-tokens", type=int, default=160)
    t.add_argument("--epochs", type=float, default=0.7)
    t.add_argument("--seed", type=int, default=13)
    e = sub.add_parser("export", help="export the trained model to ONNX (fp32 and int8)")
    e.add_argument("--model", type=Path, default=WORK / "model")
    e.add_argument("--out", type=Path, default=None, help="default: chunkrag_core/model_files")
    f = sub.add_parser(
        "float-arithmetic", help="rewrite a dynamic-int8 graph to int8 weights multiplied in float (the shipped form)"
    )
    f.add_argument("source", type=Path)
    f.add_argument("--out", type=Path, default=None, help="default: chunkrag_core/model_files/relevance-minilm.onnx")
    j = sub.add_parser(
        "train-embedder", help="fine-tune the embedder into a relevance judge (resumable; needs the train extra)"
    )
    j.add_argument("--pairs", type=Path, default=WORK / "pairs.jsonl")
    j.add_argument("--work", type=Path, default=WORK / "judge-embedder")
    j.add_argument("--epochs", type=float, default=1.0)
    j.add_argument("--seed", type=int, default=13)
    j.add_argument("--minutes", type=float, default=None, help="checkpoint and stop after this long (resume later)")
    x = sub.add_parser("export-embedder", help="the judge embedder (finished or last checkpoint) as ONNX")
    x.add_argument("--work", type=Path, default=WORK / "judge-embedder")
    x.add_argument("--out", type=Path, default=None)
    c = sub.add_parser("cut", help="choose the relevance model's cut on its validation questions; write it")
    c.add_argument("--pairs", type=Path, default=WORK / "pairs.jsonl")
    c.add_argument("--calibration", type=Path, default=None, help="default: the shipped calibration file")
    args = parser.parse_args(argv)

    if args.command == "pairs":
        from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder
        from chunkrag_train.pairs import build, write_jsonl

        pairs, manifest = build(args.eval_dir, args.seed, LocalMiniLMEmbedder(batch_size=32).embed)
        if args.written is not None:
            from chunkrag_train.pairs import pairs_digest
            from chunkrag_train.written import read_written, written_pairs

            written = written_pairs(read_written(args.written).values())
            pairs += written
            manifest |= {"written": {"path": str(args.written), "pairs": len(written)}, "pairs": len(pairs)}
            manifest["pairs_sha256"] = pairs_digest(pairs)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(pairs, args.out)
        args.out.with_suffix(".manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        print(json.dumps(manifest, indent=2))
        return 0
    if args.command == "write-questions":
        from chunkrag_core.providers import make_chat
        from chunkrag_core.providers.chat import ChatRequest, Message
        from chunkrag_core.settings import Settings
        from chunkrag_train.written import targets, write_questions

        chat = make_chat(Settings.from_env().chat)

        def ask(prompt: str) -> str:
            return chat.complete(ChatRequest((Message("user", prompt),), max_tokens=80)).text

        todo = targets(args.eval_dir, args.seed)
        stop = args.minutes * 60 if args.minutes else None
        print(json.dumps(write_questions(todo, ask, args.out, stop, say=lambda m: print(m, flush=True))))
        return 0
    if args.command == "train":
        from chunkrag_train.pairs import read_jsonl
        from chunkrag_train.train import TrainConfig, train

        config = TrainConfig(seed=args.seed, layers=args.layers, max_tokens=args.max_tokens, epochs=args.epochs)
        summary = train(read_jsonl(args.pairs), args.out, config, log=lambda m: print(m, flush=True))
        print(json.dumps(summary, indent=2))
        return 0
    if args.command == "train-embedder":
        from chunkrag_train.judge_embedder import EmbedderConfig, train_embedder
        from chunkrag_train.pairs import read_jsonl

        config = EmbedderConfig(seed=args.seed, epochs=args.epochs)
        stop = args.minutes * 60 if args.minutes else None
        state = train_embedder(read_jsonl(args.pairs), args.work, config, stop, log=lambda m: print(m, flush=True))
        print(json.dumps(state))
        return 0
    if args.command == "export-embedder":
        from chunkrag_train.judge_embedder import export_embedder

        print(json.dumps(export_embedder(args.work, args.out)))
        return 0
    if args.command == "export":
        from chunkrag_train.export import export

        print(json.dumps(export(args.model, args.out), indent=2))
        return 0
    if args.command == "float-arithmetic":
        from chunkrag_core.artifacts import file_sha256
        from chunkrag_train.export import SHIPPED_NAME, model_files_dir
        from chunkrag_train.float_arithmetic import convert_file

        target = args.out or model_files_dir() / SHIPPED_NAME
        rewritten = convert_file(args.source, target)
        print(json.dumps({"path": str(target), "matmuls": rewritten, "sha256": file_sha256(target)}))
        return 0
    if args.command == "cut":
        import time

        from chunkrag_core.providers.local_relevance import LocalRelevanceModel
        from chunkrag_filter.processors.calibration import (
            RELEVANCE_ONLY,
            Calibrated,
            load_calibration,
            shipped_path,
            write_calibration,
        )
        from chunkrag_train.cut import KEEP_ANSWERS, choose_cut
        from chunkrag_train.pairs import read_jsonl

        validation = [p for p in read_jsonl(args.pairs) if p.split == "validation"]
        model = LocalRelevanceModel()
        groups: dict[str, list] = {}
        for pair in validation:
            groups.setdefault((pair.query, pair.group), []).append(pair)
        scores: dict[int, float] = {}
        for (query, _), members in groups.items():
            for pair, score in zip(members, model.score(query, [p.text for p in members])):
                scores[id(pair)] = score
        cut = round(choose_cut(validation, [scores[id(p)] for p in validation]), 4)
        target = args.calibration or shipped_path()
        current = load_calibration(str(target))
        about = {
            **current.about,
            "relevance": f"the relevance model's own probability (chunkrag_core/model_files/relevance-minilm.md); cut "
            f"{cut}: the highest keeping a relevant chunk for {KEEP_ANSWERS:.0%} of its {len(groups)} validation "
            f"questions (`python -m chunkrag_train cut`, {time.strftime('%Y-%m-%d')})",
        }
        write_calibration(
            target,
            current.retrieval,
            current.judged,
            about,
            Calibrated(RELEVANCE_ONLY, cut),
            current.gate,
            current.gate_relevance,
        )
        print(json.dumps({"cut": cut, "validation_questions": len(groups), "file": str(target)}))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
