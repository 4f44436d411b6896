"""The local model's speed, measured when a test starts, and the timeout a
call of a given size needs at that speed.

The local llama-server shares the machine's cores with whatever else runs
(other tests, other jobs) and serves every caller's requests in a few slots,
so a call that takes seconds on a quiet machine took past the chat client's
fixed timeout on a busy one ("did not answer: Request timed out"). A slow
model is not what these tests test: each one that calls the model sizes its
calls' timeout from the speed measured here, in tokens per second, for the
largest prompt and answer it sends. Every wait stays bounded.
"""

from __future__ import annotations

import dataclasses
import time

import httpx

from chunkrag_core.settings import ChatSettings

# The probe: a prompt of a few hundred tokens and a short answer, enough to
# read both speeds (prompt processing and generation) off the server.
PROBE_PROMPT = "Summarise in one sentence: " + " ".join(
    f"Paragraph {n} says that the honey bees of hive {n} made {n * 3} kilograms of honey this year." for n in range(12)
)
PROBE_COMPLETION_TOKENS = 24
# The probe's own wait: the slowest this machine has been, with room.
PROBE_TIMEOUT_S = 600.0
# A call's timeout is this many times its expected time at the measured
# speed: the load changes between the probe and the call, and requests of
# other callers may be ahead of it in the server's slots.
MARGIN = 4.0
# No call waits longer than this, however slow the probe was: a model that
# slow is broken, not busy.
MOST_S = 3600.0


@dataclasses.dataclass(frozen=True)
class ModelSpeed:
    prompt_per_s: float  # prompt tokens processed per second
    completion_per_s: float  # tokens generated per second
    overhead_s: float  # the rest of a call: waiting for a slot, HTTP

    def seconds(self, prompt_tokens: int, completion_tokens: int) -> float:
        return self.overhead_s + prompt_tokens / self.prompt_per_s + completion_tokens / self.completion_per_s


def measure(chat: ChatSettings) -> ModelSpeed:
    """One call to the model at ``chat.base_url``: its speeds from llama.cpp's
    ``timings`` when the server reports them, else from the call's time alone."""
    started = time.monotonic()
    response = httpx.post(
        chat.base_url.rstrip("/") + "/chat/completions",
        json={
            "model": chat.model,
            "messages": [{"role": "user", "content": PROBE_PROMPT}],
            "max_tokens": PROBE_COMPLETION_TOKENS,
            "temperature": 0,
        },
        headers={"authorization": f"Bearer {chat.api_key or 'unused'}"},
        timeout=PROBE_TIMEOUT_S,
    )
    response.raise_for_status()
    wall = time.monotonic() - started
    body = response.json()
    usage = body.get("usage") or {}
    timings = body.get("timings") or {}
    if timings.get("prompt_per_second") and timings.get("predicted_per_second"):
        worked = (timings.get("prompt_ms", 0) + timings.get("predicted_ms", 0)) / 1000
        return ModelSpeed(timings["prompt_per_second"], timings["predicted_per_second"], max(0.0, wall - worked))
    tokens = max(1, usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
    return ModelSpeed(tokens / wall, tokens / wall, 0.0)


def budgeted(chat: ChatSettings, prompt_tokens: int, completion_tokens: int) -> ChatSettings:
    """``chat`` with a timeout for calls of up to ``prompt_tokens`` and
    ``completion_tokens`` at the model's speed now (never less than its own)."""
    speed = measure(chat)
    needed = MARGIN * speed.seconds(prompt_tokens, completion_tokens)
    return dataclasses.replace(chat, timeout_s=min(MOST_S, max(chat.timeout_s, needed)))
