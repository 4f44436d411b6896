"""The answer table's pure parts with literal numbers: the exact tests, the
rule that chooses the shipped cut, the facts parsing, the table, the cache."""

from __future__ import annotations

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatRequest, ChatResponse, Message
from chunkrag_eval.answer_table import (
    GenerationCache,
    MeteredChat,
    RowOutcome,
    choose_cut,
    context_budget_chars,
    cut_holds,
    discordant,
    fit_context,
    grade_biography,
    leave_one_out,
    mcnemar_exact,
    parse_facts,
    parse_support,
    sign_test,
    strip_citations,
    summarise,
    table_markdown,
)


def test_mcnemar_exact_matches_the_binomial():
    # 13 against 2: 2 * P(X <= 2 | n = 15) = 2 * (1 + 15 + 105) / 32768 = 0.0073853
    assert mcnemar_exact(13, 2) == pytest.approx(0.0073853, abs=1e-6)
    assert mcnemar_exact(2, 13) == mcnemar_exact(13, 2)
    # 9 against 2: 2 * (1 + 11 + 55) / 2048 = 0.0654297
    assert mcnemar_exact(9, 2) == pytest.approx(0.0654297, abs=1e-6)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 0) == 1.0


def test_discordant_pairs_and_the_sign_test():
    assert discordant([True, True, False, False], [True, False, True, True]) == (1, 2)
    with pytest.raises(ValueError, match="length"):
        discordant([True], [True, False])
    # 5 better, 0 worse, one tie: 2 / 32
    assert sign_test([1.0, 0.5, 0.9, 0.8, 0.7, 0.3], [0.5, 0.5, 0.1, 0.2, 0.6, 0.2]) == pytest.approx(0.0625)


def flags(right: int, n: int) -> list[bool]:
    return [True] * right + [False] * (n - right)


def test_a_cut_holds_within_one_point_and_not_significantly_below():
    reference = flags(50, 100)
    assert cut_holds(reference, flags(50, 100))
    assert cut_holds(reference, flags(49, 100))  # one point, one discordant pair
    assert not cut_holds(reference, flags(48, 100))  # two points
    assert cut_holds(reference, flags(60, 100))  # better always holds
    # Within one point but significantly below: 10 right only with the reference, 1 only with the cut, on 1000.
    ref = flags(510, 1000)
    trial = [False] * 10 + [True] * 500 + [True] + [False] * 489
    assert sum(ref) - sum(trial) == 9
    assert mcnemar_exact(*discordant(ref, trial)) < 0.05
    assert not cut_holds(ref, trial)


def rows_for(reference: list[bool], by_cut: dict[float, list[bool]]) -> dict[str, list[bool]]:
    return {"rag": reference, **{f"cut={c:g}": v for c, v in by_cut.items()}}


CUTS = (0.005, 0.01, 0.02, 0.05, 0.09)


def test_the_rule_takes_the_highest_cut_holding_on_every_set():
    popqa = rows_for(
        flags(40, 100),
        {0.005: flags(40, 100), 0.01: flags(40, 100), 0.02: flags(39, 100), 0.05: flags(36, 100), 0.09: flags(33, 100)},
    )
    pubhealth = rows_for(
        flags(60, 100),
        {0.005: flags(60, 100), 0.01: flags(61, 100), 0.02: flags(58, 100), 0.05: flags(60, 100), 0.09: flags(62, 100)},
    )
    choice = choose_cut({"popqa": popqa, "pubhealth": pubhealth}, CUTS)
    assert choice.held and choice.cut == 0.01 and choice.holding == (0.005, 0.01)
    assert choose_cut({"popqa": popqa}, CUTS).cut == 0.02


def test_when_no_cut_holds_the_most_permissive_is_shipped_and_flagged():
    sets = {"popqa": rows_for(flags(40, 100), {c: flags(30, 100) for c in CUTS})}
    choice = choose_cut(sets, CUTS)
    assert not choice.held and choice.cut == 0.005 and choice.holding == ()


