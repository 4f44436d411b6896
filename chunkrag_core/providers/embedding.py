"""The embedder protocol and the registry that builds one from settings."""

from __future__ import annotations

import functools
from typing import Callable, Protocol, Sequence

import numpy as np

from chunkrag_core.settings import EmbedderSettings


class EmbeddingError(RuntimeError):
    """The embedding provider failed or answered something unusable."""


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 rows, one per text, in order."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _local(settings: EmbedderSettings) -> Embedder:
    from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder

    return LocalMiniLMEmbedder(batch_size=settings.batch_size, threads=settings.threads)


def _openai(settings: EmbedderSettings) -> Embedder:
    from chunkrag_core.providers.openai_compatible import OpenAICompatibleEmbedder

    return OpenAICompatibleEmbedder(
        model=settings.model, base_url=settings.base_url, api_key=settings.api_key, dims=settings.dims
    )


EMBEDDERS: dict[str, Callable[[EmbedderSettings], Embedder]] = {"local": _local, "openai": _openai}


def embedder_identity(settings: EmbedderSettings) -> str:
    """What a cached vector is keyed by besides its text: the model that
    made it. The local graph by its pinned sha256 (a new graph is a new
    model, whatever its name); a remote one by its endpoint, name and size."""
    if settings.provider == "local":
        from chunkrag_core.artifacts import MINILM_INT8_ONNX

        return f"local:{MINILM_INT8_ONNX.sha256[:16]}"
    return f"{settings.provider}:{settings.base_url or ''}:{settings.model}:{settings.dims}"


@functools.lru_cache(maxsize=None)
def make_embedder(settings: EmbedderSettings) -> Embedder:
    """The embedder for ``settings``: one instance (so one loaded model) per
    process for equal settings, created on first call."""
    try:
        factory = EMBEDDERS[settings.provider]
    except KeyError:
        raise EmbeddingError(
            f"unknown embedder provider {settings.provider!r}; choose one of {sorted(EMBEDDERS)}"
        ) from None
    return factory(settings)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
