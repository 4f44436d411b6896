"""The judge embedder's training order: which questions train, in what
batches, the same on every run of a seed (a resumed run relies on it)."""

from chunkrag_train.judge_embedder import EmbedderConfig, question_batches
from chunkrag_train.pairs import Pair


def _pair(group: str, label: int, split: str = "train") -> Pair:
    return Pair(f"question {group}", f"text {group} {label}", label, "squad", group, split)


PAIRS = [
    *(_pair(f"g{i}", 1) for i in range(10)),
    *(_pair(f"g{i}", 0) for i in range(10)),
    _pair("no-positive", 0),
    _pair("held-back", 1, split="validation"),
]


def test_every_training_question_with_a_positive_once_in_batches_of_the_configured_size():
    batches = question_batches(PAIRS, EmbedderConfig(questions_per_batch=4))
    assert [len(b) for b in batches] == [4, 4, 2]
    flat = [g for b in batches for g in b]
    assert sorted(flat) == sorted(f"g{i}" for i in range(10))  # no validation, no question without an answer


def test_the_order_is_the_seeds_alone():
    first = question_batches(PAIRS, EmbedderConfig(seed=13))
    assert question_batches(list(reversed(PAIRS)), EmbedderConfig(seed=13)) == first
    assert question_batches(PAIRS, EmbedderConfig(seed=14)) != first