def test_leave_one_dataset_out_chooses_on_the_others_and_reports_the_held_out():
    a = rows_for(flags(40, 100), {0.005: flags(40, 100), 0.01: flags(40, 100), 0.02: flags(40, 100)})
    b = rows_for(flags(60, 100), {0.005: flags(60, 100), 0.01: flags(60, 100), 0.02: flags(55, 100)})
    out = {row["held_out"]: row for row in leave_one_out({"a": a, "b": b}, (0.005, 0.01, 0.02))}
    assert out["b"]["cut"] == 0.02 and out["b"]["chosen_on"] == ["a"]
    assert out["b"]["accuracy_cut"] == 0.55 and not out["b"]["holds"]
    assert out["b"]["right_only_reference"] == 5 and out["b"]["right_only_cut"] == 0
    assert out["a"]["cut"] == 0.01 and out["a"]["holds"]


def test_facts_are_lines_without_bullets_and_support_reads_the_first_word():
    text = "1. Ada Lovelace was a mathematician.\n- She wrote notes [1].\n* ok\n\nAda Lovelace was a mathematician."
    assert parse_facts(text) == ["Ada Lovelace was a mathematician.", "She wrote notes [1]."]
    assert parse_facts("\n".join(f"Fact number {i}." for i in range(20)), limit=3) == [
        "Fact number 0.",
        "Fact number 1.",
        "Fact number 2.",
    ]
    assert parse_support(" True.") and parse_support("Supported") and parse_support("yes")
    assert not parse_support("False") and not parse_support("Not supported") and not parse_support("")
    assert strip_citations("Born in 1815 [1] in London [2, 3].") == "Born in 1815 in London."


def chunk(i: int, text: str) -> Chunk:
    return Chunk(doc_id="d", position=i, text=text, start=0, end=len(text))


def test_a_context_is_cut_to_the_model_window_in_order():
    assert context_budget_chars(4096, 48) == int((4096 - 48 - 400) * 3.0)
    kept, was_cut = fit_context([chunk(0, "a" * 5), chunk(1, "b" * 5), chunk(2, "c")], 10)
    assert [c.position for c in kept] == [0, 1] and was_cut
    assert fit_context([chunk(0, "a")], 10) == ([chunk(0, "a")], False)


def outcome(item: str, row: str, correct: bool | None = None, score: float | None = None, **kw) -> RowOutcome:
    base = dict(text="", context_chars=100, chunks=2, calls=1, prompt_tokens=200, completion_tokens=10, seconds=2.0)
    return RowOutcome(item_id=item, row=row, correct=correct, score=score, **{**base, **kw})


def test_rows_are_summarised_and_paired_with_rag():
    outcomes = [outcome(str(i), "rag", i < 3) for i in range(5)] + [
        outcome(str(i), "filter", i in (0, 3, 4), prompt_tokens=100, calls=1) for i in range(5)
    ]
    table = summarise(outcomes, "popqa", ("rag", "filter"))
    assert table["rag"]["accuracy"] == 0.6 and "p_vs_rag" not in table["rag"]
    assert table["filter"] == {
        "n": 5,
        "prompt_tokens_per_answer": 100.0,
        "judge_prompt_tokens_per_question": 0.0,
        "model_calls_per_question": 1.0,
        "seconds_per_question": 2.0,
        "context_chars_per_question": 100.0,
        "contexts_cut_to_fit": 0,
        "accuracy": 0.6,
        "right_only_here": 2,
        "right_only_rag": 2,
        "p_vs_rag": 1.0,
        "test": "exact McNemar",
    }


def test_a_row_on_fewer_questions_is_paired_on_those_only():
    outcomes = [outcome(str(i), "rag", True) for i in range(4)] + [outcome("0", "filter_judge", False)]
    table = summarise(outcomes, "popqa", ("rag", "filter_judge"))
    assert table["filter_judge"]["n"] == 1 and table["filter_judge"]["right_only_rag"] == 1


def test_biography_rows_use_scores_and_the_sign_test():
    outcomes = [outcome(str(i), "rag", score=0.5) for i in range(3)] + [
        outcome("0", "filter", score=1.0),
        outcome("1", "filter", score=0.5),
        outcome("2", "filter", score=0.0),
    ]
    row = summarise(outcomes, "bio", ("rag", "filter"))["filter"]
    assert row["accuracy"] == 0.5 and row["better_than_rag"] == 1 and row["worse_than_rag"] == 1
    assert row["p_vs_rag"] == 1.0 and row["test"] == "exact sign test on per-question scores"


