"""`chunkrag sync --workers` on real Celery workers over the real Redis and
each real engine, a worker SIGKILLed while a page's batches are out: the
pass ends complete and the companion index matches the source exactly
(nothing missing, extra or stale). Embeddings come from a scripted
OpenAI-compatible server (real HTTP; its answers alone are scripted) so a
batch takes long enough to be caught in flight.

The workers use a Redis database of their own (REDIS_DB), flushed before
and after.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from chunkrag_core.engines import make_backend
from chunkrag_core.settings import Settings
from ingest_pipeline.sync import companion_drift, companion_name
from local_services.celery_workers import CeleryWorkers
from local_services.scripted_openai import ScriptedOpenAI, embeddings
from workers.app import SYNC_TASK, make_app
from workers.codec import decode_sync_report
from workers.sync_dispatch import sync_on_workers

pytestmark = pytest.mark.integration

REDIS_DB = 14
DIMS = 64
DOCUMENTS = 48
PAGE = 16  # source documents per page: 32 fields, 8 worker batches of 4


def with_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


@pytest.fixture(scope="module")
def embed_server():
    with ScriptedOpenAI(default=embeddings(DIMS, (0.05, 0.15))) as server:
        server._server.handle_error = lambda request, client_address: None
        yield server


@pytest.fixture(scope="module")
def rig(engine, settings, embed_server, tmp_path_factory):
    """Two workers for ``engine``, on their own Redis database."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKRAG_WORKER_", "CHUNKRAG_EMBED_"))}
    env = {
        **inherited,
        "SEARCH_BACKEND": engine.engine,
        "REDIS_URL": with_db(settings.redis_url, REDIS_DB),
        "CHUNKRAG_EMBED_PROVIDER": "openai",
        "CHUNKRAG_EMBED_MODEL": "scripted-hashing",
        "CHUNKRAG_EMBED_BASE_URL": embed_server.base_url,
        "CHUNKRAG_EMBED_DIMS": str(DIMS),
        "CHUNKRAG_WORKER_INGEST_BATCH_DOCS": "4",
        "CHUNKRAG_WORKER_RETRY_BACKOFF_S": "0.2",
        "CHUNKRAG_WORKER_RETRY_BACKOFF_MAX_S": "0.5",
        # A batch held by a worker that died comes back after
        # budget + 5 + backoff max + 5 s, about 16 s.
        "CHUNKRAG_WORKER_QUERY_BUDGET_S": "6",
    }
    worker_settings = Settings.from_env(env)
    store = redis.Redis.from_url(worker_settings.redis_url)
    store.flushdb()
    try:
        with CeleryWorkers(env, tmp_path_factory.mktemp(f"sync-{engine.engine}")) as pool:
            pool.start(2, timeout=120)
            yield pool, worker_settings
    finally:
        store.flushdb()
        store.close()


@pytest.fixture
def source(rig):
    _, worker_settings = rig
    client = make_backend(worker_settings)
    name = f"test-sync-workers-{uuid.uuid4().hex[:8]}"
    client.create_index(
        name, {"settings": {}, "mappings": {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}}
    )
    actions = [
        {
            "_op_type": "index",
            "_index": name,
            "_id": f"d{n}",
            "_source": {
                "title": f"Note {n}",
                "body": f"Note {n} is about topic {n % 7}. It has a second sentence. And a third, numbered {n}.",
            },
        }
        for n in range(DOCUMENTS)
    ]
    assert all(ok for ok, _ in client.bulk(actions, chunk_size=500, max_retries=0, initial_backoff=1))
    client.refresh(name)
    yield client, name
    client.delete_index(name)
    client.delete_index(companion_name(name))
    client.close()


def test_a_worker_killed_mid_sync_still_leaves_an_exact_companion(rig, source):
    pool, worker_settings = rig
    client, name = source
    pages_done = threading.Event()

    def on_page(report):
        pages_done.set()

    outcome: dict = {}

    def run():
        try:
            outcome["report"] = sync_on_workers(
                name, client=client, settings=worker_settings, fields=["body"], batch=PAGE, on_page=on_page
            )
        except BaseException as exc:  # reported below
            outcome["failure"] = exc

    thread = threading.Thread(target=run, name="sync")
    thread.start()
    assert pages_done.wait(300), "the first page never finished"
    time.sleep(0.3)  # the second page's batches are out
    victim = pool.running[0]
    pool.kill(victim)
    thread.join(600)
    pool.start(1, timeout=120)
    assert not thread.is_alive(), "the sync was still waiting 600 s after a worker was killed"
    if "failure" in outcome:
        raise outcome["failure"]
    report = outcome["report"]
    assert report.complete and report.errors == (), report.errors
    assert (report.read, report.fields, report.rechunked) == (DOCUMENTS, DOCUMENTS, DOCUMENTS)
    drift = companion_drift(client, name, worker_settings, fields=["body"])
    assert (drift.expected, drift.missing, drift.extra, drift.stale) == (DOCUMENTS, 0, 0, 0)
    body = {"size": 500, "_source": ["metadata"], "query": {"match_all": {}}}
    stamps = [hit["_source"]["metadata"] for hit in client.search(companion_name(name), body)["hits"]["hits"]]
    assert stamps and all(isinstance(s["source_seq_no"], int) and s["source_field"] == "body" for s in stamps)

    again = sync_on_workers(name, client=client, settings=worker_settings, fields=["body"], batch=PAGE)
    assert (again.unchanged, again.rechunked, again.deleted) == (DOCUMENTS, 0, 0)


def test_a_whole_pass_runs_as_one_worker_task(rig, source):
    _, worker_settings = rig
    client, name = source
    app = make_app(worker_settings)
    result = app.signature(SYNC_TASK).clone(args=(name,), kwargs={"fields": ["body"]}).apply_async()
    report = decode_sync_report(result.get(timeout=300))
    assert report.complete and report.rechunked == DOCUMENTS and report.companion == companion_name(name)
    assert companion_drift(client, name, worker_settings, fields=["body"]).exact
    [hit] = client.search(companion_name(name), {"size": 1, "_source": ["metadata"]})["hits"]["hits"]
    assert isinstance(hit["_source"]["metadata"]["source_seq_no"], int)
