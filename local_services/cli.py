"""`services up|down|status|wait|logs` for the local Elasticsearch, OpenSearch, Redis and llm server.

Without `--only`, commands act on DEFAULT_SERVICES (Elasticsearch, OpenSearch and Redis);
`--only` names one service, and may be given again for more (each one it names is acted on);
the llm server is started only with `--only llm`, but `down` also stops it, `status`
shows it (its health counts towards the exit code only with `--only llm`) and `logs`
shows its log. Every service is a ManagedProcess (managed.py), built by its
module's `process(settings)`: up, down, status, wait and logs come from there.

`register(subparsers)` plugs the group into the project's CLI;
`python -m local_services <command>` runs it standalone.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from local_services import cluster, distributions, llm_server, redis_server
from local_services.elasticsearch_node import ElasticsearchSettings
from local_services.llm_server import LlmSettings
from local_services.managed import DEFAULT_WAIT_SECONDS, ManagedProcess
from local_services.opensearch_node import OpenSearchSettings
from local_services.process import LocalServiceError, Log, ServiceStatus, print_line
from local_services.redis_server import RedisSettings

# What up/status/wait act on without --only.
DEFAULT_SERVICES = ("elasticsearch", "opensearch", "redis")
ALL_SERVICES = ("elasticsearch", "opensearch", "redis", "llm")


# What `--only` names: one service (from Python), several (the flag given
# more than once), or None for the command's default.
Only = str | Sequence[str] | None


def _selected(only: Only, default: tuple[str, ...] = DEFAULT_SERVICES) -> tuple[str, ...]:
    """The services ``only`` names (each checked), once each; ``default`` without it."""
    if only is None:
        return default
    named = (only,) if isinstance(only, str) else tuple(only)
    for name in named:
        if name not in ALL_SERVICES:
            raise LocalServiceError(f"unknown service {name!r}; choose one of {', '.join(ALL_SERVICES)}")
    return tuple(dict.fromkeys(named))


class _ClusterService:
    """A local cluster behind ManagedProcess's interface (up, down, status,
    wait, logs), so `--nodes N` swaps the single Elasticsearch or OpenSearch
    node for one."""

    def __init__(self, local: cluster.LocalCluster):
        self.local = local

    def up(self, timeout: float, log: Log) -> None:
        cluster.up(self.local, timeout, log)

    def down(self, log: Log) -> None:
        cluster.down(self.local, log)

    def status(self, log: Log) -> list[ServiceStatus]:
        return cluster.status(self.local, log)

    def wait(self, timeout: float, _log: Log) -> str:
        return cluster.wait_for_nodes(self.local, self.local.nodes, timeout)

    def logs(self, lines: int) -> str:
        return "\n".join(
            f"--- {self.local.node_name(i)} ---\n{cluster.node_process(self.local, i).logs(lines)}"
            for i in range(self.local.nodes)
        )


Service = ManagedProcess | _ClusterService
# Each service's managed process, from the environment's settings.
_SERVICES: dict[str, Callable[[], ManagedProcess]] = {
    **{engine: functools.partial(distributions.single_node, engine) for engine in distributions.ENGINES},
    "redis": lambda: redis_server.process(RedisSettings.from_environ()),
    "llm": lambda: llm_server.process(LlmSettings.from_environ()),
}


def _services(names: tuple[str, ...], order: tuple[str, ...], nodes: int = 1) -> list[tuple[str, Service]]:
    """(name, service) of the named services, in ``order``: each a
    ManagedProcess built from the environment's settings. With ``nodes`` > 1,
    Elasticsearch and OpenSearch are local clusters."""
    if nodes > 1:
        return [
            (name, _ClusterService(cluster.LocalCluster.from_environ(name, nodes)))
            if name in distributions.ENGINES
            else (name, _SERVICES[name]())
            for name in order
            if name in names
        ]
    return [(name, _SERVICES[name]()) for name in order if name in names]


# Redis first: it is up in milliseconds, while Elasticsearch takes ~20 s.
UP_ORDER = ("redis", "elasticsearch", "opensearch", "llm")
# The model server first: it holds the most memory.
DOWN_ORDER = ("llm", "elasticsearch", "opensearch", "redis")


def services_up(
    only: Only = None, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line, nodes: int = 1
) -> None:
    """Idempotently start the selected services and wait until they are healthy.

    Settings come from the environment (CHUNKRAG_HOME, CHUNKRAG_*_PORT,
    ES_URL, OPENSEARCH_URL, REDIS_URL; with ``nodes`` > 1, CHUNKRAG_*_CLUSTER_PORT
    and CHUNKRAG_CLUSTER_HEAP). Raises LocalServiceError with an actionable message.
    """
    for _name, service in _services(_selected(only), UP_ORDER, nodes):
        service.up(timeout, log)


def services_down(only: Only = None, log: Log = print_line, nodes: int = 1) -> None:
    # Without --only, also stop an llm server that `up --only llm` started.
    for _name, service in _services(_selected(only, default=ALL_SERVICES), DOWN_ORDER, nodes):
        service.down(log)


def services_status(only: Only = None, log: Log = print_line, nodes: int = 1) -> list[ServiceStatus]:
    """Each selected service's status; without ``only``, every service,
    the model server too (`required` tells which must be healthy)."""
    statuses: list[ServiceStatus] = []
    for _name, service in _services(_selected(only, default=ALL_SERVICES), ALL_SERVICES, nodes):
        found = service.status(log)
        statuses.extend(found if isinstance(found, list) else [found])
    return statuses


def services_wait(
    only: Only = None, timeout: float = DEFAULT_WAIT_SECONDS, log: Log = print_line, nodes: int = 1
) -> None:
    for name, service in _services(_selected(only), UP_ORDER, nodes):
        health = service.wait(timeout, log)
        log(f"{name} healthy ({health})")


def services_logs(only: Only = None, lines: int = 40, log: Log = print_line, nodes: int = 1) -> None:
    """Each selected service's log excerpt: likely causes of a failure, then the log's tail."""
    for name, service in _services(_selected(only, default=ALL_SERVICES), ALL_SERVICES, nodes):
        text = service.logs(lines)
        log(f"=== {name} ===\n{text}")


def app_environ(environ: Mapping[str, str] | None = None, nodes: int = 1) -> dict[str, str]:
    """The URL variables the app reads (ES_URL, OPENSEARCH_URL, REDIS_URL,
    CHUNKRAG_CHAT_BASE_URL) pointing at the services `up` starts from this
    environment, for those it does not set itself. The app knows URLs only:
    a program that starts the local services (on whatever ports) and then
    runs the app passes these on. With ``nodes`` > 1 (`up --nodes N`), ES_URL
    and OPENSEARCH_URL list every node of the local clusters."""
    env = os.environ if environ is None else environ
    if nodes > 1:
        engines = {
            "ES_URL": cluster.LocalCluster.from_environ("elasticsearch", nodes, env).url,
            "OPENSEARCH_URL": cluster.LocalCluster.from_environ("opensearch", nodes, env).url,
        }
    else:
        engines = {
            "ES_URL": ElasticsearchSettings.from_environ(env).url,
            "OPENSEARCH_URL": OpenSearchSettings.from_environ(env).url,
        }
    urls = {
        **engines,
        "REDIS_URL": RedisSettings.from_environ(env).url,
        "CHUNKRAG_CHAT_BASE_URL": LlmSettings.from_environ(env).base_url,
    }
    if env.get("OPENSEARCH_URL") and not env.get("ES_URL"):
        # OPENSEARCH_URL alone chooses OpenSearch (SEARCH_BACKEND unset); an added ES_URL would undo that.
        del urls["ES_URL"]
    return {name: url for name, url in urls.items() if not env.get(name)}


# --- argparse ----------------------------------------------------------------------


def _run_up(args: argparse.Namespace) -> int:
    services_up(args.only, args.timeout, nodes=args.nodes)
    return 0


def _run_down(args: argparse.Namespace) -> int:
    services_down(args.only, nodes=args.nodes)
    return 0


def required(only: Only, status: ServiceStatus) -> bool:
    """Whether ``status`` counts towards `status`'s exit code: the service
    `--only` names, or one `up` starts without it (the model server is shown
    but optional: `up` leaves it alone, and a remote model may be in use)."""
    return only is not None or status.name != "llm"


def _run_status(args: argparse.Namespace) -> int:
    statuses = services_status(args.only, nodes=args.nodes)
    for status in statuses:
        optional = "" if status.healthy or required(args.only, status) else "  [optional: services up --only llm]"
        print_line(status.line() + optional)
    return 0 if all(status.healthy for status in statuses if required(args.only, status)) else 1


def _run_wait(args: argparse.Namespace) -> int:
    services_wait(args.only, args.timeout, nodes=args.nodes)
    return 0


def _run_logs(args: argparse.Namespace) -> int:
    services_logs(args.only, args.lines, nodes=args.nodes)
    return 0


Handler = Callable[[argparse.Namespace], int]


def _guarded(handler: Handler) -> Handler:
    """Turn LocalServiceError into one readable stderr message and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except LocalServiceError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt:
            return 130

    return run


