"""Real text end to end: SQuAD 2.0 dev paragraphs (Wikipedia) are ingested,
then each answerable question should find its paragraph among the hits."""

import json

import pytest

from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from search_extension.retriever import HybridRetriever

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARTICLES = 12  # 468 paragraphs, 2,100 answerable questions
TOP_K = 5
# Measured on this machine kind: hit@5 = 0.958 with minmax (the default) and
# 0.915 with native_sum, over 527 questions. The floor sits a few points below
# what was measured so a real regression fails.
MIN_HIT_RATE = 0.92


def squad_corpus(path, articles):
    data = json.loads(path.read_text(encoding="utf-8"))["data"][:articles]
    documents, questions = [], []
    for article in data:
        for number, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{article['title']}#{number}"
            documents.append(
                plain_document(doc_id, paragraph["context"], "squad", title=article["title"].replace("_", " "))
            )
            questions.extend((qa["question"], doc_id) for qa in paragraph["qas"] if not qa.get("is_impossible"))
    return documents, questions


def test_answer_paragraph_is_among_the_hits_for_most_questions(es, embedder, settings, fresh_index, shared_eval):
    documents, questions = squad_corpus(shared_eval / "squad" / "squad2_cs224n_dev-v2.0.json", ARTICLES)
    report = ingest_documents(
        documents, client=es, embedder=embedder, settings=settings, index=fresh_index, progress=False
    )
    assert report.ok and report.documents == len(documents)

    retriever = HybridRetriever(es, embedder, fresh_index, settings.retrieval)
    sample = questions[::4]  # every fourth question keeps the test to about a minute
    hits = 0
    for question, doc_id in sample:
        result = retriever.search(question, size=TOP_K, collapse_field="doc_id")
        hits += doc_id in {c.doc_id for c in result.chunks}
    rate = hits / len(sample)
    print(
        f"\nSQuAD hit@{TOP_K} over {len(sample)} questions, {len(documents)} paragraphs, {report.chunks} chunks: "
        f"{rate:.3f}"
    )
    assert rate >= MIN_HIT_RATE
