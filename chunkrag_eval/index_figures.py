"""What an index costs on its nodes: disk (per file kind), segments, heap
in use and given, and with several nodes each node's copies, as the
cost-curve benchmark records them (``python -m bench.scale_bench``)."""

from __future__ import annotations

import time


def index_figures(backend, index: str) -> dict:
    """Disk (and per file kind, e.g. the vector files), segments and the
    node's heap, after a refresh and a flush (so segments merged away are
    deleted from disk rather than counted)."""
    client = backend.client
    backend.refresh(index)
    client.indices.flush(index=index)
    stats = client.indices.stats(index=index, metric="store,segments,docs", include_segment_file_sizes=True)
    primaries = stats["_all"]["primaries"]
    files = primaries["segments"].get("file_sizes") or {}
    samples = heap_samples(client)
    figures = {
        "docs": primaries["docs"]["count"],
        "store_bytes": primaries["store"]["size_in_bytes"],
        "store_mb": round(primaries["store"]["size_in_bytes"] / 2**20, 1),
        "segments": primaries["segments"]["count"],
        "file_sizes_mb": {
            kind: round(value["size_in_bytes"] / 2**20, 1)
            for kind, value in sorted(files.items())
            if value["size_in_bytes"] >= 2**20
        },
        **heap_summary(samples),
    }
    if len(samples[0]) > 1:
        total = stats["_all"]["total"]
        figures["store_bytes_total"] = total["store"]["size_in_bytes"]
        figures["store_mb_total"] = round(total["store"]["size_in_bytes"] / 2**20, 1)
        figures["segments_total"] = total["segments"]["count"]
        figures["shards_per_node"] = shards_per_node(client.cat.shards(index=index, format="json", bytes="b"))
    return figures


# Heap in use swings with garbage not yet collected: the least of a few
# samples a second apart is the closer to what the index keeps live.
HEAP_SAMPLES = 5


def heap_samples(client) -> list[dict[str, tuple[int, int]]]:
    """Per sample, each node's name -> (heap used, heap max) in bytes."""
    samples = []
    for i in range(HEAP_SAMPLES):
        nodes = client.nodes.stats(metric="jvm")["nodes"]
        samples.append(
            {
                node.get("name", node_id): (
                    node["jvm"]["mem"]["heap_used_in_bytes"],
                    node["jvm"]["mem"]["heap_max_in_bytes"],
                )
                for node_id, node in nodes.items()
            }
        )
        if i < HEAP_SAMPLES - 1:
            time.sleep(1)
    return samples


def _mb(size: float) -> float:
    return round(size / 2**20, 1)


def heap_summary(samples: list[dict[str, tuple[int, int]]]) -> dict:
    """Heap in use summed over the nodes, least and most of the samples, and
    the heap the nodes were given, summed; with more than one node, the same
    per node as well (each node's least and most over the samples)."""
    used = [sum(u for u, _ in sample.values()) for sample in samples]
    figures = {
        "heap_used_mb_min": _mb(min(used)),
        "heap_used_mb_max": _mb(max(used)),
        "heap_max_mb": _mb(sum(m for _, m in samples[0].values())),
    }
    if len(samples[0]) > 1:
        figures["nodes"] = len(samples[0])
        figures["heap_per_node"] = {
            name: {
                "heap_used_mb_min": _mb(min(sample[name][0] for sample in samples)),
                "heap_used_mb_max": _mb(max(sample[name][0] for sample in samples)),
                "heap_max_mb": _mb(samples[0][name][1]),
            }
            for name in sorted(samples[0])
        }
    return figures


def shards_per_node(cat_shards: list[dict]) -> dict:
    """From ``_cat/shards?format=json&bytes=b``: per node, the primary and
    replica copies it holds and their size on disk."""
    nodes: dict[str, dict] = {}
    for row in cat_shards:
        node = row.get("node") or "unassigned"
        kind = "primaries" if row["prirep"] == "p" else "replicas"
        held = nodes.get(node, {"primaries": 0, "replicas": 0, "store_bytes": 0})
        nodes[node] = {**held, kind: held[kind] + 1, "store_bytes": held["store_bytes"] + int(row.get("store") or 0)}
    return {name: {**held, "store_mb": _mb(held["store_bytes"])} for name, held in sorted(nodes.items())}
