"""Settings whose chunks are single sentences, for tests that name their passages.

The default chunker groups sentences up to ~500 characters (percentile
breakpoints, 200 characters at least); the paper's θ breakpoints with no
minimum make each sentence of these tests' short texts a chunk of its own
(MiniLM's consecutive-sentence cosines sit below θ = 0.8), so a test can say
which sentence the filter keeps and which it drops.
"""

from __future__ import annotations

import dataclasses

from chunkrag_core.settings import Settings


def sentence_chunks(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings, chunking=dataclasses.replace(settings.chunking, breakpoint="threshold", min_chars=0)
    )
