"""The filter chain with a scripted judge (unit-test double)."""

import dataclasses

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_core.providers.chat import ChatResponse
from chunkrag_filter.pipeline import FilterOptions, run_filter
from chunkrag_filter.processors.redundancy import DEFAULT_REDUNDANCY_THRESHOLD
from chunkrag_filter.processors.relevance import Judgement
from search_extension.ask import answer_for


def chunk(i, vector, text=None):
    return Chunk(doc_id="d", position=i, text=text or f"chunk {i}", start=0, end=1, vector=vector, score=1.0 - i / 10)


def scripted_judge(scores):
    def judge_many(query, chunks, options):
        return [
            Judgement(scores[c.chunk_id], None, None, scores[c.chunk_id], calls=1, prompt_tokens=80) for c in chunks
        ]

    return judge_many


class Answerer:
    def __init__(self, text="Answer [1]."):
        self.text, self.calls = text, 0

    def complete(self, request):
        self.calls += 1
        return ChatResponse(text=self.text, prompt_tokens=200, completion_tokens=10)


CHUNKS = [
    chunk(0, [1, 0, 0]),
    chunk(1, [0.99, 0.14, 0]),
    chunk(2, [0, 1, 0]),
    chunk(3, [0, 0, 1]),
    chunk(4, [0.6, 0, 0.8]),
]
# The paper's filter: near-duplicates dropped, the judge's scores as they
# come, cut by Algorithm 1, the kept chunks reranked by score (here with the
# best at both ends). The shipped default calibrates the scores, cuts at the
# calibration's cut and keeps the retrieval order, with no redundancy stage.
PAPER = FilterOptions(
    gate="off",
    threshold="dynamic",
    calibration=None,
    judge_top=None,
    redundancy_threshold=DEFAULT_REDUNDANCY_THRESHOLD,
    rerank="score",
    lost_in_the_middle=True,
)


def test_redundancy_scoring_threshold_rerank_order_and_answer():
    scores = {"d:0": 0.9, "d:2": 0.2, "d:3": 0.7, "d:4": 0.1}
    model = Answerer()
    result = run_filter("q", CHUNKS, model=model, judge_many=scripted_judge(scores), options=PAPER)
    # d:1 repeats d:0 (cos 0.99); mean of the rest is 0.475, spread: T = μ
    assert result.threshold.value == pytest.approx(0.475)
    assert [c.chunk_id for c in result.kept] == ["d:0", "d:3"]
    assert {d.chunk.chunk_id: d.reason for d in result.decisions} == {
        "d:1": "redundant",
        "d:0": "above_threshold",
        "d:2": "below_threshold",
        "d:3": "above_threshold",
        "d:4": "below_threshold",
    }
    assert result.kept[0].stage_scores["combined"] == 0.9
    # The filter ends at the order; the answer is written from its result.
    assert result.model_calls == 4 and result.prompt_tokens == 4 * 80 and model.calls == 0
    answer = answer_for("q", result, None, model)
    assert answer.citations == ("d:0",) and answer.calls == 1 and answer.prompt_tokens == 200


def test_lost_in_the_middle_order_of_kept_chunks():
    scores = {"d:0": 0.9, "d:2": 0.8, "d:3": 0.85, "d:4": 0.1}
    result = run_filter(
        "q",
        CHUNKS,
        model=Answerer(),
        judge_many=scripted_judge(scores),
        options=dataclasses.replace(PAPER, answer=False),
    )
    # ranked by score: d:0, d:3, d:2 -> ends hold the two best
    assert [c.chunk_id for c in result.kept] == ["d:0", "d:2", "d:3"]


def test_nothing_relevant_falls_back_to_top_k_or_says_not_found():
    zeros = {"d:0": 0.0, "d:2": 0.0, "d:3": 0.0, "d:4": 0.0}
    # all equal: var 0 < ε, T = μ + σ = 0, so all pass; use a fixed bar instead
    options = FilterOptions(
        gate="off",
        threshold="fixed",
        fixed_threshold=0.5,
        fallback="top_k",
        fallback_k=2,
        answer=False,
        redundancy_threshold=0.9,
    )
    result = run_filter("q", CHUNKS, model=Answerer(), judge_many=scripted_judge(zeros), options=options)
    assert result.nothing_relevant and [c.chunk_id for c in result.kept] == ["d:0", "d:2"]
    assert [d.reason for d in result.decisions if d.kept] == ["fallback", "fallback"]

    model = Answerer()
    options = FilterOptions(
        gate="off", threshold="fixed", fixed_threshold=0.5, fallback="not_found", redundancy_threshold=0.9
    )
    result = run_filter("q", CHUNKS, model=model, judge_many=scripted_judge(zeros), options=options)
    assert result.nothing_relevant and result.kept == () and answer_for("q", result, None, model).text == "NOT FOUND"
    assert model.calls == 0


