"""The trained relevance model as ONNX: an fp32 graph, then int8 weights.

The graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids``
(batch x tokens, int64) and gives ``logits`` (batch x 1): the log-odds that
the chunk (second segment) holds what the query asks. onnxruntime's dynamic
quantisation stores the MatMul weights as int8; the shipped graph then
multiplies them in float (float_arithmetic.py: a score that does not depend
on the batch or the CPU). The project loads it with onnxruntime and the
MiniLM tokenizer it already ships (chunkrag_core/providers/local_relevance.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from chunkrag_core.artifacts import file_sha256
from chunkrag_train.float_arithmetic import convert_file

FP32_NAME = "relevance-minilm.fp32.onnx"
INT8_NAME = "relevance-minilm.int8.onnx"  # dynamic quantisation: an intermediate, beside the fp32 graph
SHIPPED_NAME = "relevance-minilm.onnx"


def model_files_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "chunkrag_core" / "model_files"


def export(model_dir: Path, out_dir: Path | None = None) -> dict:
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out_dir = out_dir or model_files_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sample = tokenizer(["who wrote it?"], ["It was written by someone."], return_tensors="pt")
    fp32 = model_dir / FP32_NAME  # the fp32 graph stays beside the checkpoint, not in the package
    inputs = (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dynamic = {name: {0: "batch", 1: "tokens"} for name in names}
    with torch.no_grad():
        torch.onnx.export(
            model,
            inputs,
            str(fp32),
            input_names=names,
            output_names=["logits"],
            dynamic_axes={**dynamic, "logits": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    int8 = model_dir / INT8_NAME
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    shipped = out_dir / SHIPPED_NAME
    convert_file(int8, shipped)
    training = json.loads((model_dir / "training.json").read_text()) if (model_dir / "training.json").exists() else {}
    return {
        "fp32": {"path": str(fp32), "sha256": file_sha256(fp32), "bytes": fp32.stat().st_size},
        "int8": {"path": str(int8), "sha256": file_sha256(int8), "bytes": int8.stat().st_size},
        "shipped": {"path": str(shipped), "sha256": file_sha256(shipped), "bytes": shipped.stat().st_size},
        "training": training.get("config"),
    }
