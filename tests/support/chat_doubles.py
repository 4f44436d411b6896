"""Unit-test doubles for the chat model and the score cache (integration
tests use real HTTP servers instead)."""

from __future__ import annotations

from chunkrag_core.providers.chat import ChatRequest, ChatResponse


class ScriptedChat:
    """Answers with the given responses in order; records the requests."""

    def __init__(self, *responses: ChatResponse):
        self.responses = list(responses)
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return self.responses.pop(0)


class DictCache(dict):
    """A ScoreCache in a dict."""

    def get(self, key):
        return super().get(key)

    def set(self, key, value):
        self[key] = value
