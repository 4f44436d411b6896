"""A real three-node cluster, Elasticsearch and then OpenSearch, each with a
Redis of its own, on ports free when the module starts (so two runs on one
machine do not meet), each started here through local_services, with a node
SIGKILLed by its pid once every shard of the index has its replica started
(a primary killed while its only replica still recovers from it leaves no
copy to promote, and writes to that shard wait until the node returns):

- during a distributed ingest on two real Celery workers: the ingest
  completes with every chunk the source makes, each once, counted by id and
  by (doc_id, position, scale) against chunks made from the source here; a
  malformed line is reported skipped; the cluster is green again once the
  node is back; a second run finds every document unchanged;
- during the same ingest, a worker SIGKILLed instead: the dispatcher sends
  its batch again (found by pings, or as held by no queue and no live
  worker) and nothing is lost or doubled; the ingest returns, whatever the
  machine's load;
- during a stream of filtered searches through the gateway: every answer is
  a 200, or an error that says why (never a bare 5xx);
- node 0, the first of the three node URLs every client is given (ES_URL),
  SIGKILLed during an ingest on the workers and then during a stream of
  filtered and plain (passed-through) searches through the gateway: nothing
  lost or doubled, and the searches keep answering through the other nodes.

The node-loss scenarios are bench/node_kill.py's (which records the figures), smaller; the worker
kill is this module's own.
Embeddings come from a scripted OpenAI-compatible server (real HTTP; the
model's answers alone are scripted), so the two cores go to the cluster.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench import node_kill
from chunkrag_core.engines import ENGINES
from chunkrag_core.settings import state_home
from local_services import cluster
from local_services.process import free_port_block
from local_services.redis_server import RedisSettings

pytestmark = pytest.mark.integration

DOCUMENTS = 240
# Seconds for the cluster to turn green once the killed node has rejoined
# (Elasticsearch takes a few; bench/results/node_kill.json).
GREEN_TIMEOUT_S = 180
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=ENGINES)
def rig(request, tmp_path_factory):
    """One engine's cluster, Redis, embedding server and workers, on ports
    free now; the module runs every test on Elasticsearch, stops them and
    removes their run dirs, then on OpenSearch."""
    home = state_home(os.environ)
    local = cluster.LocalCluster.on_free_ports(request.param, home)
    redis_port = free_port_block(1, taken=lambda port: RedisSettings(home=home, port=port).run_dir.exists())
    log_dir = tmp_path_factory.mktemp(f"celery-{request.param}")
    try:
        with node_kill.rig(
            log_dir, engine=request.param, first_port=local.first_port, redis_port=redis_port
        ) as the_rig:
            if request.param == "opensearch":
                # OpenSearch 3.5 puts a returning node's stale replicas back
                # on it after the default one-minute delay, then leaves them
                # INITIALIZING with no recovery running (OpenSearch#20177;
                # 3 runs of 3 on 2026-11-26). Rebuilt at once on the other
                # nodes instead (delay 0s), the cluster was green again 4
                # runs of 4. The node loss under test is the same either way.
                node_kill.engine_client(the_rig.settings).indices.put_index_template(
                    name="test-node-loss-no-delay",
                    body={
                        "index_patterns": ["test-node-loss-*"],
                        "template": {"settings": {"index.unassigned.node_left.delayed_timeout": "0s"}},
                    },
                )
            yield the_rig
    finally:
        # The nodes' own logs outlive their run dirs, beside the workers'
        # (pytest keeps its last few temporary dirs): a node that would not
        # rejoin says why there.
        for node in range(local.nodes):
            logs = local.member(node).logs_dir
            if logs.is_dir():
                shutil.copytree(logs, log_dir / f"node-{node}", dirs_exist_ok=True)
        cluster.remove(local)
        redis = RedisSettings(home=home, port=redis_port)
        shutil.rmtree(redis.run_dir, ignore_errors=True)
        redis.lock_file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return node_kill.scifact_corpus(tmp_path_factory.mktemp("corpus") / "scifact.jsonl", DOCUMENTS)


@pytest.fixture
def index(rig):
    # A test that failed with its node down (a kill helper raises before the
    # restart) must not fail the ones after it: each starts with every node up.
    for node in range(rig.cluster.nodes):
        if cluster.node_pid(rig.cluster, node) is None:
            cluster.start_node(rig.cluster, node, timeout=600, log=lambda _message: None)
    name = f"test-node-loss-{uuid.uuid4().hex[:8]}"
    yield name
    node_kill.engine_client(rig.settings).indices.delete(index=name, ignore_unavailable=True)


def test_the_cluster_has_three_nodes_and_ingest_workers_shards_with_a_replica(rig, corpus, index):
    """`chunkrag ingest --workers`, as a user runs it, against the cluster."""
    health = cluster.health(rig.cluster)
    assert health["number_of_nodes"] == 3 and health["number_of_data_nodes"] == 3
    path, _documents = corpus
    small = path.with_name("small.jsonl")
    small.write_text("\n".join(path.read_text().splitlines()[:20]) + "\n")
    command = [sys.executable, "-m", "chunkrag_cli", "ingest", str(small), "--index", index, "--workers", "--json"]
    done = subprocess.run(command, env=rig.env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert (report["documents"], report["errors"], report["skipped"]) == (20, [], [])
    assert report["chunks"] > 20 and report["sentences"] >= report["chunks"]
    client = node_kill.engine_client(rig.settings)
    settings = client.indices.get_settings(index=index)[index]["settings"]["index"]
    assert (settings["number_of_shards"], settings["number_of_replicas"]) == ("3", "1")
    assert client.count(index=index)["count"] == report["chunks"]
    assert cluster.health(rig.cluster)["status"] == "green"


def test_a_node_killed_during_a_distributed_ingest_loses_and_duplicates_nothing(rig, corpus, index):
    path, documents = corpus
    result = node_kill.ingest_with_node_kill(rig, path, documents, index, green_timeout_s=GREEN_TIMEOUT_S)
    report = result["report"]
    assert report["errors"] == []
    assert report["documents"] == documents
    assert len(report["skipped"]) == 1  # the malformed line, with its reason
    for count in ("count_with_node_down", "count_after_restart", "count_after_second_run"):
        counted = result[count]
        assert counted["missing"] == counted["extra"] == counted["duplicates"] == 0, (count, counted)
        assert counted["stored"] == counted["count"] == counted["expected"] == report["chunks"], (count, counted)
    assert result["second_run"] == {"documents": documents, "unchanged": documents, "errors": []}
    if result["not_green"] and rig.cluster.engine == "opensearch":
        # Nothing was lost, but OpenSearch 3.5 left replicas INITIALIZING
        # with no recovery running (none in _cat/recovery), as it does with
        # a delayed allocation (the rig turns that off, above):
        # opensearch-project/OpenSearch#20177.
        pytest.xfail(f"OpenSearch did not recover the rejoined node's replicas: {result['not_green']}")
    assert result["not_green"] is None, result["not_green"]


def test_filtered_searches_through_the_gateway_keep_answering_while_a_node_is_lost(rig, corpus, index):
    from chunkrag_core.engines import make_backend
    from ingest_pipeline.sources import read_sources
    from workers.ingest_dispatch import ingest_documents_on_workers

    path, _documents = corpus
    backend = make_backend(rig.settings)
    first = path.with_name("first.jsonl")
    first.write_text("\n".join(path.read_text().splitlines()[:100]) + "\n")
    assert ingest_documents_on_workers(read_sources([first]), client=backend, settings=rig.settings, index=index).ok
    result = node_kill.searches_with_node_kill(rig, index, before_s=3, down_s=10, after_s=3)
    assert result["searches"] > 10
    for error in result["errors"]:
        # An error must say why: never a bare 5xx.
        assert error["reason"], error
    assert result["statuses_by_phase"].get("after", {}).keys() == {"200"}, result
    assert result["statuses_by_phase"].get("before", {}).keys() == {"200"}, result


def ingest_with_worker_kill(the_rig, corpus: Path, documents: int, index: str, kill_at: float = 0.25) -> dict:
    """Ingest ``corpus`` on the workers and SIGKILL one of them (with its pool)
    once ``kill_at`` of the batches are done: its unacknowledged batch comes
    back from the broker to the others after the visibility timeout. A
    worker is started again after, so the pool keeps its size."""
    from chunkrag_core.engines import make_backend

    settings = dataclasses.replace(the_rig.settings, index=index)
    backend = make_backend(settings)
    expected = node_kill.expected_chunk_ids(corpus, settings)
    batches = math.ceil(documents / settings.workers.ingest_batch_docs)
    thread, outcome, began = node_kill.ingest_in_background(backend, settings, corpus, batches, kill_at)
    victim = the_rig.workers.running[0]
    the_rig.workers.kill(victim)
    killed_at = time.monotonic() - began
    try:
        report = node_kill.ingest_report(thread, outcome, the_rig.log_dir, f"worker {victim.name} was killed")
    finally:
        the_rig.workers.start(1, timeout=120)
    result = {
        "batches": batches,
        "killed_worker": victim.name,
        "killed_after_s": round(killed_at, 2),
        "ingest_s": report.seconds,
        "report": {
            "documents": report.documents,
            "chunks": report.chunks,
            "errors": list(report.errors),
            "resent": report.resent,
        },
        "count": node_kill.count_against_source(backend.client, index, expected),
    }
    backend.close()
    return result


def test_a_worker_killed_during_a_distributed_ingest_loses_and_duplicates_nothing(rig, corpus, index):
    path, documents = corpus
    result = ingest_with_worker_kill(rig, path, documents, index)
    assert result["report"]["errors"] == [] and result["report"]["documents"] == documents
    # The killed worker held a batch, or had just taken one off the queue,
    # unless it was idle between two: sent again at most twice each.
    assert result["report"]["resent"] <= 2 * result["batches"]
    counted = result["count"]
    assert counted["missing"] == counted["extra"] == counted["duplicates"] == 0, counted
    assert counted["stored"] == counted["expected"] == result["report"]["chunks"], counted


# Elasticsearch only: the broker, not the engine, is under test.
@pytest.mark.parametrize("rig", ["elasticsearch"], indirect=True)
def test_a_batch_the_broker_lost_between_queue_and_worker_is_sent_again(rig, corpus, index):
    """A worker SIGKILLed just after it took a message off the queue, before
    it recorded it as unacknowledged, loses the message outright: no ping
    finds it (it never started) and the broker never hands it back. Here the
    message is taken off the queue by hand while the workers do not consume
    it: the dispatcher must find the batch held by no queue and no worker,
    and send it again."""
    import threading

    import redis

    from chunkrag_core.engines import make_backend
    from ingest_pipeline.sources import read_sources
    from workers.app import INGEST_QUEUE
    from workers.ingest_dispatch import ingest_documents_on_workers

    path, _documents = corpus
    one_batch = path.with_name("one-batch.jsonl")
    one_batch.write_text("\n".join(path.read_text().splitlines()[: rig.settings.workers.ingest_batch_docs]) + "\n")
    backend = make_backend(rig.settings)
    broker = redis.Redis.from_url(rig.settings.redis_url)
    control = rig.workers.app.control
    outcome: dict = {}

    def run() -> None:
        outcome["report"] = ingest_documents_on_workers(
            read_sources([one_batch]), client=backend, settings=rig.settings, index=index, progress=False
        )

    workers = len(rig.workers.running)
    control.cancel_consumer(INGEST_QUEUE, reply=True, timeout=10, limit=workers)
    try:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while broker.llen(INGEST_QUEUE) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert broker.delete(INGEST_QUEUE) == 1, "the batch never reached the queue"
    finally:
        control.add_consumer(INGEST_QUEUE, reply=True, timeout=10, limit=workers)
    thread.join(300)
    report = outcome["report"]
    assert report.errors == () and report.documents == rig.settings.workers.ingest_batch_docs
    assert report.resent == 1
    expected = node_kill.expected_chunk_ids(one_batch, dataclasses.replace(rig.settings, index=index))
    counted = node_kill.count_against_source(node_kill.engine_client(rig.settings), index, expected)
    assert counted["missing"] == counted["extra"] == counted["duplicates"] == 0, counted
    backend.close()


# Elasticsearch only: OpenSearch's multi-URL failover is covered by unit tests
# against live sockets; this case on it was not run.
@pytest.mark.parametrize("rig", ["elasticsearch"], indirect=True)
def test_node_zero_killed_while_every_client_holds_all_three_urls(rig, corpus, index):
    """Node 0 is the first URL of every client (the workers', the
    dispatcher's, the gateway's Elasticsearch client and its pass-through
    pools): the clients pass over it to the other nodes."""
    assert rig.settings.es_nodes == rig.cluster.urls and len(rig.settings.es_nodes) == 3
    path, documents = corpus
    ingest = node_kill.ingest_with_node_kill(rig, path, documents, index, victim="node0")
    assert ingest["killed_node"] == rig.cluster.node_name(0)
    report = ingest["report"]
    assert report["errors"] == [] and report["documents"] == documents and len(report["skipped"]) == 1
    for count in ("count_with_node_down", "count_after_restart", "count_after_second_run"):
        counted = ingest[count]
        assert counted["missing"] == counted["extra"] == counted["duplicates"] == 0, (count, counted)
        assert counted["stored"] == counted["count"] == counted["expected"] == report["chunks"], (count, counted)
    assert ingest["second_run"] == {"documents": documents, "unchanged": documents, "errors": []}

    searches = node_kill.searches_with_node_kill(
        rig, index, before_s=3, down_s=10, after_s=3, victim="node0", passthrough=True
    )
    assert searches["killed_node"] == rig.cluster.node_name(0)
    by_phase = searches["statuses_by_phase_and_kind"]
    for phase in ("before", "after"):
        assert by_phase[phase].keys() == {"filtered", "plain"}, searches
        assert all(kind.keys() == {"200"} for kind in by_phase[phase].values()), searches
    # With node 0 gone both kinds keep answering through the other two nodes.
    assert by_phase["node down"]["filtered"].get("200", 0) > 0, searches
    assert by_phase["node down"]["plain"].get("200", 0) > 0, searches
    # At most the one search node 0 held when it died fails (a POST is not
    # replayed on another node once sent), with a reason; none after it.
    down = [error for error in searches["errors"] if error["phase"] == "node down"]
    assert len(down) <= 1, down
    for error in searches["errors"]:
        assert error["reason"], error
