"""What a request body reads, read exactly as Elasticsearch would, or refused:
the gateway's second line in service mode (the first is the cluster's own
limit on the derived key, ``derived_keys.py``).

Pure functions on bytes and decoded JSON. Whatever the gateway cannot read
unambiguously is refused rather than guessed at: an _msearch body whose
pairing of header and body lines could differ from Elasticsearch's, header
keys outside Elasticsearch's documented set, JSON with duplicate keys or
comments, bodies in URL parameters, and in search bodies any clause that
reads another index by reference (terms lookup, indexed shapes,
more_like_this and pinned documents, percolate by id, lookup runtime fields)
unless the caller may read that index. ``wrapper`` queries (a query hidden in
base64) are refused outright.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Callable
from urllib.parse import parse_qsl

import orjson

from chunkrag_gateway import errors

# Elasticsearch's documented _msearch header keys.
MSEARCH_HEADER_KEYS = frozenset(
    {
        "index",
        "search_type",
        "preference",
        "routing",
        "request_cache",
        "allow_partial_search_results",
        "ccs_minimize_roundtrips",
        "expand_wildcards",
        "ignore_unavailable",
        "allow_no_indices",
        "ignore_throttled",
    }
)
# Query parameters that carry a request body (and its type) instead of the body.
BODY_PARAMETERS = ("source", "source_content_type")
# Media types whose bodies the gateway reads as Elasticsearch does; YAML,
# CBOR and SMILE bodies would be read differently (or not at all).
JSON_MEDIA_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/vnd.elasticsearch+json",
        "application/vnd.elasticsearch+x-ndjson",
    }
)
# Elasticsearch's other body formats. Service mode scrubs the cluster's
# refusals out of JSON answers only, so it asks for no other (a YAML answer's
# line folding could even split the words it looks for).
OTHER_FORMATS = ("yaml", "cbor", "smile")
# geo_shape and shape queries read an indexed shape from this index unless told.
DEFAULT_SHAPE_INDEX = "shapes"


# Deepest nesting (objects and lists) of a body the gateway decodes for its own use (ext.chunkrag,
# /v1/ask). No filtered query needs more; it keeps every later walk (option and query parsers, error
# messages' repr, the Elasticsearch client's serializer: orjson, 255 levels) far from Python's
# recursion limit. Python's own JSON parser recurses, and a RecursionError caught mid-parse can leave
# CPython 3.11's recursion bookkeeping off (later ``ast`` calls fail with SystemError), so depth is
# measured first, without recursion.
MAX_BODY_DEPTH = 200
# Deepest nesting of a body the gateway only reads (service mode's second line) and forwards:
# Elasticsearch's own parser limit (Jackson's StreamReadConstraints, 1,000 levels), so the gateway
# refuses no body the cluster would take (a 100-deep bool chain is the cluster's to refuse, by
# indices.query.bool.max_nested_depth; a 450-deep chain of aggregations it answers). Such bodies are
# decoded by orjson (which stops at 1,024 levels itself) and walked with stacks of the gateway's own.
MAX_FORWARDED_DEPTH = 1000


# Content codings Elasticsearch decodes (Netty's, matched case-insensitively on
# the whole header value). A body labelled with one that does not decode as
# it says makes the cluster drop the connection unanswered, so the gateway
# decodes it first and answers 400 itself. Other codings reach the cluster
# undecoded, which refuses the body as it is.
GZIP_CODINGS = ("gzip", "x-gzip")
DEFLATE_CODINGS = ("deflate", "x-deflate")
# Netty decodes snappy too; no client sends it, and the gateway cannot check it.
REFUSED_CODINGS = ("snappy",)
# Decoding stops here (Elasticsearch's http.max_content_length): what is past
# it is the cluster's to refuse (413), and it bounds the work a small,
# highly compressed body can cost.
MAX_DECODED_BYTES = 100 * 1024 * 1024
# Decoded per step: the output is counted and dropped, never held whole.
_DECODE_STEP = 1 << 20


def content_coding(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The request's Content-Encoding (lower case), None without one; two
    headers are a 400 (which one the cluster would read is not the gateway's guess)."""
    values = [value for name, value in headers if name.lower() == b"content-encoding"]
    if len(values) > 1:
        raise errors.bad_request("a request may carry one Content-Encoding header, got several")
    return values[0].decode("latin-1").strip().lower() if values else None


