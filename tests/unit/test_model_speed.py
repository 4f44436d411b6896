"""The test support that sizes a model call's timeout from the model's
measured speed (tests/support/model_speed.py), against a scripted server."""

from __future__ import annotations

from chunkrag_core.settings import ChatSettings
from local_services.scripted_openai import ScriptedOpenAI
from tests.support.model_speed import MARGIN, MOST_S, ModelSpeed, budgeted, measure


def test_a_calls_time_is_its_overhead_then_its_prompt_then_its_answer():
    assert ModelSpeed(prompt_per_s=100.0, completion_per_s=10.0, overhead_s=1.0).seconds(1000, 50) == 16.0


def _reply(timings: dict | None):
    def reply(_request: dict) -> tuple[int, dict]:
        body = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 24, "total_tokens": 324},
        }
        if timings is not None:
            body["timings"] = timings
        return 200, body

    return reply


def test_the_speeds_are_read_from_llama_cpp_timings_and_the_timeout_never_shrinks():
    # llama.cpp reports what the call cost: 300 prompt tokens in 3 s, 24 generated in 4 s.
    timings = {"prompt_ms": 3000, "prompt_per_second": 100.0, "predicted_ms": 4000, "predicted_per_second": 6.0}
    with ScriptedOpenAI(default=_reply(timings)) as server:
        chat = ChatSettings(base_url=server.base_url, timeout_s=1.0)
        speed = measure(chat)
        assert (speed.prompt_per_s, speed.completion_per_s) == (100.0, 6.0)
        sized = budgeted(chat, prompt_tokens=4000, completion_tokens=60)
        # At least 4 times (40 s + 10 s), plus the probe's own wait beyond the server's timings.
        assert MARGIN * 50.0 <= sized.timeout_s <= MOST_S
        assert budgeted(ChatSettings(base_url=server.base_url, timeout_s=900.0), 10, 1).timeout_s == 900.0


def test_without_timings_the_whole_call_sets_the_speed():
    with ScriptedOpenAI(default=_reply(None)) as server:
        speed = measure(ChatSettings(base_url=server.base_url))
    assert speed.overhead_s == 0.0 and speed.prompt_per_s == speed.completion_per_s > 0
