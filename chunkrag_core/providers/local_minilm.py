"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: the offline default embedder.

No torch: the packaged tokenizer.json feeds an onnxruntime session, and the
token states are mean-pooled over the attention mask and L2-normalised, as
sentence-transformers does for this model.

The graph stores int8 weights and multiplies in float (onnxruntime folds
each Cast and Mul into a float constant at load), so a text's vector does
not depend on the texts embedded beside it, on the batch, on the threads or
on the CPU kind. The session runs each batch on one thread, and ``threads``
batches run at once (the calling thread takes its share): onnxruntime's own
threads meet at every operator, so with other work on the machine one that
lost its core held up the other, and half the CPU went to that: a cold
post-search's embedding took 7.8 s of CPU that way and 4.4 s with a thread
per batch, the vectors equal to the bit (2026-12-04, AMD EPYC, 2 cores,
load 9-18; bench/results/post_search_cold.json).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from chunkrag_core import cancellation
from chunkrag_core.artifacts import MINILM_INT8_ONNX, MINILM_TOKENIZER, verified_path
from chunkrag_core.providers.embedding import EmbeddingError, normalise_rows

# The model was trained on inputs of at most 256 word pieces; longer inputs
# are truncated, as sentence-transformers does.
MAX_TOKENS = 256
DIMS = 384


class LocalMiniLMEmbedder:
    """Loads its model on first use; safe to share between threads."""

    dims = DIMS

    def __init__(self, batch_size: int = 16, threads: int = 2, graph: Path | None = None) -> None:
        # ``graph``: another ONNX graph of the same shape (token states out),
        # such as a fine-tuned judge (chunkrag_train/judge_embedder.py);
        # None: the packaged all-MiniLM-L6-v2, its sha256 checked.
        self.graph = graph
        self.batch_size = max(1, batch_size)
        self.threads = max(1, threads)
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = None
        self._helpers: ThreadPoolExecutor | None = None

    def _load(self):
        with self._lock:
            if self._session is None:
                import onnxruntime
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(verified_path(MINILM_TOKENIZER)))
                # The shipped tokenizer pads every input to 128 tokens; pooling
                # over that padding ruins short texts such as queries, and the
                # padding wastes time. Batches are padded by hand instead.
                tokenizer.no_padding()
                tokenizer.enable_truncation(MAX_TOKENS)
                options = onnxruntime.SessionOptions()
                # One thread per batch; the batches themselves run side by side (_batches).
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
                graph = self.graph if self.graph is not None else verified_path(MINILM_INT8_ONNX)
                try:
                    self._session = onnxruntime.InferenceSession(
                        str(graph), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # onnxruntime raises its own opaque types
                    raise EmbeddingError(f"cannot load the embedding graph {graph}: {exc}") from exc
                self._tokenizer = tokenizer
                if self.threads > 1:
                    self._helpers = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="chunkrag-embed")
        return self._session, self._tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMS), dtype=np.float32)
        session, tokenizer = self._load()
        encodings = tokenizer.encode_batch(list(texts))
        token_ids = [e.ids for e in encodings]
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        # Length-sorted batches keep padding (wasted compute) small.
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        batches = [order[begin : begin + self.batch_size] for begin in range(0, len(order), self.batch_size)]
        self._batches(session, token_ids, batches, out)
        return out

    def _batches(self, session, token_ids: list[list[int]], batches: list[list[int]], out: np.ndarray) -> None:
        """Each batch's rows of ``out``, the calling thread and up to
        ``threads - 1`` helpers each taking the next batch not yet taken."""
        pending = iter(batches)
        taking = threading.Lock()
        # The caller's request: the helpers run outside its context, so they check its token directly.
        token = cancellation.current()

        def work() -> None:
            while True:
                if token is not None:
                    token.check()  # a request gone stops between batches
                with taking:
                    rows = next(pending, None)
                if rows is None:
                    return
                out[rows] = self._run(session, [token_ids[i] for i in rows])

        helpers = self._helpers
        started = [helpers.submit(work) for _ in range(min(self.threads, len(batches)) - 1)] if helpers else []
        try:
            work()
        finally:
            for future in started:
                future.result()

    @staticmethod
    def _run(session, batch_ids: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch_ids)
        input_ids = np.zeros((len(batch_ids), width), dtype=np.int64)
        mask = np.zeros_like(input_ids)
        for row, ids in enumerate(batch_ids):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        try:
            (states,) = session.run(
                None,
                {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)},
            )
        except Exception as exc:  # onnxruntime raises its own opaque types
            raise EmbeddingError(f"onnxruntime failed on a batch of {len(batch_ids)}: {exc}") from exc
        weights = mask[:, :, None].astype(np.float32)
        pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        return normalise_rows(pooled)