def check_content_coding(coding: str | None, body: bytes) -> None:
    """A 400 naming the coding when ``body`` does not decode as ``coding``
    says (a gzip body labelled deflate, a corrupt stream)."""
    if coding is None or not body:
        return
    if coding in REFUSED_CODINGS:
        raise errors.bad_request(f"request bodies encoded with [{coding}] are refused by this gateway: use gzip")
    if coding not in GZIP_CODINGS + DEFLATE_CODINGS:
        return
    decoder = _decoder(coding, body)
    produced, pending = 0, body
    try:
        while pending and produced < MAX_DECODED_BYTES and not decoder.eof:
            produced += len(decoder.decompress(pending, _DECODE_STEP))
            pending = decoder.unconsumed_tail
    except zlib.error as exc:
        raise _undecodable(coding, exc) from None


# Codings service mode decodes itself: it must read the body the cluster will read.
DECODED_CODINGS = ("identity", *GZIP_CODINGS, *DEFLATE_CODINGS)


def decoded_body(coding: str | None, body: bytes, max_bytes: int) -> bytes:
    """``body`` decoded as its Content-Encoding says (service mode, whose
    second line reads the body, forwards the decoded bytes): a 413 as soon as
    more than ``max_bytes`` (CHUNKRAG_GATEWAY_MAX_BODY_BYTES) come out, so a
    small, highly compressed body costs no more than a plain one of the
    limit; a 400 for a corrupt, truncated or trailing stream, or a coding the
    gateway does not decode."""
    if coding is None or coding == "identity" or not body:
        return body
    if coding not in DECODED_CODINGS:
        raise errors.bad_request(
            f"request bodies encoded with [{coding}] are refused by this gateway: send gzip, deflate or no encoding"
        )
    decoder = _decoder(coding, body)
    parts, produced, pending = [], 0, body
    try:
        while not decoder.eof:
            part = decoder.decompress(pending, _DECODE_STEP)
            progressed = part or len(decoder.unconsumed_tail) < len(pending)
            pending = decoder.unconsumed_tail
            produced += len(part)
            if produced > max_bytes:
                raise errors.too_large(max_bytes)
            parts.append(part)
            if not progressed:
                break  # the input ran out before the stream's end
    except zlib.error as exc:
        raise _undecodable(coding, exc) from None
    if not decoder.eof:
        raise _undecodable(coding, "the stream ends early")
    if decoder.unused_data:
        raise _undecodable(coding, "data follows the end of the stream")
    return b"".join(parts)


def _decoder(coding: str, body: bytes):
    if coding in GZIP_CODINGS:
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    # zlib-wrapped, or raw deflate without the wrapper (Netty takes both).
    return zlib.decompressobj(zlib.MAX_WBITS if _zlib_header(body) else -zlib.MAX_WBITS)


def _undecodable(coding: str, why) -> errors.GatewayError:
    return errors.bad_request(
        f"the request body does not decode as its Content-Encoding [{coding}] says ({why}); "
        "send it with the coding it was compressed with"
    )


def _zlib_header(body: bytes) -> bool:
    return len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0


def strict_json(data: bytes, what: str) -> Any:
    """``data`` decoded as UTF-8 JSON with no duplicate key (Elasticsearch
    refuses them; a reader that kept the last would see another body), no
    NaN, comments, BOM or trailing content, nested at most
    ``MAX_FORWARDED_DEPTH``. Nothing here recurses."""
    try:
        data.decode("utf-8")
        document = orjson.loads(data)
    except UnicodeDecodeError:
        raise errors.parse_error(f"{what} is not UTF-8") from None
    except orjson.JSONDecodeError as exc:
        raise errors.parse_error(
            f"{what} is not strict JSON the gateway can read as Elasticsearch does: {exc}"
        ) from None
    if nesting_depth(document) > MAX_FORWARDED_DEPTH:
        raise errors.bad_request(f"{what} nests deeper than the gateway's limit of {MAX_FORWARDED_DEPTH} levels")
    duplicate = _duplicate_key(data)
    if duplicate is not None:
        raise errors.parse_error(
            f"{what} is not strict JSON the gateway can read as Elasticsearch does: duplicate key [{duplicate}]"
        )
    return document


