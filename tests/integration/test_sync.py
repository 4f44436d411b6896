"""`chunkrag sync` on both real engines: a companion chunk index built for
an index this project did not write, kept in step through changes,
deletions and an interrupted pass, and read back for post-search only where
the caller's hit shows the very text it was made from."""

from __future__ import annotations

import dataclasses
import json
import uuid

import httpx
import pytest

from chunkrag_cli.main import main
from chunkrag_core.engines.errors import EngineNotFound
from chunkrag_core.engines.profile import profile_for
from ingest_pipeline.source_fields import PART_CHARS, SourceField
from ingest_pipeline.sync import SyncError, companion_drift, companion_name, sync_index
from search_extension.companion import CompanionPassages

pytestmark = pytest.mark.integration

MAPPING = {
    "settings": {"number_of_shards": 2, "number_of_replicas": 0},
    "mappings": {
        "properties": {
            "title": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
            "body": {"type": "text"},
            "summary": {"type": "text"},
            "url": {"type": "keyword"},
        }
    },
}


def article(n: int, extra: str = "") -> dict:
    return {
        "title": f"Article {n}",
        "body": (
            f"Article {n} explains how to rotate an API key. Open the settings page and choose keys. "
            f"Create a new key before deleting the old one. {extra}"
        ).strip(),
        "summary": f"Key rotation, part {n}.",
        "url": f"https://example.org/{n}",
    }


def put(engine, index: str, docs: dict[str, dict | None]) -> None:
    """Index (a dict) or delete (None) each id, then refresh."""
    actions = [
        {"_op_type": "delete", "_index": index, "_id": doc_id}
        if source is None
        else {"_op_type": "index", "_index": index, "_id": doc_id, "_source": source}
        for doc_id, source in docs.items()
    ]
    results = list(engine.bulk(actions, chunk_size=100, max_retries=0, initial_backoff=1))
    assert all(ok for ok, _ in results), results
    engine.refresh(index)


@pytest.fixture
def source(engine):
    name = f"test-sync-{uuid.uuid4().hex[:10]}"
    engine.create_index(name, MAPPING)
    yield name
    engine.delete_index(name)
    engine.delete_index(companion_name(name))


def chunk_versions(engine, companion: str) -> dict[str, int]:
    """Each companion chunk's own _seq_no: unchanged when nothing was rewritten."""
    body = {"size": 1000, "seq_no_primary_term": True, "_source": False, "query": {"match_all": {}}}
    return {hit["_id"]: hit["_seq_no"] for hit in engine.search(companion, body)["hits"]["hits"]}


def test_a_first_sync_chunks_every_text_field_and_a_second_rewrites_nothing(engine, embedder, settings, source):
    put(engine, source, {str(n): article(n) for n in range(5)})
    first = sync_index(source, client=engine, embedder=embedder, settings=settings)
    assert first.ok and first.complete, first.errors
    assert (first.read, first.fields, first.rechunked, first.unchanged, first.deleted) == (5, 10, 10, 0, 0)
    assert first.text_fields == ("body", "summary") and first.title_field == "title"
    assert companion_drift(engine, source, settings).exact

    body = {"size": 100, "query": {"term": {"metadata.source_id.keyword": "3"}}, "_source": {"excludes": ["vector"]}}
    chunks = [hit["_source"] for hit in engine.search(companion_name(source), body)["hits"]["hits"]]
    assert {c["metadata"]["source_field"] for c in chunks} == {"body", "summary"}
    assert all(c["title"] == "Article 3" and c["metadata"]["source_index"] == source for c in chunks)
    assert all(isinstance(c["metadata"]["source_seq_no"], int) for c in chunks)
    assert all(isinstance(c["metadata"]["source_primary_term"], int) for c in chunks)
    bodies = [c for c in chunks if c["metadata"]["source_field"] == "body"]
    assert "".join(c["lead"] + c["text"] for c in sorted(bodies, key=lambda c: c["position"])) == article(3)["body"]

    before = chunk_versions(engine, companion_name(source))
    second = sync_index(source, client=engine, embedder=embedder, settings=settings)
    assert (second.read, second.unchanged, second.rechunked, second.deleted, second.errors) == (5, 10, 0, 0, ())
    assert chunk_versions(engine, companion_name(source)) == before


