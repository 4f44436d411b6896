"""A multi-node Elasticsearch or OpenSearch cluster on loopback, from the same
distribution as the single node: every node master-eligible and holding data,
each a managed process of its own (its run dir, pidfile and log), found by the
others through their transport ports.

    cluster = LocalCluster.from_environ("elasticsearch", nodes=3)
    up(cluster)                      # idempotent; returns once all nodes joined
    cluster.url                      # every node: http://127.0.0.1:9250,http://127.0.0.1:9252,...
    cluster.url_of(0)                # http://127.0.0.1:9250
    kill_node(cluster, 2)            # SIGKILL, by pid: a machine lost
    hang_node(cluster, 0)            # SIGSTOP: alive, sockets open, nothing answers
    resume_node(cluster, 0)          # SIGCONT
    start_node(cluster, 2)           # it comes back and rejoins
    seconds_to_status(cluster, "green")
    down(cluster)

Tests and benchmarks that may share the machine with another run take a
block free at the time, and remove its run dirs after:

    cluster = LocalCluster.on_free_ports("opensearch", home)
    ...
    down(cluster); remove(cluster)

Ports: node i answers HTTP on ``first_port + 2i`` and transport on
``first_port + 2i + 1``, so a cluster takes one block of ports beside the
single nodes (9200/9300, 9201/9401). ``services up --nodes 3`` starts one
on the fixed defaults (or CHUNKRAG_*_CLUSTER_PORT).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from chunkrag_core.engines.profile import profile_for
from chunkrag_core.settings import state_home
from local_services.distributions import distribution
from local_services.jvm_node import ClusterMember, cluster_health
from local_services.managed import ManagedProcess
from local_services.process import (
    LOOPBACK,
    LocalServiceError,
    Log,
    ServiceStatus,
    env_port,
    free_port_block,
    print_line,
)

HEAP_VARIABLE = "CHUNKRAG_CLUSTER_HEAP"
# Per node: three nodes of 512 MB fit beside everything else on a shared
# 24 GB machine, and hold a test corpus of tens of thousands of chunks.
DEFAULT_HEAP = "512m"
# Ports per node (HTTP, transport); a block holds this many nodes at most.
PORTS_PER_NODE = 2
MAX_NODES = 9
DEFAULT_WAIT_SECONDS = 300.0
_HEAP_PATTERN = re.compile(r"^\d+[kmgKMG]?$")


@dataclass(frozen=True)
class LocalCluster:
    """Which engine, where its files live (CHUNKRAG_HOME), its port block,
    how many nodes and their heap."""

    engine: str
    home: Path
    first_port: int
    nodes: int = 3
    heap: str = DEFAULT_HEAP

    def __post_init__(self) -> None:
        distribution(self.engine)
        if not 2 <= self.nodes <= MAX_NODES:
            raise LocalServiceError(f"a local cluster has 2 to {MAX_NODES} nodes, not {self.nodes}")
        if not _HEAP_PATTERN.match(self.heap):
            raise LocalServiceError(f"heap {self.heap!r} is not a JVM heap size like '512m' or '1g'")
        if self.first_port + PORTS_PER_NODE * self.nodes - 1 > 65535:
            raise LocalServiceError(f"ports from {self.first_port} run past 65535 for {self.nodes} nodes")

    @classmethod
    def from_environ(cls, engine: str, nodes: int = 3, environ: Mapping[str, str] | None = None) -> LocalCluster:
        env = os.environ if environ is None else environ
        settings = distribution(engine).settings
        return cls(
            engine=engine,
            home=state_home(env),
            first_port=env_port(env, settings.CLUSTER_PORT_VARIABLE, settings.CLUSTER_FIRST_PORT),
            nodes=nodes,
            heap=env.get(HEAP_VARIABLE, "").strip() or DEFAULT_HEAP,
        )

    @classmethod
    def on_free_ports(cls, engine: str, home: Path, nodes: int = 3, heap: str = DEFAULT_HEAP) -> LocalCluster:
        """A cluster on a block of ports free now, clear of any run dir a node
        left under ``home`` (its data belongs to another cluster), for tests
        and benchmarks that may run beside another on the same machine. It
        leaves a run dir per node: `remove` them once the cluster is down."""
        run_name = distribution(engine).settings.RUN_NAME
        first = free_port_block(
            PORTS_PER_NODE * nodes, taken=lambda port: (home / "run" / f"{run_name}-{port}").exists()
        )
        return cls(engine=engine, home=home, first_port=first, nodes=nodes, heap=heap)

    @property
    def name(self) -> str:
        return f"chunkrag-{self.engine}-cluster-{self.first_port}"

    def http_port(self, node: int) -> int:
        return self.first_port + PORTS_PER_NODE * node

    def transport_port(self, node: int) -> int:
        return self.http_port(node) + 1

    def node_name(self, node: int) -> str:
        return f"{self.name}-{node + 1}"

    def member(self, node: int):
        """The node's settings (an ElasticsearchSettings or OpenSearchSettings)."""
        settings_class = distribution(self.engine).settings
        membership = ClusterMember(
            cluster_name=self.name,
            node_name=self.node_name(node),
            transport_port=self.transport_port(node),
            seed_transport_ports=tuple(self.transport_port(i) for i in range(self.nodes)),
            initial_masters=tuple(self.node_name(i) for i in range(self.nodes)),
        )
        return settings_class(home=self.home, port=self.http_port(node), heap=self.heap, cluster=membership)

    def url_of(self, node: int) -> str:
        return f"http://{LOOPBACK}:{self.http_port(node)}"

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(self.url_of(i) for i in range(self.nodes))

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated: the value of ES_URL (or
        OPENSEARCH_URL) that reaches the cluster through whichever nodes are up."""
        return ",".join(self.urls)

    @property
    def url_variable(self) -> str:
        return profile_for(self.engine).url_variable


def _each_node(cluster: LocalCluster, nodes: range | list[int], action: Callable[[int], None]) -> None:
    """``action`` on the nodes side by side (a node waits for the others to
    form the cluster); the first failure is raised once all are done."""
    failures: list[BaseException] = []

    def run(node: int) -> None:
        try:
            action(node)
        except BaseException as exc:  # re-raised below, on the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(node,), name=f"{cluster.name}-{node}") for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def up(cluster: LocalCluster, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> None:
    """Idempotent: start every node not running, wait until all have joined
    one cluster and it is green or yellow."""
    began = time.monotonic()
    log(f"{cluster.name}: {cluster.nodes} nodes, heap {cluster.heap} each, HTTP ports {list(_ports(cluster))}")
    _each_node(cluster, range(cluster.nodes), lambda node: node_process(cluster, node).up(timeout, log))
    status = wait_for_nodes(cluster, cluster.nodes, timeout)
    log(f"{cluster.name}: {cluster.nodes} nodes joined ({status}) in {time.monotonic() - began:.1f} s")
    log(f"{cluster.name}: clients reach every node with {cluster.url_variable}={cluster.url}")


def _ports(cluster: LocalCluster):
    return (cluster.http_port(i) for i in range(cluster.nodes))


def down(cluster: LocalCluster, log: Log = print_line) -> None:
    """Idempotent: stop every node of the cluster started from CHUNKRAG_HOME."""
    _each_node(cluster, range(cluster.nodes), lambda node: node_process(cluster, node).down(log))


def remove(cluster: LocalCluster) -> None:
    """Delete every node's run dir (configuration, data, logs) and lock file;
    refused while a node runs. Pairs with `LocalCluster.on_free_ports`."""
    running = [cluster.node_name(node) for node in range(cluster.nodes) if node_pid(cluster, node) is not None]
    if running:
        raise LocalServiceError(f"{', '.join(running)} still running; stop the cluster before removing it")
    for node in range(cluster.nodes):
        member = cluster.member(node)
        shutil.rmtree(member.run_dir, ignore_errors=True)
        member.lock_file.unlink(missing_ok=True)


def status(cluster: LocalCluster, log: Log = print_line) -> list[ServiceStatus]:
    return [node_process(cluster, node).status(log) for node in range(cluster.nodes)]


def node_process(cluster: LocalCluster, node: int) -> ManagedProcess:
    """One node as the managed process every local service is."""
    return distribution(cluster.engine).process(cluster.member(node))


def node_pid(cluster: LocalCluster, node: int) -> int | None:
    return node_process(cluster, node).running_pid(lambda _message: None)


def kill_node(cluster: LocalCluster, node: int) -> int:
    """SIGKILL one node's JVM by its pid, at once (a machine lost); returns the pid."""
    pid = node_pid(cluster, node)
    if pid is None:
        raise LocalServiceError(f"node {cluster.node_name(node)} is not running")
    node_process(cluster, node).kill()
    return pid


