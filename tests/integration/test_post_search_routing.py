"""Which way a ``_search`` with ``ext.chunkrag`` goes, over real HTTP on
both engines: decided on the concrete indices the path's expression covers
(a wildcard over an index and its companion, a list of one plain and one
chunk index, aliases, the companion named beside its source), asked of the
cluster on every search, so a sync made after the gateway started counts
at once; hits always carry the cluster's own ``_index`` and ``_id``. And
paging with ``ext.chunkrag`` through a point in time opened and closed
through the gateway with the engine's own API, in forward and service
mode. The default filter needs no model."""

from __future__ import annotations

import dataclasses
import uuid

import httpx
import pytest

from chunkrag_core.engines.profile import profile_for
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from ingest_pipeline.sync import companion_name, sync_index

pytestmark = pytest.mark.integration

QUESTION = "how do I rotate an API key"
# Seven documents that all answer the question, each with a line that does not.
DOCS = {
    f"doc-{n}": {
        "title": f"Rotating keys, part {n}",
        "body": f"Step {n}: to rotate an API key, open the console, choose Security, then Keys, and press Rotate. "
        f"The old key keeps working for {n + 1} hours so that clients can switch. "
        "The cafeteria serves lunch from noon.",
        "url": f"https://example.test/rotate/{n}",
    }
    for n in range(7)
}
MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}, "url": {"type": "keyword"}}}
CHUNK_TEXTS = {
    "console": "To rotate an API key from the console, open Security, then Keys, and press Rotate.",
    "violin": "The violin has four strings tuned in fifths. It is played with a bow.",
}
NO_ANSWER = {"chunkrag": {"answer": False}}
BOTH_FIELDS = {"multi_match": {"query": QUESTION, "fields": ["body", "text"]}}
TEAM_KEY = "route-team-" + uuid.uuid4().hex
TRUSTED_KEY = "route-trusted-" + uuid.uuid4().hex


