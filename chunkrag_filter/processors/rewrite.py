"""Query rewriting with the paper's prompt (Algorithm 1, line 1)."""

from __future__ import annotations

from dataclasses import dataclass

from chunkrag_core.providers.chat import ChatModel, ChatRequest, Message
from chunkrag_filter.processors import prompts

# A rewrite several times longer than the query is the model rambling, not a
# better query.
MAX_GROWTH = 4


@dataclass(frozen=True, slots=True)
class Rewrite:
    query: str
    original: str
    used: bool  # False when the model's answer was unusable and the original stands
    prompt_tokens: int = 0


def rewrite_query(query: str, model: ChatModel) -> Rewrite:
    response = model.complete(
        ChatRequest(messages=(Message("user", prompts.QUERY_REWRITE.format(query=query)),), max_tokens=64)
    )
    candidate = clean_rewrite(response.text)
    usable = bool(candidate) and len(candidate) <= MAX_GROWTH * max(len(query), 20)
    return Rewrite(candidate if usable else query, query, usable, response.prompt_tokens)


def clean_rewrite(text: str) -> str:
    """First non-empty line, without a "Rewritten Query:" label or quotes."""
    for line in text.strip().splitlines():
        line = line.strip()
        if not line:
            continue
        for label in ("rewritten query:", "query:"):
            if line.lower().startswith(label):
                line = line[len(label) :].strip()
        return line.strip("\"'“”` ").strip()
    return ""
