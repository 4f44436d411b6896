"""The OpenAI-compatible chat provider over real HTTP against a scripted server."""

import pytest

from chunkrag_core.providers.chat import ChatError, ChatRequest, Message, OpenAICompatibleChat
from chunkrag_filter.processors.relevance import ScoringOptions, judge
from local_services.scripted_openai import ScriptedOpenAI, completion, error


def ask(server, **options):
    chat = OpenAICompatibleChat(model="scripted-model", base_url=server.base_url)
    return chat.complete(ChatRequest(messages=(Message("user", "Is it?"),), **options))


def test_logprobs_travel_and_become_a_probability():
    with ScriptedOpenAI([completion("Yes", yes_probability=0.8)]) as server:
        response = ask(server, max_tokens=1, top_logprobs=10)
    assert response.text == "Yes" and response.prompt_tokens == 50
    assert response.first_token_logprobs["Yes"] == pytest.approx(-0.2231, abs=1e-3)
    assert server.requests[0]["logprobs"] is True and server.requests[0]["top_logprobs"] == 10
    assert server.requests[0]["model"] == "scripted-model"


@pytest.mark.parametrize(("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (401, False)])
def test_http_errors_become_chat_errors_that_say_if_a_retry_helps(status, retryable):
    with ScriptedOpenAI([error(status)]) as server:
        with pytest.raises(ChatError) as caught:
            ask(server)
    assert caught.value.retryable is retryable and caught.value.status == status


def test_an_unreachable_server_is_retryable():
    chat = OpenAICompatibleChat(model="m", base_url="http://127.0.0.1:9/v1", timeout_s=2)
    with pytest.raises(ChatError) as caught:
        chat.complete(ChatRequest(messages=(Message("user", "hi"),)))
    assert caught.value.retryable


def test_judging_through_http_without_logprobs_parses_the_printed_score():
    # The server ignores logprobs (as some gateways do): yes/no text, then the paper's number.
    with ScriptedOpenAI([completion("Hmm."), completion("Score: 0.45"), completion("0.7")]) as server:
        chat = OpenAICompatibleChat(model="m", base_url=server.base_url)
        result = judge("Who wrote Hamlet?", "Hamlet is a play.", chat, ScoringOptions(critic="off"))
    assert result.base == pytest.approx(0.45) and result.reflection == pytest.approx(0.7)
    assert result.calls == 3 and len(server.requests) == 3
