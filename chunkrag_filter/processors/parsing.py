"""Reading a relevance score out of whatever a model printed.

Models asked for "a single decimal number between 0 and 1" answer "0.8",
"Score: 0.8.", "80%", "8/10", "I'd say 7 out of 10", "Relevant", or nothing
useful. :func:`parse_score` maps each to [0, 1] or None, never guessing a
number where there is none.
"""

from __future__ import annotations

import re

_NUMBER = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)"
_FRACTION = re.compile(rf"({_NUMBER})\s*(?:/|out of)\s*({_NUMBER})", re.IGNORECASE)
_PERCENT = re.compile(rf"({_NUMBER})\s*%")
_PLAIN = re.compile(_NUMBER)
_NEGATIVE_WORDS = re.compile(r"^\W*(no|not relevant|irrelevant|none|false)\b", re.IGNORECASE)
_POSITIVE_WORDS = re.compile(r"^\W*(yes|relevant|true)\b", re.IGNORECASE)


def parse_score(text: str | None) -> float | None:
    """A score in [0, 1], or None when the text holds no usable score.

    - ``a/b`` and ``a out of b``: a / b (b > 0)
    - ``n%``: n / 100
    - a bare number: itself if in [0, 1]; on a 0-10 scale if in (1, 10];
      on a 0-100 scale if in (10, 100]; otherwise unusable
    - no number: a leading yes / relevant is 1, no / irrelevant is 0
    Results are clamped to [0, 1].
    """
    if not text:
        return None
    if match := _FRACTION.search(text):
        numerator, denominator = float(match.group(1)), float(match.group(2))
        return _clamp(numerator / denominator) if denominator > 0 else None
    if match := _PERCENT.search(text):
        return _clamp(float(match.group(1)) / 100)
    if match := _PLAIN.search(text):
        value = float(match.group(0))
        if value < 0:
            return 0.0
        if value <= 1:
            return value
        if value <= 10:
            return value / 10
        if value <= 100:
            return value / 100
        return None
    if _NEGATIVE_WORDS.search(text):
        return 0.0
    if _POSITIVE_WORDS.search(text):
        return 1.0
    return None


def parse_yes_no(text: str | None) -> bool | None:
    """True for an answer that starts with yes, False for no, else None."""
    if not text:
        return None
    if _NEGATIVE_WORDS.search(text):
        return False
    if _POSITIVE_WORDS.search(text):
        return True
    return None


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))
