"""Relevance judging with a scripted chat model (a unit-test double; the
integration tests use a real HTTP server and the local model)."""

import math

import pytest

from chunkrag_core.providers.chat import ChatResponse
from chunkrag_filter.processors.relevance import ScoringOptions, combine, heuristic_critic, judge
from tests.support.chat_doubles import DictCache, ScriptedChat


def yes(p: float) -> ChatResponse:
    return ChatResponse(
        text="Yes" if p >= 0.5 else "No",
        prompt_tokens=80,
        completion_tokens=1,
        first_token_logprobs={"Yes": math.log(p), "No": math.log(1 - p)},
    )


def test_confident_base_score_costs_one_call():
    model = ScriptedChat(yes(0.9))
    result = judge(
        "Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare.", model, ScoringOptions(critic="off")
    )
    assert result.calls == 1 and result.reflection is None
    assert result.base == pytest.approx(0.9) and result.combined == pytest.approx(0.9)
    assert model.requests[0].max_tokens == 1 and model.requests[0].top_logprobs == 10


def test_borderline_base_score_is_reflected_on():
    model = ScriptedChat(yes(0.5), ChatResponse(text="Final score: 0.8"))
    result = judge("q", "chunk", model, ScoringOptions(critic="off"))
    assert result.calls == 2 and result.reflection == pytest.approx(0.8)
    assert result.combined == pytest.approx((0.5 * 0.5 + 0.8 * 0.3) / 0.8)
    assert "Your initial score was: 0.50" in model.requests[1].messages[0].content


def test_without_logprobs_the_printed_number_is_parsed():
    model = ScriptedChat(ChatResponse(text="Yes"), ChatResponse(text="Relevance: 85%"))
    result = judge("q", "chunk", model, ScoringOptions(critic="off", use_logprobs=False))
    # yes/no text without logprobs gives 1.0, which is confident: no reflection
    assert result.base == 1.0 and result.calls == 1
    model = ScriptedChat(ChatResponse(text="Hmm"), ChatResponse(text="Relevance: 85%"))
    result = judge("q", "chunk", model, ScoringOptions(critic="off"))
    assert result.base == pytest.approx(0.85) and result.calls == 2


def test_garbage_output_is_recorded_not_guessed():
    model = ScriptedChat(ChatResponse(text="Hmm"), ChatResponse(text="I cannot say."))
    result = judge("q", "chunk", model, ScoringOptions(critic="off"))
    assert result.base is None and result.combined is None
    assert any("unreadable" in note for note in result.notes)


def test_cache_makes_a_repeat_free():
    cache = DictCache()
    first = judge("q", "chunk", ScriptedChat(yes(0.95)), ScoringOptions(critic="off"), cache=cache, model_name="m")
    again = judge("q", "chunk", ScriptedChat(), ScoringOptions(critic="off"), cache=cache, model_name="m")
    assert first.calls == 1 and again.calls == 0 and again.cached_calls == 1
    assert again.combined == first.combined


def test_likert_and_yes_no_modes():
    likert = judge("q", "c", ScriptedChat(ChatResponse(text="7")), ScoringOptions(method="likert"))
    assert likert.base == pytest.approx(6 / 9)
    yes_no = judge("q", "c", ScriptedChat(yes(0.2)), ScoringOptions(method="yes_no"))
    assert yes_no.combined == pytest.approx(0.2)


def test_heuristic_critic_checks_temporal_consistency_only():
    assert heuristic_critic("Who won the 1998 World Cup?", "France won the World Cup in 1998.") == 1.0
    assert heuristic_critic("Who won the 1998 World Cup?", "Brazil won the World Cup in 2002.") == 0.0
    assert heuristic_critic("Who won the 1998 World Cup?", "The final was played in Saint-Denis.") is None
    assert heuristic_critic("what is the capital?", "Paris is the capital since 987.") is None


def test_combine_redistributes_skipped_stages():
    assert combine(0.9, None, None, (0.5, 0.3, 0.2)) == pytest.approx(0.9)
    assert combine(0.6, 0.8, 0.0, (0.5, 0.3, 0.2)) == pytest.approx(0.54)
    assert combine(None, 0.8, 1.0, (0.5, 0.3, 0.2)) is None


def test_unknown_options_are_refused():
    with pytest.raises(ValueError, match="unknown scoring method"):
        ScoringOptions(method="vibes")
