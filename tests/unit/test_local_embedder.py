"""The shipped embedder's vectors depend on the text alone: not on the texts
embedded beside it, the batch it falls in, nor how many batches run at once."""

import numpy as np
import pytest

from chunkrag_core.providers.embedding import embedder_identity
from chunkrag_core.providers.local_minilm import LocalMiniLMEmbedder
from chunkrag_core.settings import EmbedderSettings

TEXTS = [
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy.",
    "Rotate an API key from the console.",
    "今天天气很好。",
    "A much longer sentence about the rivers of Europe, their sources, the countries they cross and the seas "
    "they reach, written to make its batch wider than the short ones beside it.",
    "Short.",
    "Photosynthesis turns light into chemical energy.",
    "Der Rhein fließt durch die Schweiz, Deutschland und die Niederlande.",
    "Elasticsearch stores documents in shards.",
    "Lunch is at noon.",
]


@pytest.fixture(scope="module")
def embedders():
    return {threads: LocalMiniLMEmbedder(batch_size=3, threads=threads) for threads in (1, 2)}


def test_a_text_alone_and_in_a_batch_get_the_same_vector(embedders):
    embedder = embedders[2]
    together = embedder.embed(TEXTS)
    alone = np.stack([embedder.embed([text])[0] for text in TEXTS])
    assert together.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(together, alone, atol=1e-5)
    # Beside other texts, in another order and another batch size.
    shuffled = LocalMiniLMEmbedder(batch_size=8, threads=2).embed(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(shuffled, alone, atol=1e-5)


def test_batches_run_side_by_side_give_the_vectors_of_one_thread(embedders):
    one, two = embedders[1].embed(TEXTS * 3), embedders[2].embed(TEXTS * 3)
    np.testing.assert_allclose(one, two, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(two, axis=1), 1.0, atol=1e-5)


def test_no_text_no_work(embedders):
    assert embedders[2].embed([]).shape == (0, 384)


def test_a_cached_vector_is_keyed_by_the_model_that_made_it():
    local = embedder_identity(EmbedderSettings())
    assert local.startswith("local:") and len(local) == len("local:") + 16
    remote = EmbedderSettings(provider="openai", model="text-embedding-3-small", base_url="http://x/v1", dims=1536)
    assert embedder_identity(remote) != embedder_identity(EmbedderSettings(provider="openai", model="other"))
    assert embedder_identity(remote) != local


def test_another_graph_of_the_same_shape_embeds_alike():
    from chunkrag_core.artifacts import MINILM_INT8_ONNX, verified_path

    texts = ["Who founded the University of Virginia?", "After leaving office he founded it."]
    shipped = LocalMiniLMEmbedder(threads=1).embed(texts)
    given = LocalMiniLMEmbedder(threads=1, graph=verified_path(MINILM_INT8_ONNX)).embed(texts)
    assert np.array_equal(shipped, given)


def test_a_graph_that_cannot_load_is_an_embedding_error(tmp_path):
    from chunkrag_core.providers.embedding import EmbeddingError

    broken = tmp_path / "judge.onnx"
    broken.write_bytes(b"not a graph")
    with pytest.raises(EmbeddingError, match="cannot load the embedding graph"):
        LocalMiniLMEmbedder(threads=1, graph=broken).embed(["a text"])