def test_the_markdown_table_has_a_row_per_method_and_a_dash_for_what_did_not_run():
    summary = summarise(
        [outcome("0", "rag", True), outcome("0", "filter", False, prompt_tokens=80)], "popqa", ("rag", "filter")
    )
    text = table_markdown({"popqa": summary}, ("no_retrieval", "rag", "filter"))
    lines = text.splitlines()
    assert lines[0].startswith("| method | popqa acc | tokens | calls | s/q | n | p vs RAG |")
    assert lines[2] == "| no retrieval | – | – | – | – | – | – |"
    assert lines[3] == "| all retrieved (RAG) | 100.0 | 200 | 1.00 | 2.0 | 1 | – |"
    assert lines[4] == "| filter (default, no model call) | 0.0 | 80 | 1.00 | 2.0 | 1 | 1.000 |"


class Scripted:
    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return ChatResponse(self.replies.pop(0), prompt_tokens=50, completion_tokens=5)


def test_the_cache_answers_a_repeated_prompt_and_counts_it_as_its_first_run(tmp_path):
    model = Scripted(["Paris [1]."])
    cache = GenerationCache(tmp_path / "g.sqlite")
    request = ChatRequest(messages=(Message("user", "Where?"),), max_tokens=48)
    first, second = MeteredChat(model, cache, "m"), MeteredChat(model, cache, "m")
    assert first.complete(request).text == "Paris [1]."
    assert second.complete(request).text == "Paris [1]."
    assert len(model.requests) == 1
    assert (second.calls, second.cached, second.prompt_tokens) == (1, 1, 50)
    other_cap = ChatRequest(messages=request.messages, max_tokens=49)
    assert GenerationCache.key("m", other_cap) != GenerationCache.key("m", request)
    assert GenerationCache.key("n", request) != GenerationCache.key("m", request)


def test_the_same_prompt_asked_by_two_rows_at_once_is_answered_once():
    """Two rows whose prompts are the very same, in flight together, wait
    for one answer: a server batching them on its slots may answer the two
    differently, and a table must not depend on which was written last."""
    import threading

    arrived, release = threading.Event(), threading.Event()

    class Slow(Scripted):
        def complete(self, request):
            arrived.set()
            release.wait(5)
            return super().complete(request)

    model = Slow(["Paris [1].", "Paris, France [1]."])
    chat = MeteredChat(model, None, "m")
    request = ChatRequest(messages=(Message("user", "Where?"),), max_tokens=48)
    texts = []
    first = threading.Thread(target=lambda: texts.append(chat.complete(request).text))
    first.start()
    arrived.wait(5)
    other = chat.fresh()
    second = threading.Thread(target=lambda: texts.append(other.complete(request).text))
    second.start()
    # The second waits on the first's answer (the future's condition), not on the model.
    (pending,) = chat._in_flight.values()
    for _ in range(500):
        if pending._condition._waiters:
            break
        threading.Event().wait(0.01)
    release.set()
    first.join(5)
    second.join(5)
    assert texts == ["Paris [1].", "Paris [1]."] and len(model.requests) == 1
    assert (other.calls, other.cached, other.prompt_tokens) == (1, 1, 50)
    # Once answered, the same prompt without a cache is asked again.
    assert chat.complete(request).text == "Paris, France [1]." and len(model.requests) == 2


def test_a_biography_is_graded_fact_by_fact_against_the_pool():
    model = Scripted(["- Ada was born in 1815.\n- Ada wrote music.", "True", "False"])
    facts = grade_biography("Ada was born in 1815 and wrote music [1].", [chunk(0, "Ada, born 1815")], model, 1000)
    assert facts == (("Ada was born in 1815.", True), ("Ada wrote music.", False))
    assert "[1]" not in model.requests[0].messages[0].content
    assert "Ada, born 1815" in model.requests[1].messages[0].content
    assert grade_biography("NOT FOUND", [], Scripted([]), 1000) == ()


def test_limits_are_one_number_or_one_per_set():
    from chunkrag_eval.answer_table import limit_for, parse_limits

    assert parse_limits("200") == {"*": 200} and parse_limits(None) == {}
    limits = parse_limits("popqa=200, bio=10")
    assert limit_for(limits, "bio") == 10 and limit_for(limits, "pubhealth") is None
    assert limit_for(parse_limits("bio=10,50"), "popqa") == 50
    with pytest.raises(ValueError, match="SET=N"):
        parse_limits("popqa=many")
    with pytest.raises(ValueError, match="at least 1"):
        parse_limits("0")
