"""The query-time preselection of a field's sentences (pure)."""

from __future__ import annotations

import numpy as np

from chunkrag_core.settings import Settings, SettingsError
from ingest_pipeline.sources import Document, Section, plain_document
from search_extension.preselect import best_sentences, preselect_terms, preselected, runs, with_neighbours

TEXT = (
    "Keys rotate daily. Lunch is at noon. Invoices go out monthly. "
    "Old keys are revoked. The canteen serves soup.\n\nA rotated key is logged."
)


def test_best_sentences_keeps_the_best_in_position_order_ties_to_the_earlier():
    assert best_sentences([0.1, 2.0, 0.0, 2.0, 0.5], 2) == [1, 3]
    assert best_sentences([0.1, 2.0, 0.0, 2.0, 0.5], 3) == [1, 3, 4]
    assert best_sentences([0.0, 0.0, 0.0, 0.0], 2) == [0, 1]  # nothing matches: the field's start
    assert best_sentences([0.3, 0.2], 5) == [0, 1]
    assert best_sentences([0.3, 0.2, 0.1], 0) == [0, 1, 2]  # 0: every sentence


def test_preselect_terms_fold_accents_drop_a_plural_s_and_keep_five_letters():
    assert preselect_terms("How are the Keys rotated?") == ["key", "rotat"]
    assert preselect_terms("Ögedei hosts brained glass ways") == ["ogede", "host", "brain", "glass", "way"]
    # "bus": three letters, kept whole; "one": a stopword
    assert preselect_terms("Rotating buses, one bus") == ["rotat", "buse", "bus"]
    # Polish "ł" has no accent to fold: cut all the same; a Chinese run is kept whole.
    assert preselect_terms("Władysław visited 奎章閣學士院") == ["włady", "visit", "奎章閣學士院"]


def test_with_neighbours_adds_a_share_of_the_sentences_either_side():
    assert with_neighbours([0.0, 2.0, 0.0, 0.0, 1.0], 0.5) == [1.0, 2.0, 1.0, 0.5, 1.0]
    assert with_neighbours([3.0], 0.5) == [3.0]
    assert with_neighbours([], 0.5) == []


def test_preselected_finds_words_by_their_stem_and_keeps_the_sentence_after_a_match():
    text = (
        "Warsaw hosts many events and festivals. The Vistula runs through it. Trams are old. "
        "Scouts reported the weakness of the British supply chain. "
        "In the March Battle of Fort Bull, French forces destroyed the fort. Lunch was late."
    )
    document = plain_document("kb/2#body", text, "kb/2#body")

    def picked(query: str, budget: int) -> list[str]:
        return [text[s.start : s.end] for s in preselected(document, query, budget, max_chars=500).sections]

    # "host" finds "hosts", as whole words would not.
    assert picked("What does Warsaw host many of?", 1) == ["Warsaw hosts many events and festivals."]
    # The answer follows the sentence with the question's words: its neighbours come with it,
    # before "Lunch was late." and the rest that match nothing.
    assert picked("What was the attack on the British weakness?", 3) == [
        "Trams are old. Scouts reported the weakness of the British supply chain. "
        "In the March Battle of Fort Bull, French forces destroyed the fort."
    ]


def test_runs_join_consecutive_positions_within_one_section():
    assert runs([0, 1, 3, 4, 5, 8], [0] * 9) == [(0, 1), (3, 5), (8, 8)]
    assert runs([1, 2, 3], [0, 0, 1, 1]) == [(1, 1), (2, 3)]  # a section's edge ends a run
    assert runs([], [0, 0]) == []


def test_preselected_narrows_to_the_runs_of_the_best_sentences():
    document = plain_document("kb/1#body", TEXT, "kb/1#body", title="Keys")
    narrowed = preselected(document, "how are keys rotated and revoked", 3, max_chars=500)
    picked = [TEXT[s.start : s.end] for s in narrowed.sections]
    assert picked == ["Keys rotate daily.", "Old keys are revoked.", "A rotated key is logged."]
    assert all(s.path == () for s in narrowed.sections)
    assert (narrowed.doc_id, narrowed.title, narrowed.text) == (document.doc_id, "Keys", TEXT)


def test_preselected_keeps_a_run_within_its_heading_path():
    text = "Keys rotate daily. Keys expire yearly. Soup at noon."
    document = Document("d", "T", text, (Section(("A",), 0, 18), Section(("B",), 19, len(text))))
    narrowed = preselected(document, "keys", 2, max_chars=500)
    assert [(s.path, text[s.start : s.end]) for s in narrowed.sections] == [
        (("A",), "Keys rotate daily."),
        (("B",), "Keys expire yearly."),
    ]


