"""An answer written only from the kept chunks, citing them by chunk id."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatModel, ChatRequest, Message
from chunkrag_filter.processors import prompts

NOT_FOUND = "NOT FOUND"
_CITATION = re.compile(r"\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    found: bool
    citations: tuple[str, ...]  # chunk ids, in order of first citation
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0  # model calls made (0 when there was nothing to answer from)


def numbered_passages(chunks: Sequence[Chunk]) -> str:
    """The kept chunks as "[n] passage" blocks, headers included."""
    return "\n\n".join(f"[{i}] {prompts.passage(chunk.text, chunk.header)}" for i, chunk in enumerate(chunks, start=1))


def answer_from_chunks(query: str, chunks: Sequence[Chunk], model: ChatModel, max_tokens: int = 256) -> Answer:
    if not chunks:
        return Answer(NOT_FOUND, False, ())
    passages = numbered_passages(chunks)
    response = model.complete(
        ChatRequest(
            messages=(Message("user", prompts.ANSWER.format(passages=passages, query=query)),), max_tokens=max_tokens
        )
    )
    text = response.text.strip()
    found = bool(text) and NOT_FOUND not in text.upper()
    citations = tuple(
        dict.fromkeys(chunks[int(n) - 1].chunk_id for n in _CITATION.findall(text) if 1 <= int(n) <= len(chunks))
    )
    return Answer(
        text if found else NOT_FOUND,
        found,
        citations if found else (),
        response.prompt_tokens,
        response.completion_tokens,
        calls=1,
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """A true/false verdict on a claim from the kept chunks (PubHealth)."""

    label: str | None  # "true", "false", or None when the output had neither
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 1


def verdict_from_chunks(claim: str, chunks: Sequence[Chunk], model: ChatModel, max_tokens: int = 4) -> Verdict:
    """Judge ``claim`` true or false from the kept chunks; with none kept the
    model is asked from the claim alone (the paper's PubHealth setting)."""
    passages = numbered_passages(chunks) or "(none)"
    response = model.complete(
        ChatRequest(
            messages=(Message("user", prompts.VERDICT.format(passages=passages, claim=claim)),), max_tokens=max_tokens
        )
    )
    match = _VERDICT_WORD.search(response.text)
    return Verdict(
        match.group(1).lower() if match else None,
        response.text.strip(),
        response.prompt_tokens,
        response.completion_tokens,
    )


_VERDICT_WORD = re.compile(r"\b(true|false)\b", re.IGNORECASE)
