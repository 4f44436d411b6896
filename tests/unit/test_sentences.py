from ingest_pipeline.sentences import bounded_sentence_spans, paragraph_spans, sentence_spans, split_long_span


def texts(text, spans):
    return [text[s:e] for s, e in spans]


def test_punkt_keeps_abbreviations_and_gives_offsets():
    text = "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday. It rained."
    spans = sentence_spans(text, 0, len(text))
    assert texts(text, spans) == ["Dr. Smith went to Washington.", "He arrived at 5 p.m. on Monday.", "It rained."]


def test_offsets_are_into_the_whole_text_when_splitting_a_slice():
    text = "# Head\n\nFirst one. Second one."
    spans = sentence_spans(text, 8, len(text))
    assert spans == [(8, 18), (19, 30)]
    assert texts(text, spans) == ["First one.", "Second one."]


def test_a_sentence_never_crosses_a_blank_line():
    text = "- item without stop\n\n- another item\nNext line."
    assert texts(text, sentence_spans(text, 0, len(text))) == ["- item without stop", "- another item\nNext line."]
    assert list(paragraph_spans(text, 0, len(text))) == [(0, 19), (21, 46)]


def test_long_span_is_cut_at_whitespace_and_loses_no_word():
    text = "aaaa bbbb cccc dddd"
    pieces = split_long_span(text, (0, len(text)), max_chars=9)
    assert texts(text, pieces) == ["aaaa bbbb", "cccc dddd"]


def test_a_word_longer_than_the_cap_is_cut_mid_word():
    text = "x" * 25
    assert split_long_span(text, (0, 25), max_chars=10) == [(0, 10), (10, 20), (20, 25)]


def test_bounded_spans_never_exceed_the_cap():
    text = ("word " * 300).strip() + ". Short end."
    spans = bounded_sentence_spans(text, 0, len(text), max_chars=100)
    assert max(e - s for s, e in spans) <= 100
    assert "".join(text[s:e] for s, e in spans).replace(" ", "") == text.replace(" ", "")
