"""The evaluation command's runner on real PopQA and PubHealth records, real
Elasticsearch, and a scripted model over HTTP that picks the passage
holding the gold answer: the measures must follow what was kept."""

from __future__ import annotations

import uuid

import pytest

from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_eval.datasets import read_items
from chunkrag_eval.runner import evaluate
from chunkrag_filter.judging import judge_in_threads
from chunkrag_filter.pipeline import FilterOptions
from local_services.scripted_openai import ScriptedOpenAI, completion, is_listwise, listwise_choice

pytestmark = pytest.mark.integration


@pytest.fixture
def eval_index(es):
    name = f"test-eval-{uuid.uuid4().hex[:10]}"
    yield name
    es.delete_index(name)


@pytest.fixture
def engine_eval_index(engine):
    name = f"test-eval-{uuid.uuid4().hex[:10]}"
    yield name
    engine.delete_index(name)


def run(
    items,
    fmt,
    model_server,
    es,
    embedder,
    settings,
    index,
    generate=False,
    options=FilterOptions(answer=False, judge_top=9),
    generate_baselines=False,
):
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    return evaluate(
        items,
        fmt,
        client=es,
        embedder=embedder,
        settings=settings,
        model=model,
        options=options,
        judge_many=judge_in_threads(model, threads=2),
        index=index,
        generate=generate,
        generate_baselines=generate_baselines,
    )


def test_popqa_answer_in_context_follows_the_kept_chunks(engine, embedder, settings, shared_eval, engine_eval_index):
    """On each engine: the evaluation indexes, retrieves and filters alike."""
    _, items, bad = read_items(shared_eval / "popqa" / "dev.jsonl", "popqa", limit=3)
    assert not bad and len(items) == 3
    gold = {item.question: item.answers for item in items}

    def oracle(request):
        prompt = request["messages"][-1]["content"]
        question = next(q for q in gold if q in prompt)
        if is_listwise(request):
            # The passage that holds a gold answer, when this batch has one.
            answer = next(
                (
                    a
                    for a in gold[question]
                    if any(a.lower() in line.lower() for line in prompt.splitlines() if line.startswith("["))
                ),
                "\x00",
            )
            return listwise_choice(answer)(request) if answer != "\x00" else listwise_choice("\x00")(request)
        return completion(f"The answer is {gold[question][0]} [1].")(request)

    with ScriptedOpenAI(default=oracle) as server:
        report = run(
            items,
            "popqa",
            server,
            engine,
            embedder,
            settings,
            engine_eval_index,
            generate=True,
            generate_baselines=True,
        )
        again = run(items, "popqa", server, engine, embedder, settings, engine_eval_index)

    summary = report.summary()
    assert summary["questions"] == 3
    for q in report.questions:
        assert q.candidates >= 3 and q.kept >= 1 and q.chars_after <= q.chars_before
        assert len(q.scores) == q.candidates == len(q.gold)
        # An oracle judge keeps a chunk with the answer wherever the pool had one.
        if q.answer_in_context_before:
            assert q.answer_in_context_after
        assert q.model_calls >= 1 and q.correct is True
    assert summary["context_chars_after"] < summary["context_chars_before"]
    assert summary["model_calls_per_question"] < summary["naive_model_calls_per_question"]
    assert summary["accuracy"] == 1.0
    # The answer from all retrieved chunks is graded and paired with the filter's.
    assert all(q.all_retrieved_correct is True for q in report.questions)
    assert summary["baselines"]["all_retrieved"]["accuracy"] == 1.0
    assert summary["baselines"]["all_retrieved"]["accuracy_discordant"] == [0, 0]
    # The answers' own calls and tokens are counted: two answers per question.
    assert all(q.generation_calls == 2 and q.generation_prompt_tokens > 0 for q in report.questions)
    assert summary["generation_calls_per_question"] == 2
    assert (
        report.ingest_seconds >= 0 and again.questions[0].chars_before == report.questions[0].chars_before
    )  # re-run: pools not duplicated


def test_pubhealth_verdicts_are_graded(es, embedder, settings, shared_eval, eval_index):
    _, items, _ = read_items(shared_eval / "pubhealth" / "dev.jsonl", "pubhealth", limit=2)

    def always_true(request):
        if is_listwise(request):
            return listwise_choice("\x00")(request)  # nothing answers: fallback keeps the top chunks
        return completion("true")(request)

    # The judge's own "none" is the nothing-relevant outcome when its shares
    # are cut as they come; calibrated, the retrieval signals still rank.
    paper = FilterOptions(answer=False, calibration=None, threshold="dynamic", judge_top=None)
    with ScriptedOpenAI(default=always_true) as server:
        report = run(items, "pubhealth", server, es, embedder, settings, eval_index, generate=True, options=paper)
    summary = report.summary()
    # "None of them" for every passage is the explicit nothing-relevant outcome.
    assert summary["nothing_relevant_rate"] == 1.0 and all(q.kept == 3 for q in report.questions)  # top_k fallback
    assert summary["answer_in_context_before"] is None  # no gold answer strings in PubHealth
    assert summary["graded"] == 2
    assert summary["accuracy"] == sum(item.label == "true" for item in items) / 2


def test_the_eval_command_writes_its_report_and_plots(
    es, settings, shared_eval, eval_index, tmp_path, monkeypatch, capsys
):
    import json

    from chunkrag_cli.main import main

    with ScriptedOpenAI(
        default=lambda request: listwise_choice("")(request) if is_listwise(request) else completion("x")(request)
    ) as server:
        monkeypatch.setenv("CHUNKRAG_CHAT_BASE_URL", server.base_url)
        code = main(
            [
                "eval",
                str(shared_eval / "popqa" / "dev.jsonl"),
                "--limit",
                "2",
                "--index",
                eval_index,
                "--out",
                str(tmp_path / "report.json"),
                "--plots",
                str(tmp_path / "plots"),
            ]
        )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["questions"] == 2
    # The default filter runs no judge: no judging method, place or model is named.
    assert summary["options"]["judged"] is False
    assert summary["options"]["method"] is None and summary["options"]["model"] is None
    assert set(summary["baselines"]) == {
        "all_retrieved",
        "cosine_same_chars_per_question",
        "bm25_same_chars_per_question",
        "cosine_one_cut_for_set",
        "cosine_fixed_share",
        "bm25_fixed_share",
    }
    assert all(0 <= entry["p_vs_filter"] <= 1 for entry in summary["baselines"].values())
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["summary"]["questions"] == 2 and len(written["questions"]) == 2
    assert {p.name for p in (tmp_path / "plots").iterdir()} >= {
        "kept_vs_threshold.png",
        "scores_by_gold.png",
        "context_budget.png",
        "answers_vs_chars.png",
    }
