"""`chunkrag calibrate` end to end on real labelled data: the command indexes
the questions' documents in the real Elasticsearch, fits the models and the
cut, and writes a file that the filter then loads by setting and runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_filter.pipeline import FilterOptions, resolve_calibration, run_filter
from chunkrag_filter.processors.calibration import CONFIGURED, load_calibration
from tests.conftest import SHARED

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def calibrate_index(es):
    name = f"test-calibrate-{uuid.uuid4().hex[:10]}"
    yield name
    es.delete_index(name)


def labelled_sample(path: Path, count: int) -> Path:
    """The first ``count`` WikiQA dev questions as the user's labelled JSONL
    (real text, real labels), with one unusable line."""
    import csv

    grouped: dict[str, dict] = {}
    with (SHARED / "eval" / "wikiqa" / "WikiQA-dev.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["QuestionID"] not in grouped and len(grouped) == count:
                break
            entry = grouped.setdefault(row["QuestionID"], {"question": row["Question"], "s": [], "r": []})
            entry["s"].append(row["Sentence"])
            if row["Label"] == "1":
                entry["r"].append(row["Sentence"])
    lines = [
        json.dumps({"question": e["question"], "documents": [{"text": " ".join(e["s"])}], "relevant": e["r"]})
        for e in grouped.values()
    ]
    path.write_text("\n".join([*lines, '{"question": "no documents"}']) + "\n", encoding="utf-8")
    return path


def test_calibrate_writes_a_file_the_filter_loads_by_setting(tmp_path, calibrate_index, settings):
    out = tmp_path / "calibration.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHUNKRAG_CALIBRATION_FILE": str(out)}
    command = [
        sys.executable, "-m", "chunkrag_cli", "calibrate",
        "--labelled", str(labelled_sample(tmp_path / "mine.jsonl", 12)),
        "--eval-set", "nq", "--limit", "12", "--eval-root", str(SHARED / "eval"),
        "--index", calibrate_index,
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert "skipped line 13" in done.stderr  # the line without documents, and nothing else lost
    assert summary["questions"] == 24 and summary["sets"] == ["mine", "nq"]
    assert summary["relevant_candidates"] > 0 and summary["candidates"] > summary["relevant_candidates"]
    # 24 questions, below the 30 a fit stands on alone: warned, and blended with the shipped file.
    assert "warning: only 24 labelled questions" in done.stderr and summary["fit_weight"] == 0.8
    assert summary["judged"] is None and "no judge ran" in summary["judged_note"]
    # Progress on a pipe: one line per question, never run together.
    assert "questions collected 24/24\n" in done.stderr and "1/242/24" not in done.stderr

    written = load_calibration(str(out))
    shipped = load_calibration(None)
    assert written.retrieval.model.names == shipped.retrieval.model.names  # the shipped file's features
    assert written.retrieval.model.weights != shipped.retrieval.model.weights  # refitted on these questions
    assert 0.0 <= written.retrieval.cut <= 1.0
    assert written.judged == shipped.judged  # no --judge: the shipped judged model kept
    assert written.about["command"].startswith("chunkrag calibrate")

    # The filter reads the file named by the setting.
    os.environ["CHUNKRAG_CALIBRATION_FILE"] = str(out)
    try:
        model, cut = resolve_calibration(FilterOptions())
        chunks = [
            Chunk("d", i, text, 0, len(text), stage_scores={"cosine": c, "bm25": b})
            for i, (text, c, b) in enumerate([("Paris is the capital of France.", 0.8, 1.0), ("Unrelated.", 0.1, 0.0)])
        ]
        result = run_filter("capital of France", chunks, model=None, options=FilterOptions(calibration=CONFIGURED))
    finally:
        del os.environ["CHUNKRAG_CALIBRATION_FILE"]
    assert (model, cut) == (written.retrieval.model, written.retrieval.cut)
    scored = {d.chunk.chunk_id: d.chunk.stage_scores["calibrated"] for d in result.decisions}
    assert scored["d:0"] > scored["d:1"]


def test_calibrate_refuses_without_labelled_questions_or_a_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHUNKRAG_CALIBRATION_FILE": ""}
    no_out = subprocess.run(
        [sys.executable, "-m", "chunkrag_cli", "calibrate", "--eval-set", "nq"], env=env, capture_output=True, text=True
    )
    assert no_out.returncode == 2 and "--out" in no_out.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "chunkrag_cli", "calibrate", "--labelled", str(tmp_path / "none.jsonl"), "--out",
         str(tmp_path / "c.json")],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert missing.returncode == 2 and "cannot read" in missing.stderr and not (tmp_path / "c.json").exists()