# Every JSON string (a key when a colon follows), and every bracket outside strings.
_KEYS_AND_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"[ \t\r\n]*:?|[\[\]{}]', re.S)


def _duplicate_key(data: bytes) -> str | None:
    """The first key an object of ``data`` (valid JSON) holds twice, keys
    compared decoded (``"a"`` and ``"\\u0061"`` are one key); a scan with a
    stack of its own, no parser."""
    objects: list[set[str] | None] = []
    for match in _KEYS_AND_BRACKETS.finditer(data):
        token = match.group()
        if token == b"{":
            objects.append(set())
        elif token == b"[":
            objects.append(None)
        elif token in (b"]", b"}"):
            objects.pop()
        elif token.endswith(b":"):
            key = orjson.loads(token[: token.rindex(b'"') + 1])
            keys = objects[-1]
            if key in keys:
                return key
            keys.add(key)
    return None


# A JSON string (escapes included): its brackets are text, not nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


def raw_nesting_depth(data: bytes) -> int:
    """How deep a JSON text nests, read from its brackets outside strings,
    without parsing it (so whatever the body holds: NaN, 1e309, errors)."""
    depth = deepest = 0
    for byte in _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS):
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def nesting_depth(value: Any) -> int:
    """How deep objects and arrays nest in a decoded document (a scalar: 0), with a stack of its own."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def parse_msearch(body: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The (header, search) pairs of an _msearch body, or a 400 when the
    gateway's pairing could differ from Elasticsearch's: a carriage return,
    a blank line (Elasticsearch takes an empty header line as ``{}``), a
    body that does not end in a newline after a search line, a header key
    outside the documented set, an index that is not a string or list of
    strings."""
    if b"\r" in body:
        raise errors.bad_request("an _msearch body holds a carriage return; send lines separated by \\n only")
    if not body.endswith(b"\n"):
        raise errors.bad_request("an _msearch body must end with a newline")
    lines = body[:-1].split(b"\n")
    if any(not line.strip() for line in lines):
        raise errors.bad_request(
            "an _msearch body holds a blank line; every search is one header line and one body line"
        )
    if len(lines) % 2:
        raise errors.bad_request("an _msearch body must be header and body lines in pairs")
    pairs = []
    for number in range(0, len(lines), 2):
        header = strict_json(lines[number], f"_msearch line {number + 1}")
        search = strict_json(lines[number + 1], f"_msearch line {number + 2}")
        if not isinstance(header, dict) or not isinstance(search, dict):
            raise errors.bad_request(f"_msearch lines {number + 1} and {number + 2} must be JSON objects")
        unknown = sorted(set(header) - MSEARCH_HEADER_KEYS)
        if unknown:
            raise errors.bad_request(
                f"_msearch header line {number + 1} holds [{', '.join(unknown)}]; "
                f"the gateway accepts only [{', '.join(sorted(MSEARCH_HEADER_KEYS))}]"
            )
        if "index" in header:
            index_expressions(header["index"], f"_msearch header line {number + 1}")
        pairs.append((header, search))
    return pairs


def index_expressions(value: Any, what: str) -> tuple[str, ...]:
    """A string (comma-separated) or a list of strings, as index expressions."""
    if isinstance(value, str):
        names = tuple(value.split(","))
    elif isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        names = tuple(part for item in value for part in item.split(","))
    else:
        raise errors.bad_request(
            f"{what} names its index as {type(value).__name__}; give a string or a list of strings"
        )
    if any(not name.strip() for name in names):
        raise errors.bad_request(f"{what} names an empty index")
    return names