def test_preselected_is_the_document_itself_when_nothing_is_left_out():
    document = plain_document("kb/1#body", TEXT, "kb/1#body")
    assert preselected(document, "keys", 6, max_chars=500) is document  # six sentences fit
    assert preselected(document, "keys", 0, max_chars=500) is document  # 0: every sentence
    assert preselected(document, "  ", 2, max_chars=500) is document  # no query to score by


def test_a_preselected_field_is_cached_apart_from_the_whole_field_and_embeds_only_its_sentences():
    from ingest_pipeline.source_fields import SourceField
    from search_extension.passages import QueryTimePassages

    class Counting:
        def __init__(self):
            self.seen: list[str] = []

        def embed(self, texts):
            self.seen.extend(texts)
            rows = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts] or [np.zeros(8)]
            return np.stack([r / (np.linalg.norm(r) or 1.0) for r in rows]).astype(np.float32)[: len(texts)]

    embedder, settings = Counting(), Settings()
    field = SourceField("kb", "1", "body", TEXT, "Keys")
    narrow = QueryTimePassages(embedder, settings, preselect=2)
    kept = narrow.passages([field], query="revoked keys")[field.companion_id]
    # The best match, and the sentence after it (a share of both neighbours' scores).
    assert " ".join(c.text for c in kept) == "Old keys are revoked. The canteen serves soup."
    assert [t for t in embedder.seen if t != "Keys"] == ["Old keys are revoked.", "The canteen serves soup."]
    # Another query over the same field: only the sentence not embedded yet goes to the model.
    again = narrow.passages([field], query="a logged key")[field.companion_id]
    assert [c.text for c in again] == ["The canteen serves soup.\n\nA rotated key is logged."]
    assert embedder.seen[-1] == "A rotated key is logged." and len(embedder.seen) == 4
    # No query, or preselection off: the whole field, under the whole field's fingerprint.
    whole = narrow.passages([field])[field.companion_id]
    assert "".join(c.text for c in whole).count(".") == 6 and narrow.misses == 3
    off = QueryTimePassages(embedder, settings, preselect=0)
    assert off.passages([field], query="revoked keys")[field.companion_id] == whole


def test_preselect_sentences_is_a_setting_of_zero_or_more():
    assert Settings().post_search.preselect_sentences == 8
    assert Settings.from_env({"CHUNKRAG_POST_SEARCH_PRESELECT_SENTENCES": "0"}).post_search.preselect_sentences == 0
    try:
        Settings.from_env({"CHUNKRAG_POST_SEARCH_PRESELECT_SENTENCES": "-1"})
    except SettingsError as exc:
        assert "preselect_sentences" in str(exc)
    else:
        raise AssertionError("a negative preselection was accepted")


def test_a_document_seen_before_is_not_split_again_and_narrows_the_same(monkeypatch):
    from search_extension import preselect as module

    document = plain_document("kb/1#body", TEXT, "kb/1#body", title="Keys")
    uncached = preselected(document, "how are keys rotated and revoked", 3, 500, "auto")
    splits = []
    real = module.split_sentences
    monkeypatch.setattr(module, "split_sentences", lambda *args: splits.append(args) or real(*args))
    cache = module.SentenceCache()
    first = preselected(document, "how are keys rotated and revoked", 3, 500, "auto", cache)
    again = preselected(document, "how are keys rotated and revoked", 3, 500, "auto", cache)
    other = preselected(document, "soup at the canteen", 1, 500, "auto", cache)
    assert len(splits) == 1
    assert first == again == uncached
    assert [TEXT[s.start : s.end] for s in other.sections] == ["The canteen serves soup."]
    # Another cap splits differently: its own entry.
    preselected(document, "keys", 2, 20, "auto", cache)
    assert len(splits) == 2


def test_a_document_larger_than_the_sentence_cache_is_narrowed_but_not_kept():
    from search_extension.preselect import SentenceCache

    cache = SentenceCache(max_bytes=100)
    document = plain_document("kb/1#body", TEXT, "kb/1#body")
    narrowed = preselected(document, "revoked keys", 2, 500, "auto", cache)
    assert [TEXT[s.start : s.end] for s in narrowed.sections] == ["Old keys are revoked. The canteen serves soup."]


def test_the_term_index_scores_what_bm25_scores_does():
    from search_extension.bm25 import TermIndex, bm25_scores

    texts = [t for t in TEXT.replace("\n\n", " ").split(". ")] + ["", "keys keys keys rotate", "Soup!"]
    index = TermIndex.of(texts)
    for query in ("how are keys rotated and revoked", "soup", "nothing matches", "", "the of and"):
        assert index.scores(query) == bm25_scores(query, texts)
    assert TermIndex.of([]).scores("keys") == []
