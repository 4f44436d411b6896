"""Post-search with a companion chunk index (``chunkrag sync``): the hits'
passages come from the companion, read with the caller's client, instead of
being chunked and embedded at query time; a document changed since the sync
is chunked at query time again (its text no longer matches the companion's
fingerprint), so a companion never serves text the caller's hit does not show."""

from __future__ import annotations

import pytest

from ingest_pipeline.sync import companion_name, sync_index
from search_extension.options import parse_options
from search_extension.passages import QueryTimePassages
from search_extension.post_searcher import PostSearcher
from tests.support.plain_index import plain_index

pytestmark = pytest.mark.integration

MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}, "url": {"type": "keyword"}}}
DOCS = {
    "rotate": {
        "title": "Rotating API keys",
        "body": "To rotate an API key, open the console, choose Security, then Keys, and press Rotate. "
        "The old key keeps working for 24 hours so that clients can switch.",
        "url": "https://example.test/rotate",
    },
    "revoke": {
        "title": "Revoking access",
        "body": "Revoking an API key takes effect at once. Every request signed with a revoked key is refused.",
        "url": "https://example.test/revoke",
    },
}
QUESTION = "how do I rotate an API key"


class CountingQueryTime:
    """The query-time source, counting the fields it had to chunk."""

    def __init__(self, inner):
        self.inner, self.asked = inner, []

    def passages(self, fields, *, query=""):
        self.asked.extend(f.doc_id for f in fields)
        return self.inner.passages(fields, query=query)


@pytest.fixture
def synced(engine, embedder, settings):
    with plain_index(engine, "test-kb-companion", MAPPING, DOCS) as name:
        try:
            report = sync_index(name, client=engine, embedder=embedder, settings=settings)
            assert report.complete and not report.errors
            yield name
        finally:
            engine.delete_index(companion_name(name))


def _filtered(engine, embedder, settings, index):
    fallback = CountingQueryTime(QueryTimePassages(embedder, settings))
    searcher = PostSearcher(settings, lambda: embedder, query_time=fallback)
    options = parse_options({"answer": False, "include_dropped": True}, max_candidates=50, surface="search")
    response = engine.search(index, {"query": {"match": {"body": QUESTION}}, "size": 10})
    result = searcher.filter(engine, response, QUESTION, options)
    return result, fallback.asked


def test_the_companion_serves_the_passages_and_a_changed_document_is_chunked_at_query_time(
    engine, embedder, settings, synced
):
    result, asked = _filtered(engine, embedder, settings, synced)
    assert asked == [] and result.scored_by == "engine"  # every field came from the companion
    kept = [c for hit in result.hits for c in hit.kept]
    assert any("press Rotate" in c.text for c in kept)
    before = _passages_of(result, "revoke")

    changed = {**DOCS["rotate"], "body": "To rotate an API key now, call the rotate endpoint of the key service."}
    assert all(
        ok
        for ok, _ in engine.bulk(
            [{"_op_type": "index", "_index": synced, "_id": "rotate", "_source": changed}],
            chunk_size=10,
            max_retries=0,
            initial_backoff=1,
        )
    )
    engine.refresh(synced)
    result, asked = _filtered(engine, embedder, settings, synced)
    # The changed document no longer matches the companion: chunked at query
    # time; the unchanged one still comes from the companion.
    assert asked == ["rotate"]
    texts = [c.text for hit in result.hits for c in (*hit.kept, *(chunk for chunk, _ in hit.dropped))]
    assert not any("press Rotate" in text for text in texts)
    assert any("rotate endpoint" in text for text in texts)
    # Each hit goes its own way: the unchanged one is still scored by the engine, its passages as before.
    assert result.scored_by == "both" and _passages_of(result, "revoke") == before


def _passages_of(result, doc_id):
    """A hit's passages: text, kept or the reason dropped, and every score."""
    (hit,) = [hit for hit in result.hits if hit.doc_id == doc_id]
    shown = [(c, "kept") for c in hit.kept] + list(hit.dropped)
    return sorted((c.text, reason, sorted(c.stage_scores.items())) for c, reason in shown)


# --- the engine-scored path against the fetched-chunks path -----------------------------

# Long enough that each hit has more passages than the cap below, so the
# engine's choice of candidates is tested too.
CAP = 6


@pytest.fixture
def synced_articles(engine, embedder, settings):
    """Six SQuAD documents (1,000-3,000 words) in a source index, synced."""
    from bench.post_search_bench import documents

    docs = documents(7)[:6]
    sources = {d["id"]: {"title": d["title"], "body": d["body"]} for d in docs}
    with plain_index(engine, "test-kb-companion-scored", MAPPING, sources) as name:
        try:
            assert sync_index(name, client=engine, embedder=embedder, settings=settings).complete
            questions = [q for d in docs for q, _answers in d["questions"][:1]]
            yield name, questions
        finally:
            engine.delete_index(companion_name(name))


