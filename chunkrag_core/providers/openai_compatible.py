"""Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, llama.cpp, gateways)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from chunkrag_core import cancellation
from chunkrag_core.providers.embedding import EmbeddingError, normalise_rows

# Most servers cap one request's inputs; 256 stays under every limit we know.
MAX_INPUTS_PER_REQUEST = 256


class OpenAICompatibleEmbedder:
    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, dims: int | None = None):
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.dims = dims
        self._client = None

    def _client_or_new(self):
        if self._client is None:
            from openai import OpenAI

            # Local servers accept any key; the client insists on one.
            self._client = OpenAI(base_url=self.base_url, api_key=self.api_key or "unused")
        return self._client

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        client = self._client_or_new()
        rows: list[list[float]] = []
        for begin in range(0, len(texts), MAX_INPUTS_PER_REQUEST):
            cancellation.check()  # a request gone stops between batches
            batch = list(texts[begin : begin + MAX_INPUTS_PER_REQUEST])
            try:
                response = client.embeddings.create(model=self.model, input=batch)
            except Exception as exc:
                raise EmbeddingError(f"embeddings request to {self.base_url or 'OpenAI'} failed: {exc}") from exc
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(batch):
                raise EmbeddingError(f"asked for {len(batch)} embeddings, got {len(data)}")
            rows.extend(item.embedding for item in data)
        matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1) if rows else np.zeros((0, self.dims or 0))
        if self.dims and matrix.shape[1] != self.dims:
            raise EmbeddingError(f"model {self.model} returned {matrix.shape[1]} dims, settings say {self.dims}")
        return normalise_rows(matrix)
