"""The open-corpus table's pure parts, with literal numbers: which chunks
each row keeps, the cosine threshold rule, the rows as data, the pairing
with all N, and the corpus fingerprint."""

from __future__ import annotations

import dataclasses

import pytest

from chunkrag_core.settings import Settings
from chunkrag_eval.datasets import EvalItem
from chunkrag_eval.open_corpus import corpus_fingerprint, index_name, parse_distractors
from chunkrag_eval.open_eval import (
    Outcome,
    default_choice,
    filter_options_for,
    gate_run,
    row_json,
    row_label,
    summarise,
    usable_rows,
)
from chunkrag_eval.open_rows import (
    COSINE_THRESHOLDS,
    DEFAULT_GATE,
    ROWS,
    Row,
    choose_cosine_threshold,
    choose_default,
    kept_flags,
    row_for,
    rows_named,
    select_cosine,
    select_same_chars,
    select_top,
)
from chunkrag_filter.pipeline import FilterOptions
from ingest_pipeline.sources import plain_document


def test_same_characters_takes_the_best_hybrid_scores_until_at_least_the_budget_in_retrieval_order():
    chars = [100, 300, 50, 200]
    scores = [0.9, 0.8, 0.7, 0.6]
    # 100 is short of 420; 100 + 300 = 400 still short; 50 more crosses it: taken, then stop.
    assert select_same_chars(chars, scores, 420) == [0, 1, 2]
    assert select_same_chars(chars, scores, 400) == [0, 1]  # exactly the budget
    assert select_same_chars(chars, scores, 0) == []
    # Ranked by score, returned in retrieval order.
    assert select_same_chars([100, 100, 100], [0.1, 0.9, 0.5], 150) == [1, 2]


def test_same_characters_gives_top_k_at_least_the_budget_it_matches_and_at_most_one_chunk_more():
    chars = [120, 80, 300, 40, 95]
    scores = [0.5, 0.9, 0.7, 0.2, 0.6]
    for budget in (1, 39, 80, 175, 200, 635):
        kept = select_same_chars(chars, scores, budget)
        total = sum(chars[i] for i in kept)
        assert total >= budget and total - max(chars[i] for i in kept) < budget
    assert select_same_chars(chars, scores, 10_000) == [0, 1, 2, 3, 4]  # all there is


def test_top_keeps_the_first_k_or_all_there_are():
    assert select_top(10, 5) == [0, 1, 2, 3, 4]
    assert select_top(3, 5) == [0, 1, 2]


def test_cosine_keeps_what_is_strictly_above_the_threshold_as_embeddings_filter_does():
    cosine = [0.31, 0.30, 0.5, 0.1, 0.29999]
    assert select_cosine(cosine, 0.3) == [0, 2]
    assert select_cosine(cosine, 0.6) == []
    assert select_cosine(cosine, -1.0) == [0, 1, 2, 3, 4]


def test_kept_flags_say_whether_a_kept_chunk_has_the_property():
    assert kept_flags([[0, 2], [], [1]], [[False, True, True], [True], [False, False]]) == [True, False, False]


def _flags(right: int, n: int) -> list[bool]:
    return [True] * right + [False] * (n - right)


def test_the_threshold_rule_takes_the_highest_that_stays_within_one_point_and_not_significantly_below():
    reference = _flags(100, 200)  # all N: 0.500
    flags = {t: reference for t in COSINE_THRESHOLDS}
    # 0.3 loses one answer of 200 (0.5 points): holds; 0.35 and above lose three (1.5 points): do not.
    flags[0.3] = _flags(99, 200)
    for t in COSINE_THRESHOLDS:
        if t > 0.3:
            flags[t] = _flags(97, 200)
    choice = choose_cosine_threshold({"popqa": (reference, flags)})
    assert choice.held and choice.cut == 0.3
    assert choice.holding == (0.1, 0.15, 0.2, 0.25, 0.3)


def test_the_threshold_rule_needs_every_set_and_falls_back_to_the_lowest():
    reference = _flags(50, 100)
    good = {t: reference for t in COSINE_THRESHOLDS}
    bad = {t: _flags(40, 100) for t in COSINE_THRESHOLDS}  # ten points below at every t
    choice = choose_cosine_threshold({"a": (reference, good), "b": (reference, bad)})
    assert not choice.held and choice.cut == min(COSINE_THRESHOLDS) and choice.holding == ()


def test_a_threshold_that_does_better_than_all_holds():
    reference = _flags(50, 100)
    flags = {t: reference for t in COSINE_THRESHOLDS}
    flags[0.6] = _flags(60, 100)
    assert choose_cosine_threshold({"a": (reference, flags)}).cut == 0.6


