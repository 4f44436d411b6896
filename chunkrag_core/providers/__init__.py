"""Model providers behind small protocols, chosen by name from settings.

Each provider is created lazily by :func:`make_embedder` (and, later, the chat
and rerank factories), once per process, so importing this package costs
nothing and a worker loads its model on first use.
"""

import functools

from chunkrag_core.providers.chat import ChatError, ChatModel, OpenAICompatibleChat
from chunkrag_core.providers.embedding import Embedder, EmbeddingError, make_embedder
from chunkrag_core.settings import ChatSettings


@functools.lru_cache(maxsize=None)
def make_chat(settings: ChatSettings) -> ChatModel:
    """The chat model for ``settings``, one per process; opens no connection."""
    return OpenAICompatibleChat(
        model=settings.model,
        base_url=settings.base_url,
        api_key=settings.api_key,
        timeout_s=settings.timeout_s,
        context_tokens=settings.context_tokens,
    )


__all__ = ["ChatError", "ChatModel", "Embedder", "EmbeddingError", "make_chat", "make_embedder"]
