"""Fine-tune the embedder itself into a relevance judge (a bi-encoder).

The cross-encoder of :mod:`chunkrag_train.train` starts from
all-MiniLM-L6-v2's weights but throws away what made them useful: a new
head reads ``[CLS]`` over a query and chunk read together, and 30k pairs do
not teach it what a billion sentence pairs taught the embedder. Its held-out
ROC AUC stays below the embedder's own cosine (model card). This trains the
other way round: the embedder keeps its shape (mean-pooled token states,
cosine), so it starts exactly at cosine, and learns from the same licensed
pairs that an answer outranks its own paragraph's other sentences.

Loss, per batch of questions: each question's positives against every text
in the batch (its own hard negatives and every other question's texts), a
softmax over cosines scaled by :data:`SCALE` (the multiple-negatives ranking
loss, with several positives summed). Checkpoints every
:data:`CHECKPOINT_EVERY` steps hold the model, the optimiser, the schedule
and the data order, so a run stopped anywhere resumes where it stopped and
ends with the same weights as an uninterrupted one (seeded).

Needs the ``train`` extra (torch, transformers); nothing else imports it.
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

# Cosines lie in [-1, 1]; a softmax over them needs a temperature. 20 is the
# sentence-transformers default for this loss.
SCALE = 20.0
CHECKPOINT_EVERY = 100


@dataclass(frozen=True)
class EmbedderConfig:
    seed: int = 13
    questions_per_batch: int = 4  # each brings its positive and hard negatives (~8 texts)
    epochs: float = 1.0
    learning_rate: float = 2e-5
    warmup_share: float = 0.06
    weight_decay: float = 0.01
    max_tokens: int = 128  # a text's word pieces (the ingest's chunks fit)
    threads: int = 2


def question_batches(pairs: Sequence[Pair], config: EmbedderConfig) -> list[list[str]]:
    """Every training question (group) with a positive, shuffled by the
    seed and cut into batches; the same list on every run of a seed."""
    groups = sorted({p.group for p in pairs if p.split == "train" and p.label})
    random.Random(config.seed).shuffle(groups)
    n = config.questions_per_batch
    return [groups[i : i + n] for i in range(0, len(groups), n)]


def _encode(model, tokenizer, texts: Sequence[str], max_tokens: int):
    import torch

    encoded = tokenizer(list(texts), truncation=True, max_length=max_tokens, padding=True, return_tensors="pt")
    states = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    return torch.nn.functional.normalize(pooled, dim=-1)


def batch_loss(model, tokenizer, members: dict[str, list[Pair]], batch: Sequence[str], config: EmbedderConfig):
    """The multiple-negatives ranking loss of one batch of questions."""
    import torch

    texts: list[str] = []
    positives: list[list[int]] = []
    for group in batch:
        mine = []
        for pair in members[group]:
            if pair.text not in texts:
                texts.append(pair.text)
            if pair.label:
                mine.append(texts.index(pair.text))
        positives.append(mine)
    queries = [members[g][0].query for g in batch]
    q = _encode(model, tokenizer, queries, config.max_tokens)
    t = _encode(model, tokenizer, texts, config.max_tokens)
    logits = SCALE * q @ t.T
    losses = []
    for row, mine in enumerate(positives):
        losses.append(torch.logsumexp(logits[row], 0) - torch.logsumexp(logits[row, mine], 0))
    return torch.stack(losses).mean()


def train_embedder(
    pairs: Sequence[Pair], work: Path, config: EmbedderConfig, stop_after_s: float | None = None, log=print
) -> dict:
    """Train (or resume) in ``work``; returns the state. With
    ``stop_after_s`` the run checkpoints and returns once that much time
    has passed, to be resumed by the next call."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from chunkrag_train.train import base_model_dir, take_step, warmup_then_linear

    torch.set_num_threads(config.threads)
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = work / "checkpoint.pt"
    members: dict[str, list[Pair]] = {}
    for pair in pairs:
        members.setdefault(pair.group, []).append(pair)
    batches = question_batches(pairs, config)
    steps = math.ceil(len(batches) * config.epochs)
    warmup = max(1, int(steps * config.warmup_share))
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir())
    model = AutoModel.from_pretrained(base_model_dir())
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = warmup_then_linear(optimiser, steps, warmup)
    step, seconds, history = 0, 0.0, []
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        if state["config"] != asdict(config):
            raise SystemExit(f"{checkpoint} was written with another config: {state['config']}")
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        schedule.load_state_dict(state["schedule"])
        step, seconds, history = state["step"], state["seconds"], state["history"]
        torch.set_rng_state(state["torch_rng"])
        log(f"resumed at step {step}/{steps}")
    else:
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)

    def save() -> None:
        state = {
            "config": asdict(config),
            "model": model.state_dict(),
            "optimiser": optimiser.state_dict(),
            "schedule": schedule.state_dict(),
            "step": step,
            "seconds": seconds,
            "history": history,
            "torch_rng": torch.get_rng_state(),
        }
        torch.save(state, work / "checkpoint.tmp")
        (work / "checkpoint.tmp").replace(checkpoint)

    model.train()
    started = time.monotonic()
    base = seconds
    while step < steps:
        batch = batches[step % len(batches)]
        loss = batch_loss(model, tokenizer, members, batch, config)
        take_step(model, optimiser, schedule, loss)
        step += 1
        seconds = base + time.monotonic() - started
        if step % 20 == 0:
            history.append({"step": step, "loss": round(float(loss), 4)})
            log(f"step {step}/{steps} loss {float(loss):.4f} ({step / max(seconds, 1e-9) * 60:.0f} steps/min)")
        if step % CHECKPOINT_EVERY == 0 or step == steps:
            save()
        if stop_after_s is not None and time.monotonic() - started >= stop_after_s:
            save()
            break
    if step >= steps:
        out = work / "model"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / "training.json").write_text(
            json.dumps({"config": asdict(config), "steps": steps, "seconds": round(seconds, 1)}, indent=2) + "\n"
        )
    return {"step": step, "steps": steps, "seconds": round(seconds, 1), "done": step >= steps}


JUDGE_NAME = "judge-minilm.onnx"


def export_embedder(work: Path, out: Path | None = None) -> dict:
    """The trained judge as the embedder's own ONNX form: ``input_ids``,
    ``attention_mask``, ``token_type_ids`` in, the token states out (the
    caller mean-pools, as for all-MiniLM-L6-v2), int8 weights multiplied in
    float (float_arithmetic.py), so a text's vector does not depend on its
    batch or the CPU. Reads ``work``/model, or the last checkpoint when the
    run has not finished."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    from chunkrag_core.artifacts import file_sha256
    from chunkrag_train.float_arithmetic import convert_file
    from chunkrag_train.train import base_model_dir

    finished = work / "model"
    if finished.is_dir():
        model, step = AutoModel.from_pretrained(finished), None
    else:
        state = torch.load(work / "checkpoint.pt", weights_only=False)
        model, step = AutoModel.from_pretrained(base_model_dir()), state["step"]
        model.load_state_dict(state["model"])
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir())
    sample = tokenizer(["It was written by someone."], return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    fp32, int8 = work / "judge-minilm.fp32.onnx", work / "judge-minilm.int8.onnx"

    class States(torch.nn.Module):  # the token states only, as the embedder's graph gives them
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]

    with torch.no_grad():
        torch.onnx.export(
            States(model),
            tuple(sample[n] for n in names),
            str(fp32),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    target = out or work / JUDGE_NAME
    convert_file(int8, target)
    return {"path": str(target), "sha256": file_sha256(target), "bytes": target.stat().st_size, "step": step}
