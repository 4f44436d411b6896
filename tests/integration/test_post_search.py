"""Post-search over real HTTP on both engines: an index this project did not
write (``title``/``body``/``url``), searched through the gateway by the
official ``elasticsearch`` and ``opensearch-py`` clients unchanged, with the
bodies people write (aggregations, highlight, sort, paging, search_after,
bool filters, _source filtering). The default filter needs no model."""

from __future__ import annotations

import dataclasses

import pytest

from chunkrag_cli.main import main as chunkrag
from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.sync import companion_name, sync_index
from local_services.scripted_openai import ScriptedOpenAI, completion
from tests.support.chunking import sentence_chunks
from tests.support.plain_index import plain_index

pytestmark = pytest.mark.integration

DOCS = {
    "rotate": {
        "title": "Rotating API keys",
        "body": "Our office moved to a new building last spring. "
        "To rotate an API key, open the console, choose Security, then Keys, and press Rotate. "
        "The old key keeps working for 24 hours so that clients can switch. "
        "The cafeteria serves lunch from noon.",
        "url": "https://example.test/rotate",
        "category": "security",
        "year": 2024,
    },
    "revoke": {
        "title": "Revoking access",
        "body": "Revoking an API key takes effect at once. "
        "Every request signed with a revoked key is refused with status 401. "
        "Holidays are listed on the intranet.",
        "url": "https://example.test/revoke",
        "category": "security",
        "year": 2023,
    },
    "billing": {
        "title": "Invoices",
        "body": "Invoices are sent on the first day of each month. "
        "You can download past invoices from the billing page.",
        "url": "https://example.test/billing",
        "category": "billing",
        "year": 2024,
    },
    "untitled-key": {
        # No body: a hit whose text fields are all absent passes through marked.
        "title": "API key checklist",
        "url": "https://example.test/checklist",
        "category": "security",
        "year": 2022,
    },
}
MAPPING = {
    "properties": {
        "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "body": {"type": "text"},
        "url": {"type": "keyword"},
        "category": {"type": "keyword"},
        "year": {"type": "integer"},
    }
}
QUESTION = "how do I rotate an API key"
NO_ANSWER = {"chunkrag": {"answer": False}}


# Eight guides, each answering part of the question among lines that do not:
# enough hits for pages of three and of five.
GUIDES = {
    f"guide-{n}": {
        "title": f"Key guide {n}",
        "body": f"Guide {n} is about the API keys of team {n}. "
        + (
            "To rotate an API key, open the console, choose Keys and press Rotate. "
            if n % 2 == 0
            else "An API key can be revoked at once from the security settings. "
        )
        + ("Rotate every key at least once a year. " if n % 3 == 0 else "")
        + f"Team {n} meets on floor {n + 1} on Mondays. The cafeteria serves lunch from noon.",
        "category": "security",
        "year": 2016 + n,
    }
    for n in range(8)
}


@pytest.fixture(scope="module")
def kb(engine):
    with plain_index(engine, "test-kb-existing", MAPPING, DOCS) as name:
        yield name


@pytest.fixture(scope="module")
def guides(engine, settings, embedder):
    """The guides twice: in an index of their own, and in one with a
    companion (synced with the gateway's chunking)."""
    chosen = dataclasses.replace(sentence_chunks(settings), search_backend=engine.engine)
    with (
        plain_index(engine, "test-kb-paged", MAPPING, GUIDES) as plain,
        plain_index(engine, "test-kb-paged-synced", MAPPING, GUIDES) as synced,
    ):
        try:
            assert sync_index(synced, client=engine, embedder=embedder, settings=chosen).complete
            yield {"plain": plain, "synced": synced}
        finally:
            engine.delete_index(companion_name(synced))


@pytest.fixture(scope="module")
def model_server():
    # The answer prompt: an answer citing the first passage.
    with ScriptedOpenAI(
        default=completion("Open the console, choose Security, then Keys, press Rotate [1].")
    ) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(settings, embedder, engine, kb, model_server):
    # Sentence passages: the tests name the passage kept and the one dropped.
    chosen = dataclasses.replace(sentence_chunks(settings), search_backend=engine.engine)
    model = OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)
    with serving(create_app(chosen, embedder=embedder, model=model)) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway, engine):
    """The engine's own official client, pointed at the gateway."""
    if engine.engine == "opensearch":
        from opensearchpy import OpenSearch

        made = OpenSearch([gateway], max_retries=0, timeout=60)
    else:
        from elasticsearch import Elasticsearch

        made = Elasticsearch(gateway, max_retries=0, request_timeout=60)
    yield made
    made.close()


def search(client, index: str, body: dict) -> dict:
    return dict(client.search(index=index, body=body))