def test_only_what_changed_is_touched_and_the_companion_then_matches_the_source(engine, embedder, settings, source):
    put(engine, source, {str(n): article(n) for n in range(6)})
    sync_index(source, client=engine, embedder=embedder, settings=settings)
    before = chunk_versions(engine, companion_name(source))

    emptied = {**article(4), "summary": ""}
    put(engine, source, {"1": article(1, "Rotate keys every ninety days."), "2": None, "9": article(9), "4": emptied})
    # Document 5 is written again with the same text: a new version, nothing to redo.
    put(engine, source, {"5": article(5)})
    report = sync_index(source, client=engine, embedder=embedder, settings=settings)
    assert report.ok, report.errors
    # 1#body changed, 9's two fields are new; 2's two fields and 4#summary are gone.
    assert (report.read, report.rechunked, report.deleted) == (6, 3, 3)
    assert report.unchanged == report.fields - 3 == 8
    drift = companion_drift(engine, source, settings)
    assert (drift.missing, drift.extra, drift.stale) == (0, 0, 0) and drift.expected == 11

    after = chunk_versions(engine, companion_name(source))
    touched = {chunk_id.split("\x1f")[1] for chunk_id in set(before) ^ set(after)}
    touched |= {
        chunk_id.split("\x1f")[1] for chunk_id in set(before) & set(after) if before[chunk_id] != after[chunk_id]
    }
    assert touched == {"1", "2", "4", "9"}


def set_hidden(engine, settings, index: str, hidden: bool) -> None:
    """``index.hidden`` set through the engine's own REST API (as a companion
    made before companions were hidden has it: false)."""
    chosen = dataclasses.replace(settings, search_backend=engine.engine)
    url = profile_for(chosen.search_backend).url(chosen).split(",")[0].rstrip("/")
    answer = httpx.put(f"{url}/{index}/_settings", json={"index": {"hidden": hidden}}, timeout=30)
    assert answer.status_code == 200, answer.text


def test_a_pattern_counts_as_before_a_sync_and_a_visible_companion_is_made_hidden(engine, embedder, settings, source):
    put(engine, source, {str(n): article(n) for n in range(4)})
    pattern, companion = f"{source}*", companion_name(source)
    before = engine.count(pattern)
    first = sync_index(source, client=engine, embedder=embedder, settings=settings)
    assert first.complete and first.ok and not first.made_hidden  # made hidden, nothing to migrate
    assert engine.index_hidden(companion) and engine.count(companion) > 0  # named, it answers
    assert engine.count(pattern) == before == 4
    # Searches and aggregations over the pattern see the source alone.
    seen = engine.search(pattern, {"size": 100, "aggs": {"indices": {"terms": {"field": "_index"}}}})
    assert {hit["_index"] for hit in seen["hits"]["hits"]} == {source}
    assert [bucket["key"] for bucket in seen["aggregations"]["indices"]["buckets"]] == [source]

    # A companion a sync made before companions were hidden: the next pass hides it, rewriting nothing.
    set_hidden(engine, settings, companion, False)
    assert engine.count(pattern) > before
    versions = chunk_versions(engine, companion)
    second = sync_index(source, client=engine, embedder=embedder, settings=settings)
    assert second.made_hidden and (second.rechunked, second.unchanged) == (0, second.fields)
    assert engine.index_hidden(companion) and engine.count(pattern) == before
    assert chunk_versions(engine, companion) == versions
    assert not sync_index(source, client=engine, embedder=embedder, settings=settings).made_hidden


def test_a_field_the_caller_names_must_be_a_text_field(engine, embedder, settings, source):
    with pytest.raises(SyncError, match="'url' is not a text field"):
        sync_index(source, client=engine, embedder=embedder, settings=settings, fields=["url"])
    with pytest.raises(SyncError, match="does not exist"):
        sync_index(source + "-missing", client=engine, embedder=embedder, settings=settings)


