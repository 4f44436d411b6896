"""The project's own relevance model, a MiniLM cross-encoder, on onnxruntime.

It reads the query and a chunk together and gives the probability that the
chunk holds what the query asks: the first relevance signal the filter has
that is not the retrieval's. Trained by ``python -m chunkrag_train`` on
SQuAD and NQ (the model card: chunkrag_core/model_files/relevance-minilm.md),
shipped as an int8 ONNX graph in this package, tokenized with the MiniLM
tokenizer the embedder uses. No torch.

It is also a :class:`~chunkrag_core.providers.rerank.Reranker` (``rerank:
local``): the design's reranking without Cohere.
"""

from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from chunkrag_core.artifacts import MINILM_TOKENIZER, RELEVANCE_INT8_ONNX, Artifact, verified_path
from chunkrag_core.providers.embedding import EmbeddingError

# Word pieces of query and chunk together, as in training: a chunk past it is
# cut (the query never is). ~160 pieces hold a ~600-character chunk.
MAX_TOKENS = 160
# Pairs per onnxruntime run; the pairs are length-sorted so padding is small.
BATCH_SIZE = 16


class RelevanceError(EmbeddingError):
    """The relevance model could not be loaded or failed on a batch."""


class LocalRelevanceModel:
    """Loads its graph on first use; safe to share between threads."""

    def __init__(
        self, threads: int = 2, batch_size: int = BATCH_SIZE, artifact: Artifact = RELEVANCE_INT8_ONNX
    ) -> None:
        self.threads = max(1, threads)
        self.batch_size = max(1, batch_size)
        self.artifact = artifact
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = None

    def load(self) -> "LocalRelevanceModel":
        """Read the graph now (a server calls this at start, not on its first search)."""
        with self._lock:
            if self._session is None:
                import onnxruntime
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(verified_path(MINILM_TOKENIZER)))
                tokenizer.no_padding()
                tokenizer.enable_truncation(MAX_TOKENS, strategy="only_second")
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                try:
                    self._session = onnxruntime.InferenceSession(
                        str(verified_path(self.artifact)), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # onnxruntime raises its own opaque types
                    raise RelevanceError(f"cannot load {self.artifact.name}: {exc}") from exc
                self._tokenizer = tokenizer
        return self

    def logits(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """The model's log-odds of relevance, one per text, in order."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        self.load()
        encodings = self._tokenizer.encode_batch([(query, text) for text in texts])
        out = np.empty(len(texts), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for begin in range(0, len(order), self.batch_size):
            rows = order[begin : begin + self.batch_size]
            out[rows] = self._run([encodings[i] for i in rows])
        return out

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """P(relevant) per text, in order."""
        return [_sigmoid(float(z)) for z in self.logits(query, texts)]

    def rerank(self, query: str, texts: Sequence[str]) -> list[tuple[int, float]]:
        scores = self.score(query, texts)
        return sorted(enumerate(scores), key=lambda pair: -pair[1])

    def _run(self, encodings) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        types, mask = np.zeros_like(ids), np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n], types[row, :n], mask[row, :n] = encoding.ids, encoding.type_ids, 1
        try:
            (logits,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        except Exception as exc:  # onnxruntime raises its own opaque types
            raise RelevanceError(f"onnxruntime failed on a batch of {len(encodings)}: {exc}") from exc
        return logits[:, 0]


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


_SHARED: LocalRelevanceModel | None = None
_SHARED_LOCK = threading.Lock()


def shared_relevance_model() -> LocalRelevanceModel:
    """One model per process (its graph is read once, on first use)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = LocalRelevanceModel()
        return _SHARED