def test_rows_are_data_and_a_same_characters_row_brings_the_row_it_matches():
    assert [r.name for r in rows_named(["topk_filter_chars"])] == ["all", "filter", "topk_filter_chars"]
    assert rows_named(None) == ROWS
    with pytest.raises(ValueError, match="choose among"):
        rows_named(["nope"])
    with pytest.raises(ValueError, match="needs k"):
        Row("bad", "bad", "top")
    with pytest.raises(ValueError, match="unknown row kind"):
        Row("bad", "bad", "sideways")


def test_parametric_rows_name_a_cut_the_cross_encoder_or_the_characters_they_match():
    assert row_for("cut=0.05").options == {"fixed_threshold": 0.05}
    assert row_for("crossencoder_cut=0.2").options == {"relevance": "crossencoder", "fixed_threshold": 0.2}
    relative = row_for("crossencoder_relative=0.5")
    assert relative.options == {"relevance": "crossencoder", "threshold": "relative", "fixed_threshold": 0.5}
    assert row_for("relative=0.8").options == {"threshold": "relative", "fixed_threshold": 0.8}
    assert filter_options_for(relative).threshold == "relative" and gate_run(relative) == "off"
    topk = row_for("topk_chars_of=cut=0.1")
    assert topk.kind == "same_chars" and topk.of == "cut=0.1"
    names = [r.name for r in rows_named(["top5", "topk_chars_of=crossencoder_cut=0.3"])]
    assert names == ["all", "top5", "crossencoder_cut=0.3", "topk_chars_of=crossencoder_cut=0.3"]
    for bad, why in (("cut=x", "must be a number"), ("cut=1.5", "between 0 and 1"), ("topk_chars_of=top9", "unknown")):
        with pytest.raises(ValueError, match=why):
            row_for(bad)
    usable, skipped = usable_rows(rows_named(["cut=0.05", "crossencoder_cut=0.1"]))
    assert [r.name for r in usable] == ["all", "cut=0.05", "crossencoder_cut=0.1"] and not skipped


def test_every_filter_row_declares_its_gate_and_runs_behind_it():
    shipped = FilterOptions().gate  # whichever gate the filter ships
    ran = {r.name: gate_run(r) for r in ROWS if r.kind == "filter"}
    assert ran == {
        "filter": shipped,
        "filter_gate_off": "off",
        "filter_crossencoder": "off",
        "llm_judge": "off",
        "gate": "retrieval",
        "gate_crossencoder": "crossencoder",
    }
    assert {r.name: r.gate for r in ROWS if r.kind == "filter"}["filter"] == DEFAULT_GATE
    # Only the row on the default gate leaves the gate out of its overrides.
    assert row_for("filter").overrides == {}
    assert row_for("filter_gate_off").overrides == {"gate": "off"}
    assert row_for("gate=0.3").overrides == {"gate": "retrieval", "gate_cut": 0.3}
    assert filter_options_for(row_for("gate_crossencoder=0.2")).gate_cut == 0.2
    for name in ("cut=0.1", "notfound_cut=0.1", "crossencoder_cut=0.1"):
        assert gate_run(row_for(name)) == "off", name
    # The table and the result file name the gate that ran on the default one.
    assert row_label(row_for("filter")).endswith(f"gate {shipped}")
    assert row_json(row_for("filter"))["gate"] == DEFAULT_GATE
    assert row_json(row_for("filter"))["gate_run"] == shipped
    assert "gate" not in row_json(row_for("top5"))
    for bad, why in (
        (dict(kind="filter"), "declares its gate"),
        (dict(kind="filter", gate="sometimes"), "declares its gate"),
        (dict(kind="top", k=5, gate="off"), "only a filter row"),
        (dict(kind="filter", gate="off", options={"gate": "retrieval"}), "declared by gate="),
    ):
        with pytest.raises(ValueError, match=why):
            Row("bad", "bad", **bad)


def _flags(right: int, n: int = 40) -> list[bool]:
    return [True] * right + [False] * (n - right)