def test_unscored_chunks_are_reported_and_dropped():
    def judge_many(query, chunks, options):
        return [
            Judgement(None, None, None, None, calls=1, notes=("unreadable",))
            if c.position == 2
            else Judgement(0.8, None, None, 0.8, calls=1)
            for c in chunks
        ]

    result = run_filter(
        "q", CHUNKS, model=Answerer(), judge_many=judge_many, options=dataclasses.replace(PAPER, answer=False)
    )
    assert {d.chunk.chunk_id: d.reason for d in result.decisions}["d:2"] == "unscored"
    assert "d:2" not in [c.chunk_id for c in result.kept]


def test_the_default_scores_every_candidate_from_retrieval_signals_without_a_judge_call(tmp_path):
    from chunkrag_filter.processors.calibration import Calibrated, Configured, LogisticModel, write_calibration

    no_judge = LogisticModel(
        ("cosine", "cosine_gap", "bm25", "inv_rank", "log_chars"),
        (3.376989, 0.006575, 0.625046, 0.766057, 0.826934),
        -3.754981,
    )
    path = write_calibration(tmp_path / "calibration.json", Calibrated(no_judge, 0.4), None)

    def never(query, chunks, options):
        raise AssertionError("the default asks no judge")

    signals = [{"cosine": 0.8, "bm25": 1.0}, {"cosine": 0.2, "bm25": 0.0}, {"cosine": 0.75, "bm25": 0.6}]
    chunks = [
        dataclasses.replace(chunk(i, [float(i == 0), float(i == 1), float(i == 2)], text="x" * 200), stage_scores=s)
        for i, s in enumerate(signals)
    ]
    model = Answerer()
    options = FilterOptions(gate="off", calibration=Configured(str(path)))
    result = run_filter("q", chunks, model=model, judge_many=never, options=options)
    # sigmoid(-3.754981 + 3.376989*0.8 + 0.006575*0 + 0.625046*1 + 0.766057/1 + 0.826934*ln 2)
    #   = sigmoid(0.9109) = 0.7132
    first = no_judge.probability(
        {"cosine": 0.8, "cosine_gap": 0.0, "bm25": 1.0, "inv_rank": 1.0, "log_chars": 0.6931471805599453}
    )
    assert first == pytest.approx(0.7132, abs=1e-4)
    assert [c.chunk_id for c in result.kept] == ["d:0", "d:2"]  # 0.71 and 0.50 pass 0.4; 0.11 does not
    assert result.model_calls == 0 and model.calls == 0 and result.judged_by is None


def test_the_shipped_calibration_follows_the_judge():
    from chunkrag_filter.pipeline import resolve_calibration
    from chunkrag_filter.processors.calibration import CONFIGURED, load_calibration

    shipped = load_calibration(None)
    assert FilterOptions().calibration is CONFIGURED and FilterOptions().judge_top == 0
    assert resolve_calibration(FilterOptions()) == (shipped.retrieval.model, shipped.retrieval.cut)
    on = dataclasses.replace(FilterOptions(), judge_top=9)
    assert resolve_calibration(on) == (shipped.judged.model, shipped.judged.cut)
    assert resolve_calibration(FilterOptions(judge_top=None))[0] is shipped.judged.model
    assert resolve_calibration(FilterOptions(fixed_threshold=0.7))[1] == 0.7
    assert resolve_calibration(FilterOptions(judge_top=9, calibration=None)) == (None, 0.4)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown fallback"):
        FilterOptions(fallback="pray")


def test_model_calls_count_the_llm_threshold_even_without_token_counts():
    class Silent:
        """Answers without reporting tokens, as some servers do."""

        def __init__(self):
            self.calls = 0

        def complete(self, request):
            self.calls += 1
            return ChatResponse(text="0.5" if "threshold" in request.messages[0].content else "Answer [1].")

    scores = {"d:0": 0.9, "d:2": 0.2, "d:3": 0.7, "d:4": 0.1}
    model = Silent()
    result = run_filter(
        "q",
        CHUNKS,
        model=model,
        judge_many=scripted_judge(scores),
        options=FilterOptions(gate="off", threshold="llm", judge_top=9, redundancy_threshold=0.9),
    )
    assert result.threshold.method == "llm" and result.threshold.value == 0.5
    assert model.calls == 1 and result.model_calls == 4 + 1


def test_the_judge_reads_each_chunks_header_in_front_of_its_text():
    from chunkrag_filter.judging import judge_in_threads
    from chunkrag_filter.processors.relevance import ScoringOptions

    class Listwise:
        def __init__(self):
            self.prompts = []

        def complete(self, request):
            self.prompts.append(request.messages[-1].content)
            return ChatResponse(text="1")

    model = Listwise()
    headed = dataclasses.replace(CHUNKS[0], text="It was founded in 1901.", header="Nobel Prize > History")
    judge_in_threads(model, threads=1)("When was it founded?", [headed, CHUNKS[2]], ScoringOptions(method="listwise"))
    assert len(model.prompts) == 1
    assert "[1] Nobel Prize > History: It was founded in 1901.\n[2] chunk 2" in model.prompts[0]