def test_a_malformed_document_is_reported_and_the_rest_synced(engine, embedder, settings):
    name = f"test-sync-{uuid.uuid4().hex[:10]}"
    engine.create_index(
        name, {"settings": {}, "mappings": {"properties": {"body": {"type": "text"}, "note": {"type": "object"}}}}
    )
    try:
        put(engine, name, {"a": {"body": "A fine text."}, "b": {"body": "Another fine one."}})
        report = sync_index(name, client=engine, embedder=embedder, settings=settings, fields=["body"])
        assert report.rechunked == 2 and report.ok
        # A text field takes a number (indexed as its string, kept in
        # `_source` as the number): a value that is not text.
        put(engine, name, {"c": {"body": 5}})
        report = sync_index(name, client=engine, embedder=embedder, settings=settings, fields=["body"])
        assert report.complete and report.unchanged == 2 and report.rechunked == 0
        assert len(report.errors) == 1 and report.errors[0].startswith(f"{name}/c#body: field 'body' holds int")
    finally:
        engine.delete_index(name)
        engine.delete_index(companion_name(name))


class Stop(Exception):
    pass


def test_an_interrupted_pass_resumes_where_it_stopped(engine, embedder, settings, source):
    put(engine, source, {str(n): article(n) for n in range(7)})

    def stop_after_two_pages(report):
        if report.read >= 4:
            raise Stop

    with pytest.raises(Stop):
        sync_index(source, client=engine, embedder=embedder, settings=settings, batch=2, on_page=stop_after_two_pages)
    saved = engine.index_meta(companion_name(source))["chunkrag_sync"]
    assert saved["pit_id"] and saved["search_after"]
    # Whatever else the companion's `_meta` holds is kept.
    engine.set_index_meta(companion_name(source), {"chunkrag_sync": saved, "owner": "search team"})

    resumed = sync_index(source, client=engine, embedder=embedder, settings=settings, batch=2)
    assert resumed.resumed and resumed.complete and not resumed.restarted
    assert (resumed.read, resumed.rechunked, resumed.unchanged) == (3, 6, 0)
    assert companion_drift(engine, source, settings).exact
    meta = engine.index_meta(companion_name(source))
    assert "pit_id" not in meta["chunkrag_sync"] and meta["owner"] == "search team"


def test_a_pass_whose_point_in_time_expired_starts_over_and_rewrites_nothing(engine, embedder, settings, source):
    put(engine, source, {str(n): article(n) for n in range(5)})

    def stop(report):
        raise Stop

    with pytest.raises(Stop):
        sync_index(source, client=engine, embedder=embedder, settings=settings, batch=2, on_page=stop)
    saved = dict(engine.index_meta(companion_name(source))["chunkrag_sync"])
    engine.close_point_in_time(saved["pit_id"])
    with pytest.raises(EngineNotFound):
        engine.read_page(saved["pit_id"], keep_alive="1m", size=1, search_after=None)

    again = sync_index(source, client=engine, embedder=embedder, settings=settings, batch=2)
    assert not again.resumed and "started over" in again.restarted and again.complete
    assert (again.read, again.unchanged, again.rechunked) == (5, 4, 6)
    assert companion_drift(engine, source, settings).exact


class Recording:
    """The fallback: what it was asked, and no passages."""

    def __init__(self):
        self.asked: list[str] = []

    def passages(self, fields, *, query=""):
        self.asked += [f.companion_id for f in fields]
        return {}


