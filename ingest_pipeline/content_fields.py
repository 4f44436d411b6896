"""Which text fields of someone else's index hold prose, and which only look
like it.

A ``text`` field is not always content. Frameworks that write vector stores
into Elasticsearch and OpenSearch keep their bookkeeping beside the passage:
LangChain's ``ElasticsearchStore`` puts the caller's metadata under
``metadata.*``, LlamaIndex's puts the whole node as JSON in
``metadata._node_content`` next to ``metadata._node_type``, ``doc_id``,
``ref_doc_id`` and ``document_id``, Haystack's keeps ``meta``. Dynamic
mapping makes every such string a ``text`` field. Split into passages, they
reach the filter and, with ``answer: true``, the model.

Two pure checks, applied only to fields chosen automatically (a field a
caller or the configuration names is read whatever it holds):

- :func:`left_out_by_path`: by the field's path, before anything is read
  (framework metadata containers, internal ``_``-prefixed names, ids, URLs
  and paths);
- :func:`not_prose`: by the value a document holds (JSON, a URL, an id, or a
  short keyword-like value), looking at its ends only, so a field of
  megabytes costs no more than a short one.
"""

from __future__ import annotations

import re

# Objects whose sub-fields are metadata, wherever they sit in the path:
# LangChain and LlamaIndex write "metadata", Haystack "meta".
METADATA_CONTAINERS = frozenset({"metadata", "meta", "_meta", "_metadata"})
# Leaf names that hold an identifier, a link or a file path, not prose
# (LlamaIndex's doc_id, ref_doc_id, document_id among them).
ID_NAMES = frozenset(
    {
        "id",
        "uuid",
        "guid",
        "doc_id",
        "ref_doc_id",
        "document_id",
        "node_id",
        "chunk_id",
        "hash",
        "checksum",
        "url",
        "uri",
        "href",
        "link",
        "path",
        "file_path",
        "filepath",
        "file_name",
        "filename",
        "mimetype",
        "mime_type",
        "content_type",
    }
)
# ...and leaf-name endings that say the same ("source_url", "parent_id").
ID_SUFFIXES = ("_id", "_ids", "_url", "_urls", "_uri", "_hash", "_path")
# A value with fewer whitespace-separated words than this is a label
# ("security", "API keys", "en-US"), unless it reads as a sentence (ends with
# sentence punctuation and has at least PROSE_SENTENCE_WORDS words).
PROSE_MIN_WORDS = 5
PROSE_SENTENCE_WORDS = 3
# A value in a script written without spaces (Chinese, Japanese) is prose
# from this many characters on; words cannot be counted there.
PROSE_MIN_CJK_CHARS = 8
# Only this much of each end of a value is looked at: the checks ask how a
# value starts and ends and whether it has a few words, never its whole length.
LOOK_CHARS = 400

_URL = re.compile(r"(?:[a-z][a-z0-9+.-]*://|www\.)\S+", re.IGNORECASE)
# One token that is an id: a UUID, a hex digest, or letters and digits mixed
# with separators and no vowel-bearing word ("a08c83c0-4e78-...", "doc_00017").
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,}|\S*\d\S*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?。！？…]['\"”’)\]]*$")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def left_out_by_path(path: str) -> str | None:
    """Why a text field is not read as content judging by its path alone
    (``"metadata"``, ``"internal"``, ``"id"``), or None."""
    parts = path.split(".")
    if any(part.lower() in METADATA_CONTAINERS for part in parts[:-1]):
        return "metadata"
    leaf = parts[-1].lower()
    if leaf.startswith("_"):
        return "internal"
    if leaf in ID_NAMES or leaf.endswith(ID_SUFFIXES):
        return "id"
    return None


def not_prose(text: str) -> str | None:
    """Why a field's value is not prose to split (``"json"``, ``"url"``,
    ``"id"``, ``"short"``), or None when it is. Several values of a field,
    joined, are judged together."""
    head = text[:LOOK_CHARS].lstrip()
    tail = text[-LOOK_CHARS:].rstrip()
    if not head:
        return "short"
    if (head[0], tail[-1]) in (("{", "}"), ("[", "]")):
        return "json"
    words = head.split(maxsplit=PROSE_MIN_WORDS)
    if len(words) == 1 and len(text) <= LOOK_CHARS:
        token = words[0]
        if _URL.fullmatch(token):
            return "url"
        if _ID.fullmatch(token) or "/" in token or "\\" in token:
            return "id"
    if len(words) >= PROSE_MIN_WORDS:
        return None
    if len(_CJK.findall(head)) >= PROSE_MIN_CJK_CHARS:
        return None
    if len(words) >= PROSE_SENTENCE_WORDS and _SENTENCE_END.search(tail):
        return None
    return "short"