def hang_node(cluster: LocalCluster, node: int) -> int:
    """SIGSTOP one node's JVM by its pid (a node that hangs: the process is
    alive, its sockets open and the kernel still accepts connections, but
    nothing answers); returns the pid. `resume_node` undoes it."""
    pid = node_pid(cluster, node)
    if pid is None:
        raise LocalServiceError(f"node {cluster.node_name(node)} is not running")
    os.kill(pid, signal.SIGSTOP)
    return pid


def resume_node(cluster: LocalCluster, node: int, pid: int) -> None:
    """SIGCONT the node `hang_node` stopped (by the pid it returned)."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        raise LocalServiceError(f"node {cluster.node_name(node)} (pid {pid}) is gone") from None


def start_node(cluster: LocalCluster, node: int, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line) -> None:
    """Start one node again (its data is where it left it); returns once it has rejoined."""
    node_process(cluster, node).up(timeout, log)
    wait_for_nodes(cluster, cluster.nodes, timeout)


def _live_urls(cluster: LocalCluster) -> list[str]:
    return [cluster.url_of(i) for i in range(cluster.nodes) if node_pid(cluster, i) is not None]


def health(cluster: LocalCluster) -> dict:
    """Cluster health from the first node that answers; OSError if none does."""
    last: OSError | None = None
    for url in _live_urls(cluster) or list(cluster.urls):
        try:
            answer = cluster_health(url, timeout=5.0)
        except OSError as exc:
            last = exc
            continue
        if "status" in answer:
            return answer
        last = OSError(f"{url}: {answer}")
    raise last or OSError(f"no node of {cluster.name} answered")


def wait_for_nodes(cluster: LocalCluster, count: int, timeout: float = DEFAULT_WAIT_SECONDS) -> str:
    """Until the cluster counts ``count`` nodes and is green or yellow; its status."""
    deadline = time.monotonic() + timeout
    seen = "nothing yet"
    while time.monotonic() < deadline:
        try:
            answer = health(cluster)
            seen = f"{answer.get('number_of_nodes')} nodes, {answer.get('status')}"
            if answer.get("number_of_nodes", 0) >= count and answer.get("status") in ("green", "yellow"):
                return str(answer["status"])
        except OSError as exc:
            seen = str(exc)
        time.sleep(0.5)
    raise LocalServiceError(f"{cluster.name} did not gather {count} nodes within {timeout:.0f} s ({seen})")


def seconds_to_status(cluster: LocalCluster, wanted: str = "green", timeout: float = DEFAULT_WAIT_SECONDS) -> float:
    """Seconds until the cluster reports ``wanted`` (polled every 0.25 s)."""
    began = time.monotonic()
    deadline = began + timeout
    seen = "nothing yet"
    while time.monotonic() < deadline:
        try:
            seen = str(health(cluster).get("status"))
            if seen == wanted:
                return time.monotonic() - began
        except OSError as exc:
            seen = str(exc)
        time.sleep(0.25)
    raise LocalServiceError(f"{cluster.name} was not {wanted} within {timeout:.0f} s (last: {seen})")