def bad_request(engine):
    if engine.engine == "opensearch":
        from opensearchpy.exceptions import RequestError

        return RequestError
    from elasticsearch import BadRequestError

    return BadRequestError


def passages(hit) -> list[dict]:
    return hit["_chunkrag"]["passages"]


def test_a_plain_match_on_an_existing_index_keeps_the_passages_that_answer(client, kb):
    response = search(client, kb, {"query": {"match": {"body": QUESTION}}, "ext": NO_ANSWER})
    hits = response["hits"]["hits"]
    assert hits and hits[0]["_id"] == "rotate"
    assert response["chunkrag"]["mode"] == "post_search"
    kept = passages(hits[0])
    assert kept and all(p["field"] == "body" for p in kept)
    body = DOCS["rotate"]["body"]
    for p in kept:
        assert body[p["start"] : p["end"]] == p["text"]
    assert any("press Rotate" in p["text"] for p in kept)
    # The kept passages as a highlight a UI already renders.
    assert hits[0]["highlight"]["body"] == [p["text"] for p in kept]
    # The source is the caller's, whole.
    assert hits[0]["_source"] == DOCS["rotate"]
    # The default drops only what is clearly irrelevant; a stricter cut
    # (the filter's options, as on a chunk index) drops the off-topic passage.
    strict = {"chunkrag": {"answer": False, "fixed_threshold": 0.09}}
    response = search(client, kb, {"query": {"match": {"body": QUESTION}}, "ext": strict})
    kept = passages(response["hits"]["hits"][0])
    assert any("press Rotate" in p["text"] for p in kept)
    assert not any("cafeteria" in p["text"] for p in kept)


def test_the_clusters_aggregations_sort_paging_and_filters_stay_the_clusters(client, kb):
    body = {
        "query": {
            "bool": {
                "must": [{"multi_match": {"query": QUESTION, "fields": ["title", "body"]}}],
                "filter": [{"term": {"category": "security"}}],
            }
        },
        "aggs": {"per_year": {"terms": {"field": "year"}}},
        "sort": [{"year": "desc"}, {"url": "asc"}],
        "size": 2,
        "from": 0,
        "highlight": {"fields": {"title": {}}},
        "ext": NO_ANSWER,
    }
    first = search(client, kb, body)
    direct_ids = ["rotate", "revoke"]  # security documents, newest first
    assert [h["_id"] for h in first["hits"]["hits"]] == direct_ids
    assert first["hits"]["total"]["value"] == 3
    buckets = {b["key"]: b["doc_count"] for b in first["aggregations"]["per_year"]["buckets"]}
    assert buckets == {2024: 1, 2023: 1, 2022: 1}
    assert first["hits"]["hits"][0]["sort"] == [2024, "https://example.test/rotate"]
    # The cluster's own title highlight stays beside the kept body passages.
    top = first["hits"]["hits"][0]
    assert "<em>" in top["highlight"]["title"][0] and top["highlight"]["body"]
    assert "_shards" in first and "took" in first and first["timed_out"] is False
    # Paging: from and search_after go to the cluster as written.
    second = search(client, kb, {**body, "from": 2})
    assert [h["_id"] for h in second["hits"]["hits"]] == ["untitled-key"]
    after = search(client, kb, {**{k: v for k, v in body.items() if k != "from"}, "search_after": top["sort"]})
    assert [h["_id"] for h in after["hits"]["hits"]] == ["revoke", "untitled-key"]


def test_a_hit_without_text_passes_marked_and_source_filtering_is_the_callers(client, kb):
    response = search(
        client,
        kb,
        {"query": {"match": {"title": "API key"}}, "_source": ["title", "url"], "ext": NO_ANSWER},
    )
    hits = {h["_id"]: h for h in response["hits"]["hits"]}
    assert set(hits) >= {"rotate", "untitled-key"}
    for hit in hits.values():
        # The caller's _source filtering hid the body: no passage is made of it.
        assert set(hit["_source"]) <= {"title", "url"}
        assert hit["_chunkrag"]["text"] is False and hit["_chunkrag"]["reason"] == "no_text"
        assert passages(hit) == []
    assert response["chunkrag"]["hits"]["without_text"] == len(hits)


def judged(hit) -> list[tuple]:
    """Every passage of a hit with its offsets, decision, reason and scores."""
    shown = hit["_chunkrag"]["passages"] + hit["_chunkrag"]["dropped"]
    return sorted(
        (p["field"], p["start"], p["end"], p["kept"], p.get("reason"), p["score"], sorted(p["scores"].items()))
        for p in shown
    )


