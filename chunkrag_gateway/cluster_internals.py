"""Service mode: what the cluster's errors say of its insides, left out.

Elasticsearch writes some errors as Java prints them: ``_validate/query``'s
explanations hold ``[index/uuid] org.elasticsearch.index.query.QueryShardException:
...; java.lang.NumberFormatException: ...``, a parse error
``org.elasticsearch.common.ParsingException``; its structured errors carry
the index's ``index_uuid`` and a shard failure the ``node`` id. None of it
helps a caller mend a request, and all of it tells an attacker the
implementation, its version's classes and the cluster's ids. In service
mode (callers the cluster does not know) the gateway answers without them:
a Java class name becomes the type Elasticsearch gives the same exception in
its structured errors (``QueryShardException`` ->
``query_shard_exception``), ``[index/uuid]`` becomes ``[index]``, and the
``index_uuid`` and shard failures' ``node`` fields are dropped. Documents
(``_source``, ``fields``, ``highlight``) are never rewritten.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from chunkrag_gateway.errors import GatewayError
from chunkrag_gateway.identity import DOCUMENT_KEYS

# Whether an answer may hold any of it (bytes only, before any decoding):
# words first (a scan in C), then the one pattern, which starts with a "/".
_MARK_WORDS = (b"index_uuid", b"Exception", b"Error", b'"node"', b"org.", b"java.")
_UUID_MARK = re.compile(rb"/[A-Za-z0-9_-]{22}\]")
# A qualified Java class name, under the roots the engines' classes and
# their libraries' live in (``org.elasticsearch.common.ParsingException``,
# ``java.lang.NumberFormatException``, ``com.fasterxml...``); a field's
# dotted path (``doc.meta.Title``) is no class name and is left alone.
_JAVA_CLASS = re.compile(r"\b(?:org|java|javax|jdk|sun|com|io|net)\.(?:[a-z][a-z0-9_]*\.)+([A-Z][A-Za-z0-9_$]*)\b")
# An unqualified exception or error class as Java prints it: its name, then
# "[" (``NumberFormatException[For input string...]``) or ": ".
_JAVA_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Exception|Error))(?=\[|: )")
# ``[index/uuid]``: an index named with its uuid (22 characters of url-safe base64).
_INDEX_WITH_UUID = re.compile(r"\[([^\[\]/\"]{1,255})/[A-Za-z0-9_-]{22}\]")
# Fields that name the cluster's ids.
_UUID_FIELDS = ("index_uuid",)
# Where an answer's errors sit: everything under these keys is an error.
_ERROR_KEYS = frozenset({"error", "failures", "failed_shards"})
# Where data sits (documents, hits, aggregations): never walked.
_DATA_KEYS = DOCUMENT_KEYS | {"hits", "aggregations"}
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def may_name_internals(body: bytes) -> bool:
    """Whether an answer may hold Java class names or the cluster's ids (cheap: bytes only)."""
    return any(word in body for word in _MARK_WORDS) or _UUID_MARK.search(body) is not None


def as_type(java_name: str) -> str:
    """Elasticsearch's type for an exception class: ``NumberFormatException``
    -> ``number_format_exception``."""
    return _CAMEL_BOUNDARY.sub("_", java_name).lower()


def scrubbed_text(text: str) -> str:
    """``text`` without Java class names or ``[index/uuid]`` pairs."""
    text = _INDEX_WITH_UUID.sub(r"[\1]", text)
    text = _JAVA_CLASS.sub(lambda found: as_type(found.group(1)), text)
    return _JAVA_EXCEPTION.sub(lambda found: as_type(found.group(1)), text)


def scrub_internals(document: Any) -> bool:
    """Rewrite, in place, every text inside the answer's errors (``error``,
    ``failures``, ``failed_shards``, wherever they sit: an _msearch item, an
    explanation, a shard failure) that names a Java class or an index's
    uuid, and drop their ``index_uuid`` and shard failures' ``node``; True
    when something changed. Nothing outside an error is rewritten: a hit's
    ``_id``, an aggregation's bucket key and every document are data, whatever
    they hold. A walk with its own stack."""
    changed = False
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, in_error = stack.pop()
        if isinstance(node, list):
            for position, item in enumerate(node):
                if in_error and isinstance(item, str) and (clean := scrubbed_text(item)) != item:
                    node[position] = clean
                    changed = True
                elif isinstance(item, (dict, list)):
                    stack.append((item, in_error))
        elif isinstance(node, dict):
            if in_error:
                for key in _UUID_FIELDS:
                    if node.pop(key, None) is not None:
                        changed = True
                if "shard" in node and "reason" in node and isinstance(node.get("node"), str):  # a shard failure
                    del node["node"]
                    changed = True
            for key, value in node.items():
                if key in _DATA_KEYS:
                    continue
                inner = in_error or key in _ERROR_KEYS
                if inner and isinstance(value, str) and (clean := scrubbed_text(value)) != value:
                    node[key] = clean
                    changed = True
                elif isinstance(value, (dict, list)):
                    stack.append((value, inner))
    return changed


def error_without_internals(error: GatewayError) -> GatewayError:
    """A filtered search's error (the cluster's, raised through the
    library) with its reason and body scrubbed as a pass-through answer is."""
    body = copy.deepcopy(error.body) if error.body is not None else None
    if body is not None:
        scrub_internals({"error": body})
    return GatewayError(error.status, error.type, scrubbed_text(error.reason), body=body, headers=error.headers)
