"""The open corpus on real Elasticsearch: a few PopQA pools and a few dozen
distractor passages in one index, ingested once, retrieved from as a whole,
every row measured without a model call."""

from __future__ import annotations

import uuid

import pytest

from chunkrag_core.providers import make_chat
from chunkrag_eval import unanswerable
from chunkrag_eval.datasets import read_items
from chunkrag_eval.open_corpus import build_corpus, ensure_corpus_index, index_name, parse_distractors
from chunkrag_eval.open_eval import run_open
from chunkrag_eval.open_rows import ROWS
from search_extension.retriever import HybridRetriever

pytestmark = pytest.mark.integration


@pytest.fixture
def open_index(es, settings, shared_eval, tmp_path):
    # A PopQA file of four records: the corpus holds every record of the files it is built from.
    four = tmp_path / "popqa4.jsonl"
    four.write_text("".join((shared_eval / "popqa" / "dev.jsonl").read_text().splitlines(keepends=True)[:4]))
    _, items, bad = read_items(four, "popqa")
    assert not bad
    corpus = build_corpus([four], shared_eval, parse_distractors("nq=20,squad=10"), dev_pools=False)
    name = index_name(corpus.documents, settings, prefix=f"test-chunkrag-open-{uuid.uuid4().hex[:8]}")
    yield items, corpus, name
    es.delete_index(name)


def test_the_shared_index_is_ingested_once_and_every_row_chooses_from_the_whole_of_it(
    es, embedder, settings, open_index
):
    items, corpus, index = open_index
    assert dict(corpus.sources) == {"popqa": 4, "nq": 20, "squad": 10}
    first = ensure_corpus_index(corpus, client=es, embedder=embedder, settings=settings, index=index)
    assert first.documents == 34 and first.unchanged == 0 and first.chunks > 34
    again = ensure_corpus_index(corpus, client=es, embedder=embedder, settings=settings, index=index)
    assert again.unchanged == 34 and again.chunks == 0  # nothing re-chunked, nothing re-embedded

    absent, counts = unanswerable.absent("popqa", items, unanswerable.NameIndex(corpus.documents))
    asked = unanswerable.answerable("popqa", items) + absent + unanswerable.off_topic("popqa", items)
    run = run_open(
        asked,
        retriever=HybridRetriever(es, embedder, index, settings.retrieval),
        model=make_chat(settings.chat),  # the default filter makes no model call
        rows=ROWS,
        sizes=(5, 10),
        cosine_threshold=0.3,
    )
    # Nothing asked the model: the LLM judge row is left out, and says so.
    assert "llm_judge" in run.skipped_rows and "not run" in run.skipped_rows["llm_judge"]
    names = {r.name for r in run.rows}
    assert {"all", "top5", "topk_filter_chars", "cosine", "filter", "filter_gate_off"} <= names
    by = {(o.item_id, o.size, o.row): o for o in run.outcomes if o.kind == "answerable"}
    sources = set()
    for item in items:
        for size in (5, 10):
            everything = by[(item.item_id, size, "all")]
            assert everything.kept == tuple(range(size))  # the index holds more than N chunks
            assert len(by[(item.item_id, size, "top5")].kept) == 5
            filtered = by[(item.item_id, size, "filter")]
            assert set(filtered.kept) <= set(everything.kept)
            # Whatever the default gate, it only turns questions away: where it passes one, the
            # shipped filter keeps what the filter keeps with the gate off, which always keeps some.
            ungated = by[(item.item_id, size, "filter_gate_off")]
            assert ungated.kept and filtered.kept in (ungated.kept, ())
            # top-k at the filter's characters gets at least as many (one chunk more at most)
            assert by[(item.item_id, size, "topk_filter_chars")].chars >= filtered.chars
    # Candidates come from the whole index, not only the question's pool.
    retriever = HybridRetriever(es, embedder, index, settings.retrieval)
    for item in items:
        sources |= {c.doc_id.split("-")[0] for c in retriever.search(item.question, size=10).chunks}
    assert sources - {"popqa"}, "only pool chunks were retrieved: the distractors are not in the index"

    summary = run.summary()["popqa"]
    for size in ("5", "10"):
        table = summary[size]
        assert table["all"]["n"] == 4 and table["all"]["chars_share_of_all"] == 1.0
        for name in ("top5", "cosine", "filter"):
            assert 0.0 <= table[name]["p_vs_all"] <= 1.0
            assert table[name]["chars_share_of_all"] <= 1.0
        # A row keeps a gold answer only where all N hold one.
        only_row, _ = table["filter"]["discordant"]
        assert only_row == 0

    # Asked without its pool, a question whose subject nothing else names gets no chunk of its pool.
    assert counts["considered"] == 4 and counts["kept"] == len(absent)
    for question in absent:
        for o in run.outcomes:
            if o.kind == "absent" and o.item_id == question.item.item_id:
                assert not o.own_pool and o.answer_in_context is None
    # Off topic, the view holds only PubHealth pools: none here, so nothing is retrieved or kept.
    off = [o for o in run.outcomes if o.kind == "off_topic"]
    assert off and all(o.kept == () for o in off)
    assert run.summary()["popqa off_topic"]["5"]["all"]["nothing_kept"] == 1.0