def _both_ways(engine, embedder, settings, index, question, bm25):
    from search_extension.companion import CompanionsFirst

    fallback = CountingQueryTime(QueryTimePassages(embedder, settings))
    options = parse_options({"answer": False, "max_passages": CAP}, max_candidates=50, surface="search")
    response = engine.search(index, {"query": {"match_all": {}}, "size": 10})
    results = {}
    for engine_scoring in (True, False):
        source = CompanionsFirst(engine, fallback, settings=settings, engine_scoring=engine_scoring, bm25=bm25)
        searcher = PostSearcher(settings, lambda: embedder, passage_source=source)
        results[engine_scoring] = searcher.filter(engine, response, question, options)
    assert fallback.asked == []
    return results[True], results[False]


def _signals(result):
    return {d.chunk.chunk_id: d.chunk.stage_scores for d in result.filtered.decisions}


def _kept(result):
    return {c.chunk_id for hit in result.hits for c in hit.kept}


def _same_but_for_rounding(ours, theirs):
    for chunk_id in ours.keys() & theirs.keys():
        for signal in ("cosine", "knn", "bm25"):
            assert ours[chunk_id][signal] == pytest.approx(theirs[chunk_id][signal], abs=2e-6), (chunk_id, signal)


def test_the_hidden_companion_still_serves_a_search_of_a_pattern_that_does_not_reach_it(
    engine, embedder, settings, synced
):
    pattern = f"{synced}*"
    assert engine.index_hidden(companion_name(synced))
    assert engine.count(pattern) == len(DOCS)  # the source's documents, not the companion's chunks
    result, asked = _filtered(engine, embedder, settings, pattern)
    assert {hit.index for hit in result.hits} == {synced}
    # Each hit's companion is read by its name: scored by the engine, nothing chunked at query time.
    assert result.scored_by == "engine" and asked == []
    assert any("press Rotate" in chunk.text for hit in result.hits for chunk in hit.kept)


def test_with_bm25_counted_over_the_passages_the_engine_scored_path_keeps_what_the_fetched_path_keeps(
    engine, embedder, settings, synced_articles
):
    """The engine's cosine is the fetched vectors' (to the sixth decimal),
    BM25 is counted over the same passages: the same candidates, the same
    passages kept."""
    index, questions = synced_articles
    for question in questions:
        scored, fetched = _both_ways(engine, embedder, settings, index, question, "passages")
        assert (scored.scored_by, fetched.scored_by) == ("engine", "here")
        assert scored.capped == fetched.capped > 0
        ours, theirs = _signals(scored), _signals(fetched)
        assert ours.keys() == theirs.keys()
        _same_but_for_rounding(ours, theirs)
        assert _kept(scored) == _kept(fetched)
        # Candidates carry their text; no vector, since the default runs no redundancy stage
        # (the only one that compares them; with it, tests/unit/test_companion_scoring.py).
        assert all(d.chunk.vector is None and d.chunk.text for d in scored.filtered.decisions)


def test_with_the_engines_bm25_the_candidates_past_the_cap_may_differ(engine, embedder, settings, synced_articles):
    """BM25 is the engine's (the companion's analyzer and index statistics)
    where the fetched path counts it over the response's passages: with a
    cap of 6 of several dozen passages a hit, a few different candidates are
    picked and a few different passages kept (bench/REPORT.md measures it
    at the default cap, with the answers kept); the cosines are the same."""
    index, questions = synced_articles
    candidates, kept = [], []
    for question in questions:
        scored, fetched = _both_ways(engine, embedder, settings, index, question, "engine")
        assert (scored.scored_by, fetched.scored_by) == ("engine", "here")
        assert scored.capped == fetched.capped > 0 and scored.candidates == fetched.candidates
        ours, theirs = _signals(scored), _signals(fetched)
        for chunk_id in ours.keys() & theirs.keys():
            assert ours[chunk_id]["cosine"] == pytest.approx(theirs[chunk_id]["cosine"], abs=2e-6)
        candidates.append(len(ours.keys() & theirs.keys()) / len(theirs))
        kept.append(len(_kept(scored) & _kept(fetched)) / len(_kept(fetched)))
    # Measured: 69-89% of the candidates and 64-90% of the kept passages are
    # the same ones (Elasticsearch, six questions); far from disjoint.
    assert sum(candidates) / len(candidates) >= 0.6, candidates
    assert sum(kept) / len(kept) >= 0.6, kept


