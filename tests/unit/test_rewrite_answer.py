from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatResponse
from chunkrag_filter.processors.answer import answer_from_chunks
from chunkrag_filter.processors.rewrite import clean_rewrite, rewrite_query


class Fixed:
    def __init__(self, text):
        self.text, self.requests = text, []

    def complete(self, request):
        self.requests.append(request)
        return ChatResponse(text=self.text, prompt_tokens=50)


def test_rewrite_is_cleaned_and_falls_back_on_garbage():
    assert (
        clean_rewrite('\n Rewritten Query: "Henry Feilden occupation biography"\nmore')
        == "Henry Feilden occupation biography"
    )
    assert (
        rewrite_query("What is Henry Feilden's occupation?", Fixed("Henry Feilden occupation")).query
        == "Henry Feilden occupation"
    )
    rambling = rewrite_query("short q", Fixed("x" * 500))
    assert rambling.query == "short q" and not rambling.used
    assert not rewrite_query("q", Fixed("   ")).used


def chunk(i, text):
    return Chunk(doc_id="d", position=i, text=text, start=0, end=len(text))


def test_answer_cites_chunk_ids():
    chunks = [chunk(0, "Paris is the capital of France."), chunk(1, "Lyon is a city.")]
    model = Fixed("Paris [1], not Lyon [2] [1] [9].")
    answer = answer_from_chunks("capital of France?", chunks, model)
    assert answer.found and answer.citations == ("d:0", "d:1")
    assert "[1] Paris is the capital of France." in model.requests[0].messages[0].content


def test_not_found_with_no_chunks_costs_no_call_and_model_can_say_not_found():
    model = Fixed("unused")
    assert answer_from_chunks("q", [], model).text == "NOT FOUND" and model.requests == []
    answer = answer_from_chunks("q", [chunk(0, "x")], Fixed("NOT FOUND."))
    assert not answer.found and answer.citations == ()


def test_the_answer_prompt_shows_each_chunks_header_in_front_of_its_text():
    with_header = Chunk(
        doc_id="d", position=0, text="It was founded\n in 1901.", start=0, end=24, header="Nobel Prize > History"
    )
    model = Fixed("1901 [1].")
    answer_from_chunks("When was the Nobel Prize founded?", [with_header, chunk(1, "No header here.")], model)
    prompt = model.requests[0].messages[0].content
    assert "[1] Nobel Prize > History: It was founded in 1901.\n\n[2] No header here." in prompt


def test_a_header_with_a_summary_line_stays_one_passage_line():
    from chunkrag_filter.processors.prompts import passage

    assert (
        passage("Trains  run\nlate.", "notes\nThis document is about Tokyo.\nTokyo railways")
        == "notes | This document is about Tokyo. | Tokyo railways: Trains run late."
    )
    assert passage("Plain text.", "") == "Plain text."


def scored(i, text, combined):
    return chunk(i, text).with_score(combined=combined)


def test_a_context_too_big_for_the_window_loses_its_lowest_ranked_passages_first():
    from chunkrag_filter.processors.answer import context_chars, fit_best_first

    # (4096 - 256 - 400) tokens of 3 characters.
    assert context_chars(4096, 256) == 10320
    assert context_chars(500, 256) == 0
    # The kept order puts the best at both ends: 0.9 first, 0.8 last.
    kept = [scored(0, "a" * 40, 0.9), scored(1, "b" * 40, 0.5), scored(2, "c" * 40, 0.3), scored(3, "d" * 40, 0.8)]
    assert fit_best_first(kept, 200) == kept
    assert [c.position for c in fit_best_first(kept, 120)] == [0, 1, 3]
    assert [c.position for c in fit_best_first(kept, 80)] == [0, 3]
    # A smaller passage lower down still goes in where a bigger one did not fit.
    uneven = [scored(0, "a" * 50, 0.9), scored(1, "b" * 60, 0.8), scored(2, "c" * 20, 0.1)]
    assert [c.position for c in fit_best_first(uneven, 75)] == [0, 2]
    # The best alone too long: cut to the budget, never nothing.
    (only,) = fit_best_first([scored(0, "x" * 500, 0.9), scored(1, "y" * 600, 0.2)], 100)
    assert only.position == 0 and only.text == "x" * 100
    assert fit_best_first([], 100) == []


def test_the_answer_fits_the_models_window_and_cites_what_it_was_given():
    class Windowed(Fixed):
        context_tokens = 550  # room for (550 - 16 - 400) * 3 = 402 characters

    kept = [scored(0, "Paris " * 50, 0.9), scored(1, "Lyon " * 30, 0.2), scored(2, "Nice " * 20, 0.7)]
    model = Windowed("Paris [1], Nice [2].")
    answer = answer_from_chunks("capital?", kept, model, max_tokens=16)
    sent = model.requests[0].messages[0].content
    assert "Lyon" not in sent and "[2] Nice" in sent
    assert answer.left_out == 1 and answer.citations == ("d:0", "d:2")
    # A model that declares no window gets every passage.
    plain = Fixed("Paris [1].")
    assert answer_from_chunks("capital?", kept, plain, max_tokens=16).left_out == 0
    assert "Lyon" in plain.requests[0].messages[0].content
