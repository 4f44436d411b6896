"""An Elasticsearch-compatible HTTP gateway: searches pass through to the
cluster unchanged, and a ``_search`` carrying ``ext.chunkrag`` is answered
with the chunks the ChunkRAG filter kept. ``create_app`` builds it.

``create_app`` is imported on first use, not with the package: the
configuration check every ``chunkrag`` command runs reads the gateway's
start check (``start_check``) without loading the web stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chunkrag_gateway.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str):
    if name == "create_app":
        from chunkrag_gateway.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