@pytest.mark.parametrize("which", ["plain", "synced"])
def test_a_documents_passages_are_the_same_on_a_page_of_three_and_of_five(client, guides, which):
    index = guides[which]
    body = {
        "query": {"match": {"body": QUESTION}},
        "sort": [{"year": "desc"}],
        "ext": {"chunkrag": {"answer": False, "include_dropped": True, "fixed_threshold": 0.09}},
    }
    pages = {
        "three": search(client, index, {**body, "size": 3}),
        "next three": search(client, index, {**body, "size": 3, "from": 3}),
        "five": search(client, index, {**body, "size": 5}),
    }
    by_page = {name: {hit["_id"]: hit for hit in page["hits"]["hits"]} for name, page in pages.items()}
    assert list(by_page["five"]) == [*by_page["three"], *list(by_page["next three"])[:2]]
    five = by_page["five"]
    for name in ("three", "next three"):
        for doc_id, hit in by_page[name].items():
            if doc_id in five:
                assert judged(hit) == judged(five[doc_id]), f"{doc_id} on the page of {name}"
                assert hit["_chunkrag"]["threshold"] == five[doc_id]["_chunkrag"]["threshold"]
    # The filter did decide: passages kept and dropped, and not every hit alike.
    decisions = [p[3] for hit in five.values() for p in judged(hit)]
    assert True in decisions and False in decisions


def test_empty_hits_drop_leaves_out_hits_without_a_kept_passage(client, kb):
    body = {
        "query": {"match": {"body": "API key invoices"}},
        "ext": {"chunkrag": {"answer": False, "empty_hits": "drop", "fixed_threshold": 0.99, "fallback": "not_found"}},
    }
    response = search(client, kb, body)
    section = response["chunkrag"]["hits"]
    assert section["dropped"] == section["returned"] - len(response["hits"]["hits"]) > 0
    assert response["hits"]["total"]["value"] == section["returned"]


def test_a_named_field_that_is_not_text_is_refused_by_name(client, kb, engine):
    with pytest.raises(bad_request(engine)) as refused:
        search(client, kb, {"query": {"match": {"body": QUESTION}}, "ext": {"chunkrag": {"fields": ["missing"]}}})
    assert "[missing]" in str(refused.value)
    with pytest.raises(bad_request(engine)) as refused:
        search(client, kb, {"query": {"match": {"body": QUESTION}}, "ext": {"chunkrag": {"fields": ["url"]}}})
    assert "[url]" in str(refused.value) and "keyword" in str(refused.value)


def test_a_null_chunkrag_block_is_refused_naming_the_option_not_by_the_cluster(client, kb, engine):
    with pytest.raises(bad_request(engine)) as refused:
        search(client, kb, {"query": {"match": {"body": QUESTION}}, "ext": {"chunkrag": None}})
    said = str(refused.value)
    assert "ext.chunkrag must be an object, got null" in said and "SearchExtBuilder" not in said


def test_a_body_without_query_text_needs_ext_query(client, kb, engine):
    with pytest.raises(bad_request(engine)) as refused:
        search(client, kb, {"query": {"term": {"category": "security"}}, "ext": NO_ANSWER})
    assert "ext.chunkrag.query" in str(refused.value)
    given = search(
        client,
        kb,
        {"query": {"term": {"category": "security"}}, "ext": {"chunkrag": {"query": QUESTION, "answer": False}}},
    )
    top = max(given["hits"]["hits"], key=lambda h: max((p["score"] for p in passages(h)), default=0))
    assert top["_id"] == "rotate"


def test_named_fields_and_title_field(client, kb):
    response = search(
        client,
        kb,
        {
            "query": {"match": {"body": QUESTION}},
            "ext": {"chunkrag": {"answer": False, "fields": ["body", "title"], "include_dropped": True}},
        },
    )
    top = response["hits"]["hits"][0]
    assert top["_chunkrag"]["fields"] == ["body", "title"]
    assert all(p["kept"] is False and p["reason"] for p in top["_chunkrag"]["dropped"])


def test_the_answer_is_written_from_kept_passages_and_cites_index_id_and_offsets(client, kb):
    response = search(client, kb, {"query": {"match": {"body": QUESTION}}, "ext": {"chunkrag": {"answer": True}}})
    answer = response["chunkrag"]["answer"]
    assert answer["found"] and "press Rotate" in answer["text"]
    (cited,) = answer["passages"]
    assert answer["citations"] == [f"{cited['_index']}/{cited['_id']}"]
    kept = {(p["field"], p["start"], p["end"]) for h in response["hits"]["hits"] for p in passages(h)}
    assert (cited["field"], cited["start"], cited["end"]) in kept and cited["_index"] == kb


