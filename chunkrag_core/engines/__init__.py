"""The one seam between the project and a search engine.

Only :class:`SearchBackend` objects cross it (``base``): Elasticsearch
(``elasticsearch``) or OpenSearch (``opensearch``, its dialect of the
project's bodies in ``opensearch_dialect``, AWS signing in ``aws_signing``).
The chunk index layout both share is ``schema``; the failures every backend
raises, whatever its client, are ``errors``; what else each engine is (its
name, settings, authentication, what it can do for the gateway) is its
``profile``.

Chosen by `SEARCH_BACKEND` (`elasticsearch` | `opensearch`; with only
`OPENSEARCH_URL` set, OpenSearch) in :func:`make_backend`. Creating a
backend opens no connection; capabilities are probed once, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chunkrag_core.engines.base import ClusterCapabilities, ClusterHealth, SearchBackend
from chunkrag_core.engines.profile import OPENSEARCH, SEARCH_BACKENDS, engine_of

if TYPE_CHECKING:
    # Not at import time: the settings read ``profile``, which this package holds.
    from chunkrag_core.settings import Settings

# The engines a backend exists for: the values SEARCH_BACKEND accepts.
ENGINES = SEARCH_BACKENDS


def make_backend(settings: Settings) -> SearchBackend:
    """The backend ``settings.search_backend`` names, for its URL."""
    if engine_of(settings) is OPENSEARCH:
        from chunkrag_core.engines.opensearch import OpenSearchBackend

        return OpenSearchBackend.from_settings(settings)
    from chunkrag_core.engines.elasticsearch import ElasticsearchBackend

    return ElasticsearchBackend.from_settings(settings)


__all__ = ["ENGINES", "ClusterCapabilities", "ClusterHealth", "SearchBackend", "make_backend"]