def test_the_default_turns_away_the_most_unanswerable_questions_among_those_holding_on_every_answerable_set():
    all_popqa, all_pub = _flags(60, 100), _flags(70, 100)
    answerable = {
        "popqa": {
            "all": (all_popqa, 1700.0),
            "filter": (all_popqa, 1600.0),
            "gate": (_flags(59, 100), 1500.0),  # one point below, not significant: holds
            "gate=0.5": (_flags(55, 100), 1000.0),  # five points below: does not hold
            "notfound_cut=0.1": (_flags(60, 100), 900.0),
        },
        "pubhealth": {
            "all": (all_pub, 1900.0),
            "filter": (all_pub, 1800.0),
            "gate": (_flags(70, 100), 1700.0),
            "gate=0.5": (_flags(70, 100), 1200.0),
            "notfound_cut=0.1": (_flags(71, 100), 1000.0),
        },
    }
    not_found = {"filter": (0, 80), "gate": (50, 80), "gate=0.5": (70, 80), "notfound_cut=0.1": (6, 80)}
    chosen = choose_default(answerable, not_found, candidates=("filter", "gate", "gate=0.5", "notfound_cut=0.1"))
    assert chosen.row == "gate" and chosen.held
    assert chosen.holding == ("filter", "gate", "notfound_cut=0.1")
    assert chosen.tokens["gate"] == 1600.0 and chosen.not_found["gate"] == 0.625


def test_the_default_stays_when_the_best_turns_away_a_tenth_or_less_and_ties_go_to_fewer_tokens():
    answerable = {"popqa": {"all": (_flags(30), 1700.0), "a": (_flags(30), 900.0), "b": (_flags(30), 500.0)}}
    few = choose_default(answerable, {"a": (4, 40), "b": (4, 40)}, candidates=("a", "b"))
    assert few.row == "filter" and not few.held and few.holding == ("a", "b")
    tie = choose_default(answerable, {"a": (5, 40), "b": (5, 40)}, candidates=("a", "b"))
    assert tie.row == "b" and tie.held  # 5 of 40 is over a tenth; b spends fewer tokens
    # One fewer right of 40 is 2.5 points: more than two points below.
    worse = {"popqa": {"all": (_flags(30), 1700.0), "a": (_flags(29), 300.0)}}
    assert choose_default(worse, {"a": (40, 40)}, candidates=("a",)).holding == ()


def test_the_default_choice_pairs_the_candidates_with_all_n_and_counts_the_unanswerable_kept_empty():
    outcomes = [
        _outcome("1", "all", True, 4000, True),
        _outcome("2", "all", True, 4000, True),
        _outcome("3", "all", True, 4000, None),  # not answered: left out
        _outcome("1", "gate", True, 800, True),
        _outcome("2", "gate", True, 800, True),
        _outcome("3", "gate", True, 800, True),
        _outcome("1", "top5", True, 400, False),  # not a candidate
        _outcome("9", "all", None, 4000, kind="absent"),
        _outcome("9", "gate", None, 0, kind="absent", kept=()),
        _outcome("8", "gate", None, 500, kind="absent"),
    ]
    chosen = default_choice(outcomes)
    assert chosen["row"] == "gate" and chosen["held"] and chosen["answerable_questions"] == {"popqa": 2}
    assert chosen["prompt_tokens_per_answer"] == {"gate": 200.0}
    assert chosen["not_found_without_a_call"] == {"gate": 0.5}
    assert chosen["unanswerable_questions"] == {"popqa absent": 1}
    assert default_choice([o for o in outcomes if o.kind == "absent"]) is None


def test_a_filter_row_with_an_option_the_filter_does_not_take_is_skipped_with_a_note():
    rows = (
        Row("all", "all N", "all"),
        Row("filter_new", "the filter with a new judge", "filter", options={"no_such_option": "x"}, gate="off"),
        Row("topk_new", "top-k at its characters", "same_chars", of="filter_new"),
        Row("filter_strict", "the filter at a stricter cut", "filter", options={"fixed_threshold": 0.05}, gate="off"),
    )
    usable, skipped = usable_rows(rows)
    assert [r.name for r in usable] == ["all", "filter_strict"]
    assert "no_such_option" in skipped["filter_new"] and "skipped" in skipped["filter_new"]
    assert "filter_new" in skipped["topk_new"]


def _outcome(
    item: str,
    row: str,
    aic: bool | None,
    chars: int,
    correct: bool | None = None,
    *,
    kind: str = "answerable",
    kept: tuple[int, ...] = (0,),
    found: bool | None = None,
) -> Outcome:
    if found is None and (correct is not None or kind != "answerable"):
        found = bool(kept)
    return Outcome(
        "popqa",
        item,
        20,
        row,
        kept,
        chars,
        aic,
        bool(aic),
        correct=correct,
        prompt_tokens=chars // 4,
        kind=kind,
        answer_in_context_substring=aic,
        found=found,
        confidence=0.5 if kept else 0.0,
    )


