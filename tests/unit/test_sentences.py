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


# --- languages -------------------------------------------------------------------

from ingest_pipeline.sentences import document_language, splitter_id  # noqa: E402


def test_german_keeps_a_date_and_an_abbreviation_inside_the_sentence():
    text = "Die Frist läuft bis zum 31. März 2026. Das gilt z. B. für alle Kunden. Danach endet sie."
    expected = ["Die Frist läuft bis zum 31. März 2026.", "Das gilt z. B. für alle Kunden.", "Danach endet sie."]
    assert texts(text, sentence_spans(text, 0, len(text), "german")) == expected
    assert texts(text, sentence_spans(text, 0, len(text), "auto")) == expected
    # The English model splits at "31." (why the language matters).
    assert texts(text, sentence_spans(text, 0, len(text), "english"))[0] == "Die Frist läuft bis zum 31."


def test_french_and_spanish_abbreviations_do_not_end_sentences():
    french = "Voir art. 5 du contrat pour les détails. Le prix est fixé par la direction."
    assert texts(french, sentence_spans(french, 0, len(french), "auto")) == [
        "Voir art. 5 du contrat pour les détails.",
        "Le prix est fixé par la direction.",
    ]
    spanish = "La Sra. López llegó tarde a la reunión. El Dr. Pérez la esperaba con los documentos."
    assert texts(spanish, sentence_spans(spanish, 0, len(spanish), "auto")) == [
        "La Sra. López llegó tarde a la reunión.",
        "El Dr. Pérez la esperaba con los documentos.",
    ]


def test_chinese_and_japanese_split_at_their_own_sentence_ends():
    chinese = "今天天气很好。我们去公园吧！你来吗？价格是3.5元。"
    assert texts(chinese, sentence_spans(chinese, 0, len(chinese), "auto")) == [
        "今天天气很好。",
        "我们去公园吧！",
        "你来吗？",
        "价格是3.5元。",
    ]
    japanese = "東京は日本の首都です。人口は約1400万人です！"
    assert texts(japanese, sentence_spans(japanese, 0, len(japanese), "auto")) == [
        "東京は日本の首都です。",
        "人口は約1400万人です！",
    ]
    # Offsets count within the whole text, past a paragraph break too.
    text = "标题\n\n第一句。第二句。"
    assert sentence_spans(text, 4, len(text), "chinese") == [(4, 8), (8, 12)]


def test_the_language_is_told_by_script_then_by_function_words():
    assert document_language("東京は日本の首都です。") == "japanese"
    assert document_language("今天天气很好。") == "chinese"
    assert document_language("Der Vertrag ist mit dem Kunden nicht verlängert.") == "german"
    assert document_language("Le contrat est signé pour les clients de la ville.") == "french"
    assert document_language("El contrato es para los clientes de la ciudad.") == "spanish"
    assert document_language("The contract is signed for the customers.") == "english"
    assert document_language("12345 67890") == "english"  # nothing to tell: English


def test_the_splitter_is_in_the_fingerprint_unless_it_is_the_english_one_of_before():
    from chunkrag_core.settings import ChunkingSettings, Settings
    from ingest_pipeline.pipeline import shaping_of

    assert splitter_id("english") == ""
    assert splitter_id("auto") == splitter_id("auto") != splitter_id("german")
    english = shaping_of(Settings(chunking=ChunkingSettings(language="english")))
    auto = shaping_of(Settings())
    assert "sentences=" not in english and "|sentences=auto:" in auto