def test_chunkrag_search_takes_the_same_path_as_the_gateway(client, kb, engine, monkeypatch, capsys, tmp_path):
    import json

    monkeypatch.setenv("SEARCH_BACKEND", engine.engine)
    # The command reads its settings from the environment: the gateway's sentence passages.
    monkeypatch.setenv("CHUNKRAG_CHUNK_BREAKPOINT", "threshold")
    monkeypatch.setenv("CHUNKRAG_CHUNK_MIN_CHARS", "0")
    assert chunkrag(["search", QUESTION, "--index", kb, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    fields = ["body", "title"]  # the multi_match the command builds: the text fields, then the title
    direct = search(client, kb, {"query": {"multi_match": {"query": QUESTION, "fields": fields}}, "ext": NO_ANSWER})
    assert [h["_id"] for h in printed["hits"]["hits"]] == [h["_id"] for h in direct["hits"]["hits"]]
    assert [passages(h) for h in printed["hits"]["hits"]] == [passages(h) for h in direct["hits"]["hits"]]
    body = {"query": {"term": {"category": "billing"}}}
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    assert chunkrag(["search", "when are invoices sent", "--index", kb, "--body", str(path), "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert [h["_id"] for h in own["hits"]["hits"]] == ["billing"]
    assert any("first day" in p["text"] for p in passages(own["hits"]["hits"][0]))


def test_collapse_post_filter_function_score_and_fields_without_source(client, kb):
    body = {
        "query": {
            "function_score": {
                "query": {"match": {"body": "rotate an API key or get invoices"}},
                "functions": [{"weight": 2}],
            }
        },
        "collapse": {"field": "category"},
        "post_filter": {"range": {"year": {"gte": 2023}}},
        "_source": False,
        "fields": ["body"],
        "ext": NO_ANSWER,
    }
    response = search(client, kb, body)
    hits = response["hits"]["hits"]
    # One hit per category, as the cluster collapsed them; the text read from `fields`.
    assert [h["fields"]["category"] for h in hits] == [["security"], ["billing"]]
    assert "_source" not in hits[0] and hits[0]["_id"] == "rotate"
    assert any("press Rotate" in p["text"] for p in passages(hits[0]))


# --- the project's relevance model (a real onnxruntime graph, in the gateway) --------


def all_passages(response) -> list[dict]:
    return [p for hit in response["hits"]["hits"] for p in (*passages(hit), *hit["_chunkrag"].get("dropped", ()))]


def test_relevance_crossencoder_scores_every_passage_with_the_relevance_model(client, kb):
    from chunkrag_core.providers.local_relevance import shared_relevance_model

    body = {
        "query": {"match": {"body": QUESTION}},
        "ext": {"chunkrag": {"answer": False, "relevance": "crossencoder", "include_dropped": True}},
    }
    response = search(client, kb, body)
    assert (response["chunkrag"]["relevance_by"], response["chunkrag"]["relevance_by_reason"]) == ("gateway", None)
    scored = all_passages(response)
    assert scored and all(p["scores"]["calibrated"] == p["score"] for p in passages(response["hits"]["hits"][0]))
    # Each passage's `relevance` is the model's probability that it answers.
    model = shared_relevance_model()
    expected = model.score(QUESTION, [p["text"] for p in scored])
    assert [p["scores"]["relevance"] for p in scored] == pytest.approx(expected, abs=1e-6)
    best = max(scored, key=lambda p: p["scores"]["relevance"])
    assert "press Rotate" in best["text"] and best in passages(response["hits"]["hits"][0])


def test_rerank_local_orders_each_hits_kept_passages_by_the_relevance_model(client, kb):
    from chunkrag_core.providers.local_relevance import shared_relevance_model

    body = {"query": {"match": {"body": QUESTION}}, "ext": {"chunkrag": {"answer": False, "rerank": "local"}}}
    response = search(client, kb, body)
    assert response["chunkrag"]["relevance_by"] == "gateway"
    # Each kept passage's rerank score is the model's probability for it (a text's score does
    # not depend on the texts scored beside it).
    every = [p for hit in response["hits"]["hits"] for p in passages(hit)]
    expected = dict(
        zip([p["text"] for p in every], shared_relevance_model().score(QUESTION, [p["text"] for p in every]))
    )
    for hit in response["hits"]["hits"]:
        kept = passages(hit)
        assert [p["scores"]["rerank"] for p in kept] == pytest.approx([expected[p["text"]] for p in kept], abs=1e-6)
        assert [p["scores"]["rerank"] for p in kept] == sorted((p["scores"]["rerank"] for p in kept), reverse=True)
    assert "press Rotate" in passages(response["hits"]["hits"][0])[0]["text"]