def _plain(engine, name):
    engine.create_index(name, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": MAPPING})
    actions = ({"_op_type": "index", "_index": name, "_id": doc_id, "_source": doc} for doc_id, doc in DOCS.items())
    assert all(ok for ok, _ in engine.bulk(actions, chunk_size=100, max_retries=0, initial_backoff=1))
    engine.refresh(name)


@pytest.fixture(scope="module")
def names(engine, embedder, settings):
    """A plain index and its companion (synced), a chunk index
    `chunkrag ingest` made, and two aliases, all under one prefix of their own."""
    prefix = f"test-route-{uuid.uuid4().hex[:8]}"
    made = {
        "prefix": prefix,
        "plain": f"{prefix}-kb",
        "companion": companion_name(f"{prefix}-kb"),
        "chunks": f"{prefix}-chunks",
        "plain_alias": f"{prefix}-plain-alias",
        "chunks_alias": f"{prefix}-chunks-alias",
    }
    chosen = dataclasses.replace(settings, search_backend=engine.engine)
    try:
        _plain(engine, made["plain"])
        report = sync_index(made["plain"], client=engine, embedder=embedder, settings=chosen)
        assert report.complete and not report.errors
        documents = [plain_document(doc_id, text, doc_id, title=doc_id) for doc_id, text in CHUNK_TEXTS.items()]
        ingested = ingest_documents(
            documents, client=engine, embedder=embedder, settings=chosen, index=made["chunks"], progress=False
        )
        assert ingested.ok, ingested.errors
        for index, alias in ((made["plain"], made["plain_alias"]), (made["chunks"], made["chunks_alias"])):
            # Through the cluster's own REST API: the backend seam has no alias call.
            answer = httpx.put(f"{_engine_url(chosen)}/{index}/_alias/{alias}", timeout=30)
            assert answer.status_code == 200, answer.text
        yield made
    finally:
        for key in ("plain", "companion", "chunks"):
            engine.delete_index(made[key])


def _engine_url(settings):
    return profile_for(settings.search_backend).url(settings).split(",")[0].rstrip("/")


@pytest.fixture(scope="module")
def gateway(settings, embedder, engine, names):
    chosen = dataclasses.replace(settings, search_backend=engine.engine)
    with serving(create_app(chosen, embedder=embedder)) as url:
        yield url


def search(url, path, body, **options):
    return httpx.post(f"{url}/{path.lstrip('/')}", json=body, timeout=120, **options)


def hits(response) -> list[dict]:
    return response.json()["hits"]["hits"]


def where(response) -> list[tuple[str, str]]:
    return [(hit["_index"], hit["_id"]) for hit in hits(response)]


def kept(hit) -> list[dict]:
    return hit["_chunkrag"]["passages"]


def test_a_wildcard_over_an_index_and_its_companion_post_searches_the_index_alone(gateway, names):
    body = {"query": {"match": {"body": QUESTION}}, "size": 3, "ext": NO_ANSWER}
    answer = search(gateway, f"/{names['plain']}*/_search", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["chunkrag"]["mode"] == "post_search"
    assert [index for index, _ in where(answer)] == [names["plain"]] * 3
    assert all(doc_id in DOCS for _, doc_id in where(answer))
    assert all(kept(hit) for hit in hits(answer))
    # Aggregations are the cluster's to answer: still post-search, never the 400 of chunk retrieval.
    counted = search(
        gateway, f"/{names['plain']}*/_search", {**body, "aggs": {"all": {"value_count": {"field": "url"}}}}
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["aggregations"]["all"]["value"] == len(DOCS)
    assert where(counted) == where(answer)


def test_a_sync_made_after_the_gateway_started_changes_nothing_the_caller_sees(
    gateway, engine, embedder, settings, names
):
    name = f"{names['prefix']}-late"
    body = {"query": {"match": {"body": QUESTION}}, "size": 3, "ext": NO_ANSWER}
    _plain(engine, name)
    try:
        before = search(gateway, f"/{name}*/_search", body)
        assert before.status_code == 200 and before.json()["chunkrag"]["mode"] == "post_search"
        chosen = dataclasses.replace(settings, search_backend=engine.engine)
        assert sync_index(name, client=engine, embedder=embedder, settings=chosen).complete
        after = search(gateway, f"/{name}*/_search", body)
        assert after.status_code == 200 and after.json()["chunkrag"]["mode"] == "post_search"
        assert where(after) == where(before) and all(index == name for index, _ in where(after))
    finally:
        engine.delete_index(name)
        engine.delete_index(companion_name(name))


def test_one_plain_and_one_chunk_index_are_post_searched_together_keeping_every_hit(gateway, names):
    alone = search(gateway, f"/{names['plain']}/_search", {"query": BOTH_FIELDS, "size": 20, "ext": NO_ANSWER})
    both = search(
        gateway, f"/{names['plain']},{names['chunks']}/_search", {"query": BOTH_FIELDS, "size": 20, "ext": NO_ANSWER}
    )
    assert both.status_code == 200, both.text
    assert both.json()["chunkrag"]["mode"] == "post_search"
    found = where(both)
    # The plain index's hits are all there, beside the chunk index's, each under its own index.
    assert sorted(hit for hit in found if hit[0] == names["plain"]) == sorted(where(alone))
    assert len(where(alone)) == len(DOCS)
    assert (names["chunks"], "console:0") in found
    # A chunk index's hit is read by its own text, not its header or lead.
    chunk_hit = next(hit for hit in hits(both) if hit["_index"] == names["chunks"] and hit["_id"] == "console:0")
    assert chunk_hit["_chunkrag"]["fields"] == ["text"] and kept(chunk_hit)


def test_aliases_answer_with_the_concrete_index_never_the_alias(gateway, names):
    plain = search(
        gateway, f"/{names['plain_alias']}/_search", {"query": {"match": {"body": QUESTION}}, "ext": NO_ANSWER}
    )
    assert plain.status_code == 200 and plain.json()["chunkrag"]["mode"] == "post_search"
    assert {index for index, _ in where(plain)} == {names["plain"]}
    # An alias over a chunk index: chunk retrieval, each hit under the index it came from.
    chunks = search(
        gateway, f"/{names['chunks_alias']}/_search", {"query": {"match": {"text": QUESTION}}, "ext": NO_ANSWER}
    )
    assert chunks.status_code == 200, chunks.text
    assert "mode" not in chunks.json()["chunkrag"] or chunks.json()["chunkrag"]["mode"] != "post_search"
    assert where(chunks) and all(index == names["chunks"] for index, _ in where(chunks))
    assert "console:0" in {doc_id for _, doc_id in where(chunks)}


def test_the_companion_named_beside_its_source_answers_as_itself(gateway, names):
    answer = search(
        gateway,
        f"/{names['plain']},{names['companion']}/_search",
        {"query": BOTH_FIELDS, "size": 30, "ext": NO_ANSWER},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["chunkrag"]["mode"] == "post_search"
    by_index: dict[str, list[str]] = {}
    for index, doc_id in where(answer):
        by_index.setdefault(index, []).append(doc_id)
    assert set(by_index) == {names["plain"], names["companion"]}
    # The source's hits are its own documents; the companion's are its own ids, under its own name.
    assert sorted(by_index[names["plain"]]) == sorted(DOCS)
    assert all(doc_id.startswith(names["plain"] + "\x1f") for doc_id in by_index[names["companion"]])
    # Reached by a wildcard instead, it is left out.
    wild = search(gateway, f"/{names['prefix']}-*/_search", {"query": BOTH_FIELDS, "size": 30, "ext": NO_ANSWER})
    assert wild.status_code == 200, wild.text
    assert {index for index, _ in where(wild)} == {names["plain"], names["chunks"]}
    # The caller's own exclusion is the cluster's to apply, the companion's is added beside it.
    narrowed = search(
        gateway,
        f"/{names['prefix']}-*,-{names['chunks']}/_search",
        {"query": BOTH_FIELDS, "size": 30, "ext": NO_ANSWER},
    )
    assert narrowed.status_code == 200, narrowed.text
    assert sorted(where(narrowed)) == sorted((names["plain"], doc_id) for doc_id in DOCS)


def test_a_chunk_retrieval_mode_refuses_a_plain_index_naming_mode_post_search(gateway, names):
    mixed = search(
        gateway,
        f"/{names['plain']},{names['chunks']}/_search",
        {"query": BOTH_FIELDS, "ext": {"chunkrag": {"mode": "minmax", "answer": False}}},
    )
    assert mixed.status_code == 400
    reason = mixed.json()["error"]["reason"]
    assert f"[{names['plain']}] is not one" in reason and '"mode": "post_search"' in reason
    aggs = search(
        gateway,
        f"/{names['chunks']}/_search",
        {"query": {"match": {"text": QUESTION}}, "aggs": {}, "ext": {"chunkrag": {"mode": "minmax"}}},
    )
    assert aggs.status_code == 400 and '"mode": "post_search"' in aggs.json()["error"]["reason"]
    # Left to auto, the same body is post-searched.
    auto = search(
        gateway, f"/{names['chunks']}/_search", {"query": {"match": {"text": QUESTION}}, "aggs": {}, "ext": NO_ANSWER}
    )
    assert auto.status_code == 200 and auto.json()["chunkrag"]["mode"] == "post_search"


# --- paging through a point in time ---------------------------------------------------------


def _open_pit(url, engine, index, **options):
    api = profile_for(engine.engine).point_in_time
    answer = httpx.post(f"{url}/{index}/{'/'.join(api.open)}?keep_alive=1m", timeout=30, **options)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    return found.get("id") or found["pit_id"]


def _close_pit(url, engine, pit, **options):
    api = profile_for(engine.engine).point_in_time
    return httpx.request("DELETE", f"{url}/{'/'.join(api.close)}", json={api.close_key: pit}, timeout=30, **options)


def _page(url, pit, after=None, **options):
    body = {
        "pit": {"id": pit, "keep_alive": "1m"},
        "query": {"match": {"body": QUESTION}},
        "size": 3,
        "sort": [{"_score": "desc"}, {"url": "asc"}],
        "ext": NO_ANSWER,
    }
    if after is not None:
        body["search_after"] = after
    return search(url, "/_search", body, **options)


def _two_pages(url, pit, **options):
    first = _page(url, pit, **options)
    assert first.status_code == 200, first.text
    second = _page(url, first.json().get("pit_id", pit), hits(first)[-1]["sort"], **options)
    assert second.status_code == 200, second.text
    return first, second


def test_pit_paging_with_ext_chunkrag_gives_new_hits_with_kept_passages_on_each_page(gateway, engine, names):
    pit = _open_pit(gateway, engine, names["plain"])
    try:
        first, second = _two_pages(gateway, pit)
        for page in (first, second):
            assert page.json()["chunkrag"]["mode"] == "post_search"
            assert len(hits(page)) == 3 and all(index == names["plain"] for index, _ in where(page))
            assert any(kept(hit) for hit in hits(page))
            for hit in hits(page):
                for passage in kept(hit):
                    assert DOCS[hit["_id"]]["body"][passage["start"] : passage["end"]] == passage["text"]
        ids = [doc_id for page in (first, second) for _, doc_id in where(page)]
        assert len(ids) == len(set(ids)) == 6
        pit = second.json().get("pit_id", pit)
    finally:
        assert _close_pit(gateway, engine, pit).status_code == 200


def test_a_search_without_an_index_nor_a_pit_is_refused_naming_both(gateway, names):
    answer = search(gateway, "/_search", {"query": {"match": {"body": QUESTION}}, "ext": NO_ANSWER})
    assert answer.status_code == 400
    reason = answer.json()["error"]["reason"]
    assert "an index in the path" in reason and "point in time" in reason
    # A PIT with an index in the path: where it goes instead.
    both = search(
        gateway, f"/{names['plain']}/_search", {"pit": {"id": "x"}, "query": {"match_all": {}}, "ext": NO_ANSWER}
    )
    assert both.status_code == 400 and "send it as POST /_search" in both.json()["error"]["reason"]


@pytest.fixture(scope="module")
def service_gateway(settings, embedder, engine, names):
    """Service mode on the open node, the gateway's own checks the keys'
    only limit: each PIT id answers only the key that opened it."""
    keys = f"team:{key_hash(TEAM_KEY)}:{names['prefix']}-*; trusted:{key_hash(TRUSTED_KEY)}:{names['prefix']}-*"
    gateway = dataclasses.replace(settings.gateway, auth="service", api_keys=keys, enforce_in_gateway_only=True)
    chosen = dataclasses.replace(settings, search_backend=engine.engine, gateway=gateway)
    with serving(create_app(chosen, embedder=embedder)) as url:
        yield url


def _as(key):
    return {"headers": {"authorization": f"ApiKey {key}"}}


def test_in_service_mode_a_pit_pages_with_ext_chunkrag_only_for_the_key_that_opened_it(service_gateway, engine, names):
    url = service_gateway
    pit = _open_pit(url, engine, names["plain"], **_as(TRUSTED_KEY))
    try:
        first, second = _two_pages(url, pit, **_as(TRUSTED_KEY))
        ids = [doc_id for page in (first, second) for _, doc_id in where(page)]
        assert len(ids) == len(set(ids)) == 6
        pit = second.json().get("pit_id", pit)
        stolen = _page(url, pit, **_as(TEAM_KEY))
        assert stolen.status_code == 404 and "hits" not in stolen.json()
        assert _close_pit(url, engine, pit, **_as(TEAM_KEY)).status_code == 404
        # Still the trusted key's, after another key tried.
        assert _page(url, pit, **_as(TRUSTED_KEY)).status_code == 200
    finally:
        assert _close_pit(url, engine, pit, **_as(TRUSTED_KEY)).status_code == 200