def test_the_companion_serves_a_fields_passages_only_for_the_text_the_caller_sees(engine, embedder, settings, source):
    put(engine, source, {"1": article(1), "2": article(2)})
    sync_index(source, client=engine, embedder=embedder, settings=settings)
    fallback = Recording()
    reader = CompanionPassages(engine, companion_name(source), fallback, settings=settings)

    same = SourceField(source, "1", "body", article(1)["body"], "Article 1")
    changed = SourceField(source, "2", "body", article(2)["body"] + " Edited.", "Article 2")
    other_title = SourceField(source, "2", "summary", article(2)["summary"], "Another title")
    never_synced = SourceField(source, "1", "url", "https://example.org/1", "Article 1")
    found = reader.passages([same, changed, other_title, never_synced])

    assert list(found) == [same.companion_id]
    chunks = found[same.companion_id]
    assert "".join((c.lead or "") + c.text for c in chunks) == same.text
    assert all(c.vector is not None and len(c.vector) == settings.embedder.dims for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert fallback.asked == [changed.companion_id, other_title.companion_id, never_synced.companion_id]

    missing = CompanionPassages(engine, source + "-none", fallback, settings=settings)
    assert missing.passages([same]) == {} and fallback.asked[-1] == same.companion_id


def test_the_command_line_syncs_and_reports(engine, settings, source, monkeypatch, capsys):
    put(engine, source, {"1": article(1)})
    monkeypatch.setenv("SEARCH_BACKEND", engine.engine)
    assert main(["sync", source, "--fields", "body", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["read"], report["rechunked"], report["text_fields"]) == (1, 1, ["body"])
    # As ingest takes it; without a terminal on stderr no bar is drawn anyway.
    assert main(["sync", source, "--fields", "body", "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "1 unchanged, 0 chunked again" in said.out and not said.err
    assert main(["sync", source, "--fields", "url"]) == 2
    assert "'url' is not a text field" in capsys.readouterr().err


def test_a_field_over_a_million_characters_is_synced_in_parts_and_served_whole(engine, embedder, settings, source):
    # Paragraphs of one ~46,000-character sentence each and a max_chars that
    # holds one keep the embedding to a few dozen texts (the model reads the
    # first 256 word pieces of each): what is tested is the field's length,
    # not the model's speed.
    roomy = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, max_chars=50_000))
    paragraphs = [
        f"Paragraph {n} of the annual report says that the keys were rotated "
        + " ".join(f"in region {n}-{k} without any outage" for k in range(1400))
        + "."
        for n in range(PART_CHARS // 46_000 + 2)
    ]
    huge = "\n\n".join(paragraphs)
    assert len(huge) > PART_CHARS
    put(engine, source, {"big": {"title": "Report", "body": huge}, "1": article(1)})

    report = sync_index(source, client=engine, embedder=embedder, settings=roomy, fields=["body"])
    assert report.ok, report.errors
    assert (report.read, report.fields, report.rechunked) == (2, 2, 2)
    assert companion_drift(engine, source, roomy, fields=["body"]).exact

    # Post-search's own document of the hit's field has the same parts, so
    # the companion serves the whole field, offsets within it past the millionth character.
    fallback = Recording()
    field = SourceField(source, "big", "body", huge, "Report")
    chunks = CompanionPassages(engine, companion_name(source), fallback, settings=roomy).passages([field])[
        field.companion_id
    ]
    assert fallback.asked == []
    assert "".join((c.lead or "") + c.text for c in chunks) == huge
    assert max(c.end for c in chunks) == len(huge) > PART_CHARS
    assert all(huge[c.start : c.end] == c.text for c in chunks)
    assert sync_index(source, client=engine, embedder=embedder, settings=roomy, fields=["body"]).unchanged == 2


def test_a_companion_chunked_with_the_paper_theta_is_rechunked_whole_by_the_default(engine, embedder, settings, source):
    import dataclasses

    from chunkrag_core.settings import ChunkingSettings

    settings = dataclasses.replace(settings, chunking=ChunkingSettings())  # the shipped default, by name

    long_body = " ".join(
        [
            "Article {n} explains how to rotate an API key.",
            "Open the settings page and choose keys.",
            "Create a new key before deleting the old one.",
            "Glaciers carve deep valleys over millennia.",
            "The ice moves slowly downhill under its own weight.",
            "Tokyo is the capital of Japan and its largest city.",
            "Its railways carry millions of people each day.",
        ]
    )
    put(engine, source, {str(n): {**article(n), "body": long_body.format(n=n)} for n in range(3)})
    paper_theta = dataclasses.replace(
        settings,
        chunking=dataclasses.replace(settings.chunking, breakpoint="threshold", similarity_threshold=0.8, min_chars=0),
    )
    first = sync_index(source, client=engine, embedder=embedder, settings=paper_theta, fields=["body"])
    assert first.ok and first.complete and first.rechunked == 3
    before = engine.count(companion_name(source))
    assert companion_drift(engine, source, paper_theta, fields=["body"]).exact

    again = sync_index(source, client=engine, embedder=embedder, settings=settings, fields=["body"])
    assert again.ok and again.complete and (again.rechunked, again.unchanged) == (3, 0)
    assert companion_drift(engine, source, settings, fields=["body"]).exact
    after = engine.search(companion_name(source), {"size": 1000, "query": {"match_all": {}}, "_source": False})
    ids = [hit["_id"] for hit in after["hits"]["hits"]]
    assert len(ids) == len(set(ids)) == engine.count(companion_name(source)) < before

    same = sync_index(source, client=engine, embedder=embedder, settings=settings, fields=["body"])
    assert (same.rechunked, same.unchanged) == (0, 3)
