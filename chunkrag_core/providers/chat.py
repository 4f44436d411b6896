"""The chat-model protocol, and the one class that speaks to every
OpenAI-compatible server (OpenAI, Azure-style gateways, vLLM, llama.cpp).

The local default model and a cloud model go through the same code: only the
``base_url`` differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from chunkrag_core import cancellation, tracing


class ChatError(RuntimeError):
    """The chat provider failed; ``retryable`` says whether trying again may
    help, ``timed_out`` that it did not answer in time, ``status`` what it
    answered. The message names the provider's address (for logs and the
    command line); callers that must not show it read the fields."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None, timed_out: bool = False):
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.timed_out = timed_out


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: tuple[Message, ...]
    max_tokens: int = 64
    temperature: float = 0.0
    # Ask for the log-probabilities of the most likely first tokens, so a
    # yes/no judgement can be read as P(yes) instead of a printed number.
    top_logprobs: int = 0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatResponse:
    text: str
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # For the first generated token: candidate token -> log-probability.
    first_token_logprobs: Mapping[str, float] = field(default_factory=dict)


class ChatModel(Protocol):
    """One required method. A model may also carry ``context_tokens`` (its
    window, 0 or absent: unknown), which the answer's passages are fitted to."""

    def complete(self, request: ChatRequest) -> ChatResponse: ...


def probability_of(
    first_token_logprobs: Mapping[str, float], positive: Sequence[str], negative: Sequence[str]
) -> float | None:
    """P(positive) renormalised over the positive and negative answers among
    the first-token candidates; None when neither appears."""

    def mass(words: Sequence[str]) -> float:
        wanted = {w.lower() for w in words}
        return sum(math.exp(lp) for token, lp in first_token_logprobs.items() if token.strip().lower() in wanted)

    yes, no = mass(positive), mass(negative)
    if yes + no == 0.0:
        return None
    return yes / (yes + no)


class OpenAICompatibleChat:
    """Chat completions against any ``base_url`` speaking the OpenAI API.

    The ``openai`` client is created on first use; retries are left to the
    caller (the workers retry with backoff), so one call is one request.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        context_tokens: int = 0,
    ):
        self.model = model
        self.context_tokens = context_tokens
        self.base_url = base_url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._client = None

    def _client_or_new(self):
        if self._client is None:
            from openai import OpenAI

            # max_retries=0: a retry policy belongs to the caller, not hidden here.
            self._client = OpenAI(
                base_url=self.base_url, api_key=self.api_key or "unused", timeout=self.timeout_s, max_retries=0
            )
        return self._client

    def complete(self, request: ChatRequest) -> ChatResponse:
        import openai

        # A request gone makes no more calls; one in flight ends by its deadline.
        cancellation.check()
        options = {}
        if request.top_logprobs:
            options = {"logprobs": True, "top_logprobs": request.top_logprobs}
        with tracing.span(f"chat {self.model}", "client", {"gen_ai.request.model": self.model}) as current:
            # The model server's own trace, if it keeps one, joins ours.
            if traced := tracing.headers():
                options["extra_headers"] = traced
            try:
                response = self._client_or_new().chat.completions.create(
                    model=self.model,
                    messages=[{"role": m.role, "content": m.content} for m in request.messages],
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                    stop=list(request.stop) or None,
                    timeout=self._wait_s(),
                    **options,
                )
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                cancellation.check()  # cut short by its request's deadline: not the provider's failure
                raise chat_error(exc, self._where(), timeout_s=self.timeout_s) from exc
            usage = response.usage
            tracing.set_attributes(
                current,
                {
                    "gen_ai.usage.input_tokens": getattr(usage, "prompt_tokens", None),
                    "gen_ai.usage.output_tokens": getattr(usage, "completion_tokens", None),
                },
            )
        if not response.choices:
            raise ChatError(f"{self._where()} returned no choices", retryable=True)
        choice = response.choices[0]
        return ChatResponse(
            text=choice.message.content or "",
            model=response.model or self.model,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            first_token_logprobs=_first_token_logprobs(choice),
        )

    def _where(self) -> str:
        return self.base_url or "OpenAI"

    def _wait_s(self) -> float:
        """How long this call may wait: the timeout, or less when the
        request it serves has less time left."""
        token = cancellation.current()
        remaining = token.remaining() if token is not None else None
        return self.timeout_s if remaining is None else max(0.001, min(self.timeout_s, remaining))


def chat_error(exc: BaseException, where: str, *, timeout_s: float | None = None) -> ChatError:
    """The :class:`ChatError` for an exception of the ``openai`` client
    talking to ``where`` with a wait of ``timeout_s`` (anything else: a
    non-retryable failure)."""
    import openai

    if isinstance(exc, openai.RateLimitError):
        return ChatError(f"rate limited by {where}: {exc}", retryable=True, status=429)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return ChatError(f"{where} answered {status}: {exc.message}", retryable=status >= 500, status=status)
    if isinstance(exc, openai.APIConnectionError):  # a timeout among them
        timed_out = isinstance(exc, openai.APITimeoutError)
        waited = f" within {timeout_s:g} s" if timed_out and timeout_s else ""
        return ChatError(f"{where} did not answer{waited}: {exc}", retryable=True, timed_out=timed_out)
    return ChatError(f"{where} failed: {type(exc).__name__}: {exc}")


def _first_token_logprobs(choice) -> dict[str, float]:
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return {}
    first = content[0]
    candidates = {alt.token: alt.logprob for alt in (first.top_logprobs or [])}
    candidates.setdefault(first.token, first.logprob)
    return candidates
