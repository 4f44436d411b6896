"""What the similarity threshold θ does to chunks on real text.

    python -m bench.chunk_lengths

Sentences of 500 SciFact abstracts and of 200 SQuAD (Wikipedia) paragraphs
are embedded once; the pure grouping then runs at each θ with the 500
character cap, and at percentile breakpoints of each document's own
consecutive similarities (with and without a minimum chunk size), and the
chunk-length distribution is recorded.
"""

from __future__ import annotations

import json
import sys

from bench.common import SHARED, write_result

THETAS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)
MAX_CHARS = 500
# (percentile of the distances, minimum chunk characters)
PERCENTILES = ((95, 0), (90, 0), (80, 0), (70, 0), (95, 200), (90, 200))


def corpora():
    from ingest_pipeline.sources import plain_document

    scifact = [
        json.loads(line)
        for line in (SHARED / "eval/scifact/beir_derived/corpus.jsonl").read_text(encoding="utf-8").splitlines()[:500]
    ]
    squad = json.loads((SHARED / "eval/squad/squad2_cs224n_dev-v2.0.json").read_text(encoding="utf-8"))["data"]
    paragraphs = [p["context"] for article in squad for p in article["paragraphs"]][:200]
    return {
        "scifact_500_abstracts": [plain_document(r["_id"], r["text"], "scifact") for r in scifact],
        "squad_200_paragraphs": [plain_document(str(i), text, "squad") for i, text in enumerate(paragraphs)],
    }


def main() -> int:
    from chunkrag_core.providers import make_embedder
    from chunkrag_core.settings import EmbedderSettings
    from ingest_pipeline.chunking import consecutive_similarities, group_sentences, percentile_threshold
    from ingest_pipeline.pipeline import ChunkLengthStats
    from ingest_pipeline.sentences import bounded_sentence_spans

    embedder = make_embedder(EmbedderSettings())
    out = {}
    for name, documents in corpora().items():
        per_doc = [(d.text, bounded_sentence_spans(d.text, 0, len(d.text), MAX_CHARS)) for d in documents]
        vectors = embedder.embed([text[s:e] for text, spans in per_doc for s, e in spans])
        similarities, offset = [], 0
        for _, spans in per_doc:
            similarities.append(consecutive_similarities(vectors[offset : offset + len(spans)]))
            offset += len(spans)
        all_sims = [float(x) for sims in similarities for x in sims]
        rows = {}
        for theta in THETAS:
            lengths, counts = [], []
            for (text, spans), sims in zip(per_doc, similarities):
                for group in group_sentences(spans, sims, theta, MAX_CHARS):
                    lengths.append(spans[group.stop - 1][1] - spans[group.start][0])
                    counts.append(len(group))
            stats = ChunkLengthStats.of(lengths, counts)
            rows[str(theta)] = {k: getattr(stats, k) for k in stats.__slots__}
            print(f"{name} θ={theta}: {stats}", file=sys.stderr)
        by_percentile = {}
        for percentile, min_chars in PERCENTILES:
            lengths, counts = [], []
            for (text, spans), sims in zip(per_doc, similarities):
                for group in group_sentences(spans, sims, percentile_threshold(sims, percentile), MAX_CHARS, min_chars):
                    lengths.append(spans[group.stop - 1][1] - spans[group.start][0])
                    counts.append(len(group))
            stats = ChunkLengthStats.of(lengths, counts)
            by_percentile[f"p{percentile}_min{min_chars}"] = {k: getattr(stats, k) for k in stats.__slots__}
            print(f"{name} percentile {percentile} min {min_chars}: {stats}", file=sys.stderr)
        all_sims.sort()
        out[name] = {
            "documents": len(documents),
            "sentences": offset,
            "consecutive_similarity_quartiles": [
                round(all_sims[int(q * (len(all_sims) - 1))], 3) for q in (0.25, 0.5, 0.75)
            ],
            "by_threshold": rows,
            "by_percentile": by_percentile,
        }
    print(write_result("chunk_lengths", "bench.chunk_lengths", {"max_chars": MAX_CHARS, "corpora": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
