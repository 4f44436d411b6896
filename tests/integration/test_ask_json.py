"""``chunkrag ask --json`` on the real Elasticsearch over the bundled sample
corpus, the command as a user runs it (ingested by ``chunkrag ingest``). No
chat model is called: a scripted server stands where the model would be and
counts the calls. An on-topic question with ``--no-answer`` prints every
candidate with its id, scores, decision and reason; an off-topic one behind
the retrieval gate prints the gate's reading, nothing_relevant and its
reason, and "not found" as the answer."""

from __future__ import annotations

import json
import uuid
from importlib import resources

import pytest

from local_services.scripted_openai import ScriptedOpenAI, completion

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sample_index(es):
    from chunkrag_cli.main import main

    index = f"test-ask-json-{uuid.uuid4().hex[:8]}"
    with resources.as_file(resources.files("chunkrag_cli") / "samples" / "corpus") as corpus:
        assert main(["ingest", str(corpus), "--index", index, "--no-progress"]) == 0
    yield index
    es.delete_index(index)


@pytest.fixture
def no_model(monkeypatch):
    """A model server that answers, so a call would succeed and be seen."""
    with ScriptedOpenAI(default=completion("scripted")) as server:
        monkeypatch.setenv("CHUNKRAG_CHAT_BASE_URL", server.base_url)
        yield server


def ask_json(capsys, *argv: str) -> dict:
    from chunkrag_cli.main import main

    capsys.readouterr()
    assert main(["ask", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_on_topic_question_prints_every_candidate_with_its_decision(sample_index, no_model, capsys):
    body = ask_json(capsys, "What rights are unalienable?", "--index", sample_index, "--no-answer", "--gate", "off")
    assert body["index"] == sample_index and body["question"] == "What rights are unalienable?"
    chunks = body["chunks"]
    assert len(chunks) == 8  # the default candidates
    assert all(c["id"] == f"{c['doc_id']}:{c['position']}" and c["reason"] for c in chunks)
    assert any("pursuit of Happiness" in c["text"] for c in chunks)
    kept = [c for c in chunks if c["kept"]]
    assert kept and chunks[: len(kept)] == kept  # kept first, in final order
    assert all("combined" in c["scores"] and "cosine" in c["scores"] for c in chunks)
    assert body["threshold"]["method"] == "fixed" and "gate" not in body  # the gate off: no reading
    assert body["answer"] is None and body["citations"] == [] and body["nothing_relevant"] is False
    assert body["usage"]["model_calls"] == 0 and no_model.requests == []


def test_an_off_topic_question_behind_the_gate_says_why_nothing_was_kept(sample_index, no_model, capsys):
    body = ask_json(capsys, "What is the boiling point of mercury?", "--index", sample_index, "--gate", "retrieval")
    assert body["gate"]["gate"] == "retrieval" and body["gate"]["passed"] is False
    assert body["gate"]["probability"] < body["gate"]["cut"]
    assert body["nothing_relevant"] is True
    assert body["nothing_relevant_reason"].startswith("no candidate looks relevant: P(relevant)")
    assert body["chunks"] and all(not c["kept"] and c["reason"] == "nothing_relevant" for c in body["chunks"])
    assert body["answer"] == "NOT FOUND" and body["found"] is False and body["citations"] == []
    assert body["usage"]["model_calls"] == 0 and no_model.requests == []