def test_without_the_redundancy_stage_no_vector_is_read_and_the_filter_still_runs(
    engine, embedder, settings, synced_articles
):
    from search_extension.companion import CompanionsFirst

    index, questions = synced_articles
    options = parse_options({"answer": False, "redundancy_threshold": None}, max_candidates=50, surface="search")
    source = CompanionsFirst(engine, QueryTimePassages(embedder, settings), settings=settings)
    searcher = PostSearcher(settings, lambda: embedder, passage_source=source)
    response = engine.search(index, {"query": {"match": {"body": questions[0]}}, "size": 3})
    result = searcher.filter(engine, response, questions[0], options)
    assert result.scored_by == "engine"
    assert result.filtered is not None and result.filtered.kept
    assert all(d.chunk.vector is None for d in result.filtered.decisions)


# --- one companion request: the candidates rebuilt from the hits' own text ---------------


def _one_way(engine, embedder, settings, index, question, options, *, rebuild, response=None):
    from search_extension.companion import CompanionsFirst
    from search_extension.post_search_response import post_search_response

    response = response or engine.search(index, {"query": {"match": {"body": question}}, "size": 10})
    cluster = CountingCluster(engine)
    fallback = CountingQueryTime(QueryTimePassages(embedder, settings))
    source = CompanionsFirst(cluster, fallback, settings=settings, rebuild=rebuild)
    searcher = PostSearcher(settings, lambda: embedder, passage_source=source)
    result = searcher.filter(cluster, response, question, options)
    assert result.scored_by == "engine" and fallback.asked == []
    shown = post_search_response(response, result, options.post_search)
    shown["chunkrag"].pop("timings_ms")
    return result, shown, [asked for asked in cluster.asked if asked[1] == companion_name(index)]


def test_the_candidates_come_from_one_companion_request_and_are_the_chunks_the_fetched_path_reads(
    engine, embedder, settings, synced_articles
):
    """The engine-scored path rebuilds the candidates from the hits' field
    text and the offsets step 1 read as doc values: one `_msearch` on the
    companion, where fetching them makes a second one. Every candidate is
    the stored chunk (every field but the vector; its metadata but the
    version the sync read), and the post-search response is the same."""
    index, questions = synced_articles
    options = parse_options(
        {"answer": False, "max_passages": CAP, "include_dropped": True}, max_candidates=50, surface="search"
    )
    companion = companion_name(index)
    for question in questions[:3]:
        response = engine.search(index, {"query": {"match": {"body": question}}, "size": 10})
        ways = {
            rebuild: _one_way(engine, embedder, settings, index, question, options, rebuild=rebuild, response=response)
            for rebuild in (True, False)
        }
        (one, one_shown, one_asked), (two, two_shown, two_asked) = ways[True], ways[False]
        assert one_asked == [("msearch", companion)]
        assert two_asked == [("msearch", companion), ("msearch", companion)]
        ours = [d.chunk for d in one.filtered.decisions]
        theirs = [d.chunk for d in two.filtered.decisions]
        assert [c.chunk_id for c in ours] == [c.chunk_id for c in theirs] and len(ours) > CAP
        for rebuilt, fetched in zip(ours, theirs):
            assert rebuilt == fetched  # doc id, position, text, offsets, title, section, sentences, header, scale
            assert (rebuilt.lead, rebuilt.index, rebuilt.score) == (fetched.lead, fetched.index, fetched.score)
            assert dict(rebuilt.stage_scores) == dict(fetched.stage_scores)
            assert rebuilt.vector is None and fetched.vector is None
            stamp = {k: v for k, v in fetched.metadata.items() if k not in rebuilt.metadata}
            assert stamp and set(stamp) <= {"source_seq_no", "source_primary_term", "source_hash"}
            assert {**rebuilt.metadata, **stamp} == dict(fetched.metadata)
        assert one_shown == two_shown


def test_the_candidates_are_fetched_when_the_filter_compares_their_vectors(engine, embedder, settings, synced_articles):
    index, questions = synced_articles
    options = parse_options({"answer": False, "redundancy_threshold": 0.9}, max_candidates=50, surface="search")
    result, _, asked = _one_way(engine, embedder, settings, index, questions[0], options, rebuild=True)
    assert asked == [("msearch", companion_name(index))] * 2
    assert result.filtered.decisions and all(d.chunk.vector is not None for d in result.filtered.decisions)


# --- an index without a companion --------------------------------------------------------


class CountingCluster:
    """The engine, recording each search and msearch and the indices it named."""

    def __init__(self, inner):
        self.inner, self.asked = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def search(self, index, body):
        self.asked.append(("search", index))
        return self.inner.search(index, body)

    def msearch(self, searches):
        self.asked.append(("msearch", ",".join(sorted({header["index"] for header in searches[0::2]}))))
        return self.inner.msearch(searches)

    def index_exists(self, index):
        self.asked.append(("index_exists", index))
        return self.inner.index_exists(index)


@pytest.fixture
def unsynced(engine):
    with plain_index(engine, "test-kb-no-companion", MAPPING, DOCS) as name:
        yield name


