"""An answer written only from the kept chunks, citing them by chunk id."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatModel, ChatRequest, Message
from chunkrag_filter.processors import prompts

NOT_FOUND = "NOT FOUND"
_CITATION = re.compile(r"\[(\d+)\]")
# Tokens of a model's window kept for the prompt's own words (instructions,
# the question, the "[n]" marks) beside the passages and the answer.
PROMPT_RESERVE_TOKENS = 400
# Characters per token assumed when fitting passages: English runs about 4
# with Qwen's and OpenAI's tokenizers; 3 keeps a context of dense names inside.
CHARS_PER_TOKEN = 3.0


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    found: bool
    citations: tuple[str, ...]  # chunk ids, in order of first citation
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0  # model calls made (0 when there was nothing to answer from)
    left_out: int = 0  # passages that did not fit the model's context


def numbered_passages(chunks: Sequence[Chunk]) -> str:
    """The kept chunks as "[n] passage" blocks, headers included."""
    return "\n\n".join(f"[{i}] {prompts.passage(chunk.text, chunk.header)}" for i, chunk in enumerate(chunks, start=1))


def context_chars(context_tokens: int, max_tokens: int) -> int:
    """Characters of passages that fit a window of ``context_tokens`` beside
    the prompt and an answer of ``max_tokens``."""
    return max(0, int((context_tokens - max_tokens - PROMPT_RESERVE_TOKENS) * CHARS_PER_TOKEN))


def _rank(chunk: Chunk) -> float:
    return chunk.stage_scores.get("combined", chunk.score if chunk.score is not None else 0.0)


def fit_best_first(chunks: Sequence[Chunk], budget_chars: int) -> list[Chunk]:
    """The chunks that fit ``budget_chars`` (text and header), taken best
    first by the filter's combined score (else the retrieval score) and
    returned in their given order. Cutting from the end instead would drop
    the second best first: the kept order puts the best at both ends. The
    best chunk alone too long is cut to the budget rather than left out."""
    sizes = [len(c.text) + len(c.header or "") for c in chunks]
    if sum(sizes) <= budget_chars:
        return list(chunks)
    chosen, used = set(), 0
    for i in sorted(range(len(chunks)), key=lambda i: (-_rank(chunks[i]), i)):
        if used + sizes[i] <= budget_chars:
            chosen.add(i)
            used += sizes[i]
    if not chosen and chunks and budget_chars > 0:
        best = min(range(len(chunks)), key=lambda i: (-_rank(chunks[i]), i))
        room = max(0, budget_chars - len(chunks[best].header or ""))
        return [replace(chunks[best], text=chunks[best].text[:room])]
    return [c for i, c in enumerate(chunks) if i in chosen]


def answer_from_chunks(query: str, chunks: Sequence[Chunk], model: ChatModel, max_tokens: int = 256) -> Answer:
    """The answer from ``chunks``, fitted to the model's ``context_tokens``
    when it declares them (the lowest ranked passages left out, counted)."""
    if not chunks:
        return Answer(NOT_FOUND, False, ())
    window = getattr(model, "context_tokens", 0) or 0
    given = len(chunks)
    if window > 0:
        chunks = fit_best_first(chunks, context_chars(window, max_tokens))
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
        left_out=given - len(chunks),
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
