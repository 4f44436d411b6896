import pytest

from chunkrag_core.providers.chat import probability_of
from chunkrag_filter.processors.parsing import parse_score, parse_yes_no


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.8", 0.8),
        ("Score: 0.75.", 0.75),
        (".9", 0.9),
        ("1", 1.0),
        ("0", 0.0),
        ("Relevance score: 85%", 0.85),
        ("8/10", 0.8),
        ("I'd say 7 out of 10 because it mentions the date", 0.7),
        ("7", 0.7),
        ("65", 0.65),
        ("-0.3", 0.0),
        ("150%", 1.0),
        ("4200", None),
        ("3/0", None),
        ("Not relevant at all.", 0.0),
        ("Yes, this chunk answers it", 1.0),
        ("I cannot determine that.", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_score(text, expected):
    result = parse_score(text)
    assert result == (pytest.approx(expected) if expected is not None else None)


def test_parse_yes_no():
    assert parse_yes_no(" Yes.") is True
    assert parse_yes_no("No, it does not") is False
    assert parse_yes_no("Maybe") is None


def test_probability_from_first_token_logprobs():
    import math

    logprobs = {"Yes": math.log(0.6), " no": math.log(0.2), "The": math.log(0.2)}
    assert probability_of(logprobs, ["yes"], ["no"]) == pytest.approx(0.75)
    assert probability_of({"Maybe": 0.0}, ["yes"], ["no"]) is None