def test_each_row_is_paired_with_all_n_on_the_same_questions():
    rows = (Row("all", "all N", "all"), Row("top5", "top-5", "top", k=5))
    outcomes = [
        _outcome("1", "all", True, 1000, True),
        _outcome("2", "all", True, 1000, True),
        _outcome("3", "all", False, 1000, False),
        _outcome("1", "top5", True, 400, True),
        _outcome("2", "top5", False, 400, False),
        _outcome("3", "top5", True, 400),
        _outcome("7", "all", None, 1000, kind="absent", found=True),
        _outcome("7", "top5", None, 400, kind="absent", found=False),
    ]
    summary = summarise(outcomes, rows)
    table = summary["popqa"]["20"]
    assert table["all"]["answer_in_context"] == pytest.approx(2 / 3, abs=1e-4)
    top = table["top5"]
    assert top["answer_in_context"] == pytest.approx(2 / 3, abs=1e-4)
    assert top["discordant"] == [1, 1] and top["p_vs_all"] == 1.0
    assert top["chars_share_of_all"] == 0.4 and top["chars_per_question"] == 400
    assert top["nothing_kept"] == 0.0 and "choose_ms_per_question" in top
    # The model's figures over the two questions answered, paired on those.
    assert top["model"]["n"] == 2 and top["model"]["accuracy"] == 0.5
    assert top["model"]["discordant"] == [0, 1] and top["model"]["prompt_tokens_per_question"] == 100
    # The unanswerable kind has a table of its own: made up, or said not found.
    absent = summary["popqa absent"]["20"]
    assert absent["all"]["model"]["made_up"] == 1.0 and absent["top5"]["model"]["said_not_found"] == 1.0
    assert "answer_in_context" not in absent["all"] and "own_pool_in_context" not in absent["all"]


def test_a_top_k_row_is_paired_with_the_row_whose_characters_it_was_given():
    rows = (
        Row("all", "all N", "all"),
        Row("cut=0.5", "cut", "filter", options={"fixed_threshold": 0.5}, gate="off"),
        Row("topk_chars_of=cut=0.5", "top-k", "same_chars", of="cut=0.5"),
    )
    outcomes = [_outcome(str(i), "all", i < 2, 1000, kept=tuple(range(8))) for i in range(3)]
    outcomes += [
        _outcome("0", "cut=0.5", True, 300, kept=(0, 1)),
        _outcome("1", "cut=0.5", True, 300, kept=(0, 1, 2)),
        _outcome("2", "cut=0.5", False, 300, kept=(0,)),
        _outcome("0", "topk_chars_of=cut=0.5", False, 300, kept=(0, 1)),
        _outcome("1", "topk_chars_of=cut=0.5", True, 300, kept=(0, 1)),
        _outcome("2", "topk_chars_of=cut=0.5", False, 300, kept=(0,)),
    ]
    table = summarise(outcomes, rows)["popqa"]["20"]
    assert table["cut=0.5"]["chunks_median"] == 2.0 and table["all"]["chunks_median"] == 8.0
    # over the two questions all N can answer from (the third's eight miss it)
    assert table["cut=0.5"]["where_all_hold"] == {"n": 2, "answer_kept": 2, "chunks_median": 2.5}
    # right only with top-k, right only with the row it matched
    assert table["topk_chars_of=cut=0.5"]["against_matched_row"] == {"discordant": [0, 1], "p": 1.0}
    assert "against_matched_row" not in table["cut=0.5"]


def test_selective_answering_draws_each_row_over_answerable_and_unanswerable_questions():
    from chunkrag_eval.open_eval import selective_answering

    rows = (Row("all", "all N", "all"), Row("gate", "gate", "filter", gate="retrieval"))
    outcomes = [
        _outcome("1", "all", True, 1000, True),
        _outcome("2", "all", True, 1000, False),
        _outcome("9", "all", None, 1000, kind="absent", found=True),
        _outcome("1", "gate", True, 1000, True),
        _outcome("2", "gate", True, 1000, False),
        _outcome("9", "gate", None, 0, kind="absent", kept=()),
    ]
    curves = selective_answering(outcomes, rows)["20"]
    # all N answers all three (one right); the gate turns the unanswerable one away
    assert curves["all"]["model"]["coverage"] == 1.0 and curves["all"]["model"]["accuracy_answered"] == 0.3333
    assert curves["gate"]["model"]["coverage"] == 0.6667 and curves["gate"]["model"]["accuracy_answered"] == 0.5
    assert curves["gate"]["in_context"]["coverage"] == 0.6667


def test_distractor_sets_parse_and_refuse_what_does_not_exist():
    assert parse_distractors("nq,squad") == {"nq": None, "squad": None}
    assert parse_distractors("nq=1000") == {"nq": 1000}
    assert parse_distractors("none") == {}
    with pytest.raises(ValueError, match="choose among nq, squad"):
        parse_distractors("wiki")
    with pytest.raises(ValueError, match="NAME=N"):
        parse_distractors("nq=many")


