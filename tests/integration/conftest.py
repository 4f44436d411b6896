"""The integration tests' settings: sentence chunks.

These tests name the sentences their short documents hold (which chunk
answers, how many chunks an index has). The default chunker groups sentences
up to ~500 characters; here every test gets the paper's θ breakpoints with no
minimum, which with MiniLM make each of these short sentences a chunk. The
default chunker has its own tests: the unit tests of its numeric core, and the
integration tests that ask for it by name (``ChunkingSettings()``).
"""

from __future__ import annotations

import pytest

from tests.support.chunking import sentence_chunks


@pytest.fixture(scope="session")
def settings(settings):
    return sentence_chunks(settings)