def referenced_indices(document: Any) -> list[tuple[str, tuple[str, ...]]]:
    """Every (clause, index expressions) in ``document`` that reads another
    index by reference. Walked with an explicit stack: bodies may nest deeply.
    Raises a 400 for a ``wrapper`` query and for a reference whose index is
    not a string."""
    found: list[tuple[str, tuple[str, ...]]] = []
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        node, parent = stack.pop()
        if isinstance(node, list):
            stack.extend((item, parent) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        for clause, index in _references_of(node, parent):
            found.append((clause, index_expressions(index, clause)))
        for key, value in node.items():
            if key == "wrapper":
                raise errors.bad_request(
                    "wrapper queries are refused by this gateway: their query is hidden from its checks; "
                    "send the query itself"
                )
            if isinstance(value, (dict, list)):
                stack.append((value, key))
    return found


def _references_of(node: dict[str, Any], parent: str) -> list[tuple[str, Any]]:
    refs = []
    # terms lookup, percolate by id, a kNN query vector looked up from a stored
    # document (query_vector_builder.lookup), and any {"index", "id"} pair.
    if "index" in node and ("id" in node or parent in ("terms", "percolate", "indexed_shape", "lookup")):
        refs.append((f"{parent or 'a clause'} (index and id)", node["index"]))
    # geo_shape / shape: an indexed shape, from "shapes" unless an index is named.
    if parent == "indexed_shape" and "index" not in node:
        refs.append(("indexed_shape", DEFAULT_SHAPE_INDEX))
    # more_like_this like/unlike items, pinned docs: {"_index", "_id"} or {"_index", "doc"}.
    if "_index" in node and ("_id" in node or "doc" in node):
        refs.append((f"{parent or 'a clause'} (_index)", node["_index"]))
    # runtime fields of type lookup.
    if node.get("type") == "lookup" or "target_index" in node:
        refs.append(("a lookup runtime field", node.get("target_index")))
    return refs


def body_parameters(query_string: str) -> list[str]:
    """The query parameters that would carry a body past the gateway's checks."""
    return sorted({name for name, _ in parse_qsl(query_string, keep_blank_values=True) if name in BODY_PARAMETERS})


def non_json_format(query_string: str, headers) -> str | None:
    """The format other than JSON a request asks Elasticsearch to answer in
    (``format=``, or an Accept or Content-Type header naming YAML, CBOR or
    SMILE), if any."""
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        if name == "format" and value.strip().lower() not in ("", "json"):
            return value
    for name, value in headers:
        if name.lower() in (b"accept", b"content-type"):
            text = value.decode("latin-1").lower()
            if any(kind in text for kind in OTHER_FORMATS):
                return text
    return None


def media_type(headers, default: str = "") -> str:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.decode("latin-1").split(";", 1)[0].strip().lower()
    return default


def check_search_body(document: Any, allowed: Callable[[tuple[str, ...], str], None]) -> None:
    """Call ``allowed(indices, what)`` (which raises when not) for each index
    a search, count, field_caps or PIT body reads by reference."""
    for clause, indices in referenced_indices(document):
        allowed(indices, f"a {clause} clause")


def clears_all_scrolls(method: str, parts: tuple[str, ...], body: bytes, query_string: str = "") -> bool:
    """``DELETE /_search/scroll/_all``, ``?scroll_id=_all``, or a body whose
    scroll_id is ``_all``: every scroll of the cluster's user, not only the
    caller's. Elasticsearch reads the ids from all three places."""
    if method != "DELETE" or parts[:2] != ("_search", "scroll"):
        return False
    if len(parts) == 3 and _names_all(parts[2]):
        return True
    parameters = parse_qsl(query_string, keep_blank_values=True)
    if any(name == "scroll_id" and _names_all(value) for name, value in parameters):
        return True
    if not body.strip():
        return False
    try:
        decoded = orjson.loads(body)  # no recursion limit to trip over: orjson stops at 1,024 levels itself
    except orjson.JSONDecodeError:
        return True  # unreadable: it might say _all
    ids = decoded.get("scroll_id") if isinstance(decoded, dict) else None
    ids = [ids] if isinstance(ids, str) else ids if isinstance(ids, list) else []
    return any(isinstance(i, str) and _names_all(i) for i in ids)


def _names_all(ids: str) -> bool:
    return any(part.strip() == "_all" for part in ids.split(","))
