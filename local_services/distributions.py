"""The engines the local services can start, each by the name it runs under:
its node's settings class (ports, variables) and how its managed process is
made. The one place in the local services that knows which engines exist."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from local_services import elasticsearch_node, opensearch_node
from local_services.managed import ManagedProcess
from local_services.process import LocalServiceError


@dataclass(frozen=True)
class Distribution:
    """One engine's node: its module (``process(settings)``, the managed
    process) and its settings class (ports, variables, run name)."""

    module: ModuleType
    settings: type[elasticsearch_node.ElasticsearchSettings] | type[opensearch_node.OpenSearchSettings]

    def process(self, settings) -> ManagedProcess:
        # Looked up on the module at each call, as a module-level function is.
        return self.module.process(settings)


# Each engine's node, by the name it runs under (its settings' RUN_NAME).
_DISTRIBUTIONS: dict[str, Distribution] = {
    known.settings.RUN_NAME: known
    for known in (
        Distribution(elasticsearch_node, elasticsearch_node.ElasticsearchSettings),
        Distribution(opensearch_node, opensearch_node.OpenSearchSettings),
    )
}
ENGINES = tuple(_DISTRIBUTIONS)


def distribution(engine: str) -> Distribution:
    found = _DISTRIBUTIONS.get(engine)
    if found is None:
        raise LocalServiceError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return found


def single_node(engine: str) -> ManagedProcess:
    """The engine's single node, from the environment's settings."""
    known = distribution(engine)
    return known.process(known.settings.from_environ())
