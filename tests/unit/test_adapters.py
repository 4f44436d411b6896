"""The adapters' framework-free core with a stand-in embedder, and the
default install's freedom from the frameworks (the extras bring them)."""

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from chunkrag_adapters.core import ChunkFilter, resolve
from chunkrag_core.settings import Settings
from search_extension.options import OptionError

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("langchain", "llama_index", "llama-index", "haystack")


class WordEmbedder:
    """A vector per text from two words: 'key' and 'lunch'."""

    def embed(self, texts):
        rows = [[t.lower().count("key") + 0.1, t.lower().count("lunch") + 0.1, 0.1] for t in texts]
        matrix = np.asarray(rows, dtype=np.float32)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_the_default_install_names_no_framework_and_each_extra_its_own():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith(FRAMEWORKS)]
    extras = project["optional-dependencies"]
    assert extras["langchain"][0].startswith("langchain-core==")
    assert extras["llamaindex"] == [d for d in extras["llamaindex"] if d.startswith("llama-index-core==")]
    assert extras["haystack"] == [d for d in extras["haystack"] if d.startswith("haystack-ai==")]


def test_the_project_imports_no_framework():
    code = (
        "import sys, chunkrag_cli.main, chunkrag_gateway, chunkrag_adapters.core, search_extension.post_search\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_options_are_ext_chunkrags_and_a_bad_one_is_named():
    assert resolve({"judge_top": 9}).filter.judge_top == 9
    assert resolve(None).filter.answer is False
    with pytest.raises(OptionError, match="unknown threshold 'sometimes'; choose one of"):
        resolve({"threshold": "sometimes"})


def test_whole_texts_come_back_whole_with_their_decision_and_offsets():
    texts = ["Rotate the key in the console.", "Lunch is at noon."]
    chunk_filter = ChunkFilter({"fixed_threshold": 0.1}, split=False, settings=Settings(), embedder=WordEmbedder())
    filtered = chunk_filter.filter("which key is used", texts)
    assert [(p.source, p.text, p.start, p.end) for p in filtered.kept] == [(0, texts[0], 0, len(texts[0]))]
    assert [(p.source, p.reason) for p in filtered.dropped] == [(1, "below_threshold")]
    assert filtered.kept[0].metadata()["kept"] is True and filtered.threshold == 0.1
    assert filtered.model_calls == 0 and filtered.characters == len(texts[0])


def test_bad_calls_say_what_would_work():
    chunk_filter = ChunkFilter(split=False, settings=Settings(), embedder=WordEmbedder())
    with pytest.raises(ValueError, match="needs the query text"):
        chunk_filter.filter(" ", ["a"])
    with pytest.raises(ValueError, match="one per text"):
        chunk_filter.filter("q", ["a", "b"], titles=["t"])
