"""The local cluster's layout and node configuration (no node is started)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from local_services import cli, cluster
from local_services.elasticsearch_node import ElasticsearchSettings, render_elasticsearch_yml
from local_services.opensearch_node import render_opensearch_yml
from local_services.process import LocalServiceError, free_port_block, port_free


def test_ports_names_and_members() -> None:
    local = cluster.LocalCluster("elasticsearch", Path("/state"), first_port=19300, nodes=3)
    assert [local.http_port(i) for i in range(3)] == [19300, 19302, 19304]
    assert [local.transport_port(i) for i in range(3)] == [19301, 19303, 19305]
    assert local.urls == ("http://127.0.0.1:19300", "http://127.0.0.1:19302", "http://127.0.0.1:19304")
    member = local.member(1)
    assert isinstance(member, ElasticsearchSettings)
    assert member.port == 19302 and member.transport_port == 19303 and member.heap == "512m"
    assert member.cluster_name == "chunkrag-elasticsearch-cluster-19300"
    # One run dir per node: each keeps its own data.
    assert member.run_dir == Path("/state/run/elasticsearch-19302")


def test_member_yml_discovers_the_others_instead_of_running_alone() -> None:
    local = cluster.LocalCluster("elasticsearch", Path("/state"), first_port=19300, nodes=3)
    yml = render_elasticsearch_yml(local.member(2))
    assert "discovery.type" not in yml
    assert 'discovery.seed_hosts: ["127.0.0.1:19301", "127.0.0.1:19303", "127.0.0.1:19305"]' in yml
    names = '["chunkrag-elasticsearch-cluster-19300-1", "chunkrag-elasticsearch-cluster-19300-2", '
    assert f"cluster.initial_master_nodes: {names}" in yml
    assert "node.name: chunkrag-elasticsearch-cluster-19300-3" in yml
    assert "http.port: 19304" in yml and "transport.port: 19305" in yml


def test_opensearch_members_name_cluster_managers() -> None:
    local = cluster.LocalCluster("opensearch", Path("/state"), first_port=19320, nodes=3)
    yml = render_opensearch_yml(local.member(0))
    assert "cluster.initial_cluster_manager_nodes: [" in yml
    assert "cluster.name: chunkrag-opensearch-cluster-19320" in yml


def test_a_single_node_is_still_alone() -> None:
    yml = render_elasticsearch_yml(ElasticsearchSettings(home=Path("/state")))
    assert "discovery.type: single-node" in yml and "seed_hosts" not in yml


def test_environment_chooses_ports_and_heap() -> None:
    env = {"CHUNKRAG_HOME": "/state", "CHUNKRAG_OPENSEARCH_CLUSTER_PORT": "19340", "CHUNKRAG_CLUSTER_HEAP": "256m"}
    local = cluster.LocalCluster.from_environ("opensearch", 3, env)
    assert (local.first_port, local.heap, local.nodes) == (19340, "256m", 3)
    assert cluster.LocalCluster.from_environ("elasticsearch", 2, {"CHUNKRAG_HOME": "/s"}).first_port == 9250


@pytest.mark.parametrize(
    "engine, nodes, heap", [("solr", 3, "512m"), ("elasticsearch", 1, "512m"), ("elasticsearch", 3, "lots")]
)
def test_bad_layouts_are_refused(engine: str, nodes: int, heap: str) -> None:
    with pytest.raises(LocalServiceError):
        cluster.LocalCluster(engine, Path("/state"), first_port=19300, nodes=nodes, heap=heap)


def test_services_with_nodes_swap_engines_for_clusters(monkeypatch) -> None:
    monkeypatch.setenv("CHUNKRAG_HOME", "/state")
    chosen = cli._services(("elasticsearch", "redis"), cli.UP_ORDER, nodes=3)
    names = [name for name, _service in chosen]
    assert names == ["redis", "elasticsearch"]
    assert isinstance(chosen[1][1], cli._ClusterService) and chosen[1][1].local.nodes == 3
    assert not isinstance(chosen[0][1], cli._ClusterService)


def test_nodes_started_side_by_side_unpack_the_distribution_once(tmp_path: Path) -> None:
    """Three nodes of a fresh state home fetch at once: one unpacks, the
    others wait and find the tree (unguarded, the second rename fails with
    'Directory not empty')."""
    import threading
    import zipfile

    from local_services import jvm_node

    archive = tmp_path / "engine-1.0.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("engine-1.0/bin/engine", "#!/bin/sh\n")
        zipped.writestr("engine-1.0/lib/engine-1.0.jar", "")
    destination = tmp_path / "cache" / "engine-1.0"
    destination.parent.mkdir()
    unpacks: list[int] = []

    def fetch(_settings, _java, log) -> Path:
        if (destination / "bin" / "engine").is_file():
            return destination
        unpacks.append(1)
        return jvm_node.unpack(node, archive, destination, log, finish=lambda _tree: threading.Event().wait(0.2))

    node = jvm_node.JvmNode(
        name="engine",
        title="Engine",
        version="1.0",
        env_prefix="ENGINE",
        cmdline_marker="engine.Main",
        fetch=fetch,
        configure=lambda *_: None,
    )
    settings = ElasticsearchSettings(home=tmp_path / "home", port=19999)
    results: list[object] = []

    def start() -> None:
        try:
            results.append(jvm_node.fetch_once(node, settings, None, lambda _message: None))
        except Exception as exc:  # the assertion below shows it
            results.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [destination] * 3
    assert unpacks == [1]


def _in_order(blocks: list[int]) -> None:
    """A `shuffle` that leaves the blocks in order, from the first."""


def test_a_free_block_skips_a_port_in_use_and_ports_a_run_dir_claims() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        assert not port_free(busy)
        # Blocks of 4 from the held port's block: the first is skipped for
        # the socket, the second for a claimed run dir, the third is free
        # (unless something else on the machine holds it: then a later one).
        low = busy - busy % 4
        first = free_port_block(4, ports=(low, low + 400), taken=lambda port: port == low + 5, shuffle=_in_order)
    assert first >= low + 8 and first % 4 == low % 4


def test_no_free_block_is_a_clear_error() -> None:
    with pytest.raises(LocalServiceError, match="no block of 4 ports"):
        free_port_block(4, ports=(20000, 20002))
    with pytest.raises(LocalServiceError, match="found no 2 free consecutive ports"):
        free_port_block(2, ports=(20000, 20009), taken=lambda port: True)


def test_a_cluster_on_free_ports_avoids_run_dirs_left_under_home(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    # Every block of 6 from 20000 but the one at 26000 holds a node's run dir.
    for port in range(20000, 32000, 6):
        if port != 26000:
            (tmp_path / "run" / f"opensearch-{port}").mkdir()
    local = cluster.LocalCluster.on_free_ports("opensearch", tmp_path, nodes=3)
    assert local.first_port == 26000
    assert local.urls[0] == f"http://127.0.0.1:{local.first_port}"


def test_removing_a_stopped_cluster_deletes_its_nodes_run_dirs(tmp_path: Path) -> None:
    local = cluster.LocalCluster("elasticsearch", tmp_path, first_port=21000, nodes=2)
    for node in range(2):
        (local.member(node).run_dir / "data").mkdir(parents=True)
        local.member(node).lock_file.touch()
    (tmp_path / "run" / "elasticsearch-9200").mkdir()
    cluster.remove(local)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["elasticsearch-9200"]