def test_the_index_name_changes_with_the_corpus_and_with_the_chunker():
    settings = Settings()
    docs = [plain_document("a", "One sentence. Another one.", "t:a"), plain_document("b", "Third.", "t:b")]
    name = index_name(docs, settings)
    assert name.startswith("chunkrag-open-") and name == index_name(list(reversed(docs)), settings)
    assert index_name(docs[:1], settings) != name
    other = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, similarity_threshold=0.5))
    assert corpus_fingerprint(docs, other) != corpus_fingerprint(docs, settings)


def test_a_tiny_p_keeps_its_significant_digits():
    from chunkrag_eval.open_rows import paired_with_reference

    # 18 discordant pairs all one way: p = 2 / 2**18.
    assert paired_with_reference([False] * 18, [True] * 18) == {"discordant": [0, 18], "p_vs_all": 7.63e-06}


def test_the_rows_share_one_reading_of_each_questions_candidates():
    from chunkrag_eval.open_eval import RememberedRelevance

    calls = []

    class Counting:
        def score(self, query, texts):
            calls.append((query, tuple(texts)))
            return [0.1 * len(t) for t in texts]

    remembered = RememberedRelevance(Counting())
    first = remembered.score("q", ["ab", "c"])
    again = remembered.score("q", ["ab", "c"])
    assert first == again == [pytest.approx(0.2), pytest.approx(0.1)]
    remembered.score("q", ["c"])  # another set of texts is read again
    assert calls == [("q", ("ab", "c")), ("q", ("c",))]
    again.append(9.0)  # a caller's copy, not the kept scores
    assert remembered.score("q", ["ab", "c"]) == first


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_row_reading_the_same_candidates_is_charged_the_models_time_whatever_ran_first():
    from chunkrag_eval.open_eval import RememberedRelevance

    clock = FakeClock()

    class Slow:  # 0.25 s a call of three texts, 0.4 s of five
        def score(self, query, texts):
            clock.now += {3: 0.25, 5: 0.4}[len(texts)]
            return [0.5] * len(texts)

    def load():  # a one-off: charged to no row
        clock.now += 2.0
        return Slow()

    remembered = RememberedRelevance(load=load, clock=clock)
    remembered.score("q", ["a", "b", "c"])
    assert remembered.settle() == pytest.approx(-2.0)  # it ran 2.25 s: 0.25 s are its own
    remembered.score("q", ["a", "b", "c"])  # from memory: no time passes
    assert remembered.settle() == pytest.approx(0.25)
    remembered.score("q", ["a", "b", "c"])
    remembered.score("q", ["a", "b", "c", "d", "e"])
    assert remembered.settle() == pytest.approx(0.25)  # 0.4 s ran; 0.25 more from memory
    assert remembered.settle() == 0.0


def test_two_gate_rows_on_one_question_cost_the_same_in_either_order():
    from chunkrag_core.chunk import Chunk
    from chunkrag_eval.open_eval import RememberedRelevance, Retrieved, _filter_kept
    from chunkrag_eval.unanswerable import Asked

    clock = FakeClock()

    class Slow:  # the gate's cross-encoder reads the best three: 0.3 s, literal
        def score(self, query, texts):
            clock.now += 0.3
            return [0.9] * len(texts)

    texts = ["To rotate a key, press Rotate.", "Keys expire yearly.", "Lunch is at noon.", "The sky is blue."]
    chunks = tuple(
        Chunk("d", i, t, 0, len(t), score=1.0 - i / 10, stage_scores={"cosine": 0.6 - i / 10, "bm25": 1.0 - i / 4})
        for i, t in enumerate(texts)
    )
    item = EvalItem("q1", "How do I rotate a key?", " ".join(texts), ("Rotate",))
    r = Retrieved(
        Asked("popqa", "answerable", item),
        4,
        chunks,
        (1, 0.9, 0.8, 0.7),
        (0.6, 0.5, 0.4, 0.3),
        (30,) * 4,
        (True,) * 4,
        0.0,
    )
    rows = [row_for("gate_crossencoder=0.05"), row_for("gate_crossencoder=0.5")]
    for order in (rows, rows[::-1]):
        remembered = RememberedRelevance(Slow(), clock=clock)
        seconds = [
            _filter_kept(r, filter_options_for(row), None, relevance=remembered, clock=clock)[1] for row in order
        ]
        assert seconds == [pytest.approx(0.3), pytest.approx(0.3)]
