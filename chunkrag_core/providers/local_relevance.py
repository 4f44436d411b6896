"""The project's own relevance model, a MiniLM cross-encoder, on onnxruntime.

It reads the query and a chunk together and gives the probability that the
chunk holds what the query asks: the first relevance signal the filter has
that is not the retrieval's. Trained by ``python -m chunkrag_train`` on
SQuAD and NQ (the model card: chunkrag_core/model_files/relevance-minilm.md),
shipped as an ONNX graph of int8 weights multiplied in float in this
package, tokenized with the MiniLM tokenizer the embedder uses. No torch.

A text's score does not depend on the texts scored beside it, on the batch
size, on the thread count or on the CPU kind (to float rounding): the filter
cuts on it, so the same chunk must get the same decision in any request, on
any machine. The graph's weights are dequantised into float constants once,
at load (``session.disable_quant_qdq``; without it onnxruntime would quantise
the activations per run again).

It is also a :class:`~chunkrag_core.providers.rerank.Reranker` (``rerank:
local``): the design's reranking without Cohere.
"""

from __future__ import annotations

import math
import threading
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from chunkrag_core import cancellation
from chunkrag_core.artifacts import MINILM_TOKENIZER, RELEVANCE_ONNX, Artifact, verified_path
from chunkrag_core.providers.embedding import EmbeddingError

# Word pieces of query and chunk together, as in training: a chunk past it is
# cut (the query never is). ~160 pieces hold a ~600-character chunk.
MAX_TOKENS = 160
# The shortest cut allowed: below it a question leaves the chunk next to nothing.
MIN_TOKENS = 32
# Pairs per onnxruntime run; the pairs are length-sorted so padding is small.
BATCH_SIZE = 16


class RelevanceError(EmbeddingError):
    """The relevance model could not be loaded or failed on a batch."""


class LocalRelevanceModel:
    """Loads its graph on first use; safe to share between threads.

    ``path``: another graph of the same inputs and output (the fp32 export
    the shipped graph's int8 weights were quantised from, a retrained model), read as
    it is: unlike the pinned ``artifact`` its hash is not checked here, so
    whoever names it records it. ``max_tokens``: where query and chunk are
    cut (the model was trained at :data:`MAX_TOKENS`; shorter is faster).
    ``return_memory``: onnxruntime's memory arena keeps what a run
    allocated for the next runs and never gives it back; with it, each run
    shrinks the arena back at its end (a few percent of CPU), so a
    long-running server holds the memory of a burst of searches only while
    they run. Turning the arena off instead returned the memory too, but
    concurrent runs peaked at nearly twice the arena's RSS (934 against 491
    MB, three threads; 593 MB shrinking), and with glibc's mmap threshold
    fixed (chunkrag_gateway/allocator.py) it held less than shrinking but
    took about 30% more CPU a run (297 against 229 ms, four threads).
    ``turns``: what each batch runs
    inside (the gateway's fair turns between callers, which wait for the
    batch's turn); none by default."""

    def __init__(
        self,
        threads: int = 2,
        batch_size: int = BATCH_SIZE,
        artifact: Artifact = RELEVANCE_ONNX,
        *,
        path: Path | str | None = None,
        max_tokens: int = MAX_TOKENS,
        return_memory: bool = False,
        turns: Callable[[], AbstractContextManager] | None = None,
    ) -> None:
        if max_tokens < MIN_TOKENS:
            raise ValueError(f"max_tokens must be at least {MIN_TOKENS} (a query and some chunk), got {max_tokens}")
        self.threads = max(1, threads)
        self.batch_size = max(1, batch_size)
        self.artifact = artifact
        self.path = Path(path) if path is not None else None
        self.max_tokens = max_tokens
        self.return_memory = return_memory
        self.turns = turns or nullcontext
        self._run_options = None  # made with the session
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = self._long_query_tokenizer = None

    def load(self) -> "LocalRelevanceModel":
        """Read the graph now (a server calls this at start, not on its first search)."""
        with self._lock:
            if self._session is None:
                import onnxruntime
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(verified_path(MINILM_TOKENIZER)))
                tokenizer.no_padding()
                # A query too long to leave the chunk a piece is cut too (the
                # tokenizer refuses "only_second" then), not refused.
                long_query = Tokenizer.from_str(tokenizer.to_str())
                tokenizer.enable_truncation(self.max_tokens, strategy="only_second")
                long_query.enable_truncation(self.max_tokens, strategy="longest_first")
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                # Fold each int8 weight's DequantizeLinear into a float constant
                # instead of fusing it into a quantised MatMul: float arithmetic,
                # so a score is the same in any batch and on any CPU.
                options.add_session_config_entry("session.disable_quant_qdq", "1")
                graph, name = (self.path, str(self.path)) if self.path else (None, self.artifact.name)
                if graph is not None and not graph.is_file():
                    raise RelevanceError(f"no relevance model at {graph}; leave the path out for the shipped one")
                try:
                    self._session = onnxruntime.InferenceSession(
                        str(graph or verified_path(self.artifact)), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # onnxruntime raises its own opaque types
                    raise RelevanceError(f"cannot load {name}: {exc}") from exc
                self._tokenizer, self._long_query_tokenizer = tokenizer, long_query
                if self.return_memory:
                    self._run_options = onnxruntime.RunOptions()
                    self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        return self

    def logits(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """The model's log-odds of relevance, one per text, in order."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        encodings = self._encode(query, texts)
        out = np.empty(len(texts), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for begin in range(0, len(order), self.batch_size):
            cancellation.check()  # a request gone stops between batches
            rows = order[begin : begin + self.batch_size]
            with self.turns():
                out[rows] = self._run([encodings[i] for i in rows])
        return out

    def token_counts(self, query: str, texts: Sequence[str]) -> list[int]:
        """Word pieces the model reads per text (query and text, after the cut)."""
        return [len(e.ids) for e in self._encode(query, texts)] if texts else []

    def _encode(self, query: str, texts: Sequence[str]):
        self.load()
        try:
            return self._tokenizer.encode_batch([(query, text) for text in texts])
        except Exception:  # the query alone fills max_tokens (tokenizers raises a bare Exception)
            return self._long_query_tokenizer.encode_batch([(query, text) for text in texts])

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
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            (logits,) = self._session.run(None, feeds, self._run_options)
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
