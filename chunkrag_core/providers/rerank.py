"""The reranker protocol and Cohere's rerank API behind it.

No cross-encoder ships in any package this project can install offline, so
the offline default is not a model here: the chunk filter reranks by the
relevance the LLM judge already gave each chunk (no extra call). Cohere is
used with ``rerank: cohere`` and a key (``CHUNKRAG_RERANK_API_KEY`` or
``CO_API_KEY``) or a base URL (``CHUNKRAG_RERANK_BASE_URL``).
"""

from __future__ import annotations

from typing import Protocol, Sequence

from chunkrag_core.providers.chat import ChatError


class Reranker(Protocol):
    def rerank(self, query: str, texts: Sequence[str]) -> list[tuple[int, float]]:
        """(index into ``texts``, relevance) pairs, most relevant first."""
        ...


class CohereReranker:
    def __init__(
        self, api_key: str, model: str = "rerank-english-v3.0", base_url: str | None = None, timeout_s: float = 30.0
    ):
        self.api_key, self.model, self.base_url, self.timeout_s = api_key, model, base_url, timeout_s
        self._client = None

    def _client_or_new(self):
        if self._client is None:
            import cohere

            options = {"base_url": self.base_url} if self.base_url else {}
            # max_retries=0: as with the chat provider, retry policy is the caller's.
            self._client = cohere.ClientV2(api_key=self.api_key, timeout=self.timeout_s, max_retries=0, **options)
        return self._client

    def rerank(self, query: str, texts: Sequence[str]) -> list[tuple[int, float]]:
        if not texts:
            return []
        try:
            response = self._client_or_new().rerank(
                model=self.model, query=query, documents=list(texts), top_n=len(texts)
            )
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            raise ChatError(
                f"Cohere rerank failed: {exc}", retryable=status in (None, 429) or (status or 0) >= 500, status=status
            ) from exc
        return [(item.index, float(item.relevance_score)) for item in response.results]