def _add_commands(parent: argparse.ArgumentParser, dest: str) -> None:
    commands = parent.add_subparsers(dest=dest, required=True, metavar="COMMAND")
    specs = (
        ("up", "fetch if needed, start, and wait until healthy (idempotent)", _run_up, True),
        ("down", "stop services started from CHUNKRAG_HOME (idempotent)", _run_down, False),
        (
            "status",
            "one line per service, the model server too; exit 0 only if all are healthy (the model server only "
            "with --only llm)",
            _run_status,
            False,
        ),
        ("wait", "wait until services are healthy", _run_wait, True),
        ("logs", "each service's log: likely causes of a failure, then the last lines", _run_logs, False),
    )
    for name, help_text, handler, takes_timeout in specs:
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument(
            "--only",
            choices=ALL_SERVICES,
            action="append",
            help=f"act on this service only; give it again for several (default: {', '.join(DEFAULT_SERVICES)}"
            + ("; down, status and logs also cover llm" if name in ("down", "status", "logs") else "")
            + ")",
        )
        command.add_argument(
            "--nodes",
            type=int,
            default=1,
            help="Elasticsearch and OpenSearch as local clusters of this many nodes (2-9; default 1: single "
            "nodes); ports from $CHUNKRAG_ES_CLUSTER_PORT (9250) and $CHUNKRAG_OPENSEARCH_CLUSTER_PORT (9270), "
            "heap $CHUNKRAG_CLUSTER_HEAP (512m) per node",
        )
        if takes_timeout:
            command.add_argument(
                "--timeout",
                type=float,
                default=DEFAULT_WAIT_SECONDS,
                help=f"seconds to wait for health (default {DEFAULT_WAIT_SECONDS:.0f})",
            )
        if name == "logs":
            command.add_argument("--lines", type=int, default=40, help="lines of each log (default 40)")
        # `handler` is the dispatch attribute the project CLI (chunkrag_cli) calls.
        command.set_defaults(handler=_guarded(handler))


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `services` command group; each leaf sets `handler(args) -> int`."""
    group = subparsers.add_parser(
        "services",
        help="local Elasticsearch, OpenSearch, Redis and llm server for development and tests",
        description=(
            "Manage the local single-node Elasticsearch and OpenSearch, Redis and the llm server (loopback only)."
        ),
    )
    _add_commands(group, dest="services_command")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m local_services",
        description=(
            "Manage the local single-node Elasticsearch and OpenSearch, Redis and the llm server (loopback only)."
        ),
    )
    _add_commands(parser, dest="command")
    args = parser.parse_args(argv)
    return args.handler(args)