def test_without_a_companion_only_the_first_request_asks_for_it(engine, embedder, settings, unsynced):
    """The companion's missing index answers the first request's msearch
    (404); the searcher remembers it, so the next request goes straight to
    query-time chunking with no request to the companion at all."""
    fallback = CountingQueryTime(QueryTimePassages(embedder, settings))
    searcher = PostSearcher(settings, lambda: embedder, query_time=fallback)
    options = parse_options({"answer": False}, max_candidates=50, surface="search")
    response = engine.search(unsynced, {"query": {"match": {"body": QUESTION}}, "size": 10})
    companion = companion_name(unsynced)
    for expected in ([("msearch", companion)], []):
        cluster = CountingCluster(engine)
        result = searcher.filter(cluster, response, QUESTION, options, identity="caller")
        assert cluster.asked == expected
        assert result.scored_by == "here" and result.filtered is not None and result.filtered.kept
    assert sorted(fallback.asked) == sorted([*DOCS, *DOCS])  # both requests chunked both hits
    # Other credentials find out for themselves.
    cluster = CountingCluster(engine)
    searcher.filter(cluster, response, QUESTION, options, identity="another caller")
    assert cluster.asked == [("msearch", companion)]


class Counted:
    """The embedder, counting the texts it is given."""

    def __init__(self, embedder):
        self.embedder, self.texts = embedder, 0

    def embed(self, texts):
        self.texts += len(texts)
        return self.embedder.embed(texts)


def test_without_a_companion_a_long_field_is_chunked_from_its_best_sentences(engine, embedder, settings):
    """Query-time passages of a 1,000-3,000-word field come from the runs of
    its best sentences by BM25 (CHUNKRAG_POST_SEARCH_PRESELECT_SENTENCES):
    only those are embedded, each passage is the hit's own text at its
    offsets, and with the preselection off every sentence is chunked."""
    from bench.post_search_bench import documents
    from ingest_pipeline.sentences import bounded_sentence_spans

    doc = documents(7)[1]  # 2,357 words, 113 sentences
    question = doc["questions"][0][0]
    source = {"title": doc["title"], "body": doc["body"]}
    with plain_index(engine, "test-kb-preselect", MAPPING, {"long": source}) as name:
        response = engine.search(name, {"query": {"match_all": {}}, "size": 10})
        options = parse_options({"answer": False, "stages": False}, max_candidates=50, surface="search")
        sentences = len(bounded_sentence_spans(doc["body"], 0, len(doc["body"]), settings.chunking.max_chars))
        assert sentences > 3 * settings.post_search.preselect_sentences
        found = {}
        for preselect in (settings.post_search.preselect_sentences, 0):
            counted = Counted(embedder)
            source = QueryTimePassages(counted, settings, preselect=preselect)
            searcher = PostSearcher(settings, lambda counted=counted: counted, query_time=source)
            result = searcher.filter(engine, response, question, options, identity="caller")
            (hit,) = result.hits
            assert hit.kept and all(doc["body"][c.start : c.end] == c.text for c in hit.kept)
            found[preselect] = (counted.texts, sum(c.sentence_count for c in hit.kept), hit.capped)
        narrowed, whole = found[settings.post_search.preselect_sentences], found[0]
        # the question, the header and the kept sentences only; then every sentence
        assert narrowed[0] <= settings.post_search.preselect_sentences + 2 < sentences <= whole[0]
        # at most the kept sentences, none over the cap; the whole field's passages are over it
        assert narrowed[1] <= settings.post_search.preselect_sentences and narrowed[2] == 0
        assert whole[2] > 0


# --- the relevance model over the companion's passages ----------------------------------


@pytest.mark.parametrize("chosen", [{"relevance": "crossencoder"}, {"rerank": "local"}])
def test_the_relevance_model_scores_the_companions_passages(engine, embedder, settings, synced, chosen):
    from chunkrag_core.providers.local_relevance import shared_relevance_model

    searcher = PostSearcher(settings, lambda: embedder)
    options = parse_options({"answer": False, **chosen}, max_candidates=50, surface="search")
    response = engine.search(synced, {"query": {"match": {"body": QUESTION}}, "size": 10})
    result = searcher.filter(engine, response, QUESTION, options)
    assert result.scored_by == "engine"  # the companion scored and served the passages
    stage = "relevance" if "relevance" in chosen else "rerank"
    kept = [c for hit in result.hits for c in hit.kept]
    expected = shared_relevance_model().score(QUESTION, [c.text for c in kept])
    # A text's score does not depend on the texts batched with it (the graph
    # multiplies in float): the companion's batch and this one agree but for rounding.
    assert [c.stage_scores[stage] for c in kept] == pytest.approx(expected, abs=1e-4)
    assert any("press Rotate" in c.text for c in kept)
