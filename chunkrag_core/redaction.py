"""What of a setting's value may be printed: the one rule every message,
log line and listing that echoes a configured value goes through
(`chunkrag config show` and `check`, the settings' own errors that every
command and `chunkrag serve` print, the services' and the workers' logs).

A value is judged by its variable's name first (a name holding ``KEY``,
``PASSWORD``, ``SECRET`` or ``TOKEN`` hides it whole), then by its shape: a
URL keeps its scheme, user, host, port and path, and loses its password
(all of it up to the last ``@``, whatever it holds), the values of query
parameters named like secrets (``?api_key=``, ``?sig=``,
``?X-Amz-Signature=``) and its fragment (``#access_token=...``); a header
list (``*_HEADERS``) loses every value. A variable whose name holds ``AUTH``
or ``CREDENTIAL`` names a mode (``basic``, ``sigv4``, ``forward``) or holds
credentials: a value among the ``choices`` its reader accepts is shown, any
other is credentials mistyped or put in the wrong place, and only a
``user:`` before a colon is kept.

Imports nothing of the project's: every layer may call it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import unquote

# What replaces a hidden value or part of one.
MASK = "***"
# A word in a variable's name that marks its whole value as a secret.
SECRET_WORDS = ("KEY", "PASSWORD", "SECRET", "TOKEN")
# A word in a variable's name that marks a value as a mode or as credentials.
CREDENTIAL_WORDS = ("AUTH", "CREDENTIAL")
# A query parameter whose name holds one of these carries a secret
# (``?api_key=``, ``?password=``, ``?access_token=``, ``?X-Amz-Signature=``,
# a shared-access signature's ``sig=``, a ``session`` id).
SECRET_PARAMETER = re.compile(
    r"key|token|pass|secret|auth|signature|credential|session|(?<![a-z])sig(?![a-z])", re.IGNORECASE
)
# ``user:password`` as one word: a user (no scheme, no "/" or "@") and a colon.
_USER_THEN_COLON = re.compile(r"^([^:\s/@]+):\S")
# ``user:password@host`` written without a scheme: a user, a colon, and an
# ``@`` somewhere after it (the password may hold anything, ``@`` included).
_SCHEMELESS_USERINFO = re.compile(r"^\s*[^:/@\s]+:.*@", re.DOTALL)
# Where a URL's scheme ends.
_SCHEME = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://")
# A comma that starts another URL of a list (``http://a:9200,http://b:9200``).
# A comma elsewhere is taken as part of the entry: a password may hold one.
_NEXT_URL = re.compile(r",(?=\s*[A-Za-z][A-Za-z0-9+.-]*://)")


def is_secret(name: str) -> bool:
    """Whether the variable ``name`` holds a secret whole (its name says so)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def redacted(name: str, value: str, choices: Collection[str] = ()) -> str:
    """``value`` of the variable ``name``, safe to print (module docstring);
    ``choices``: the values its reader accepts, shown as they are in a
    variable named like credentials."""
    if not value:
        return value
    upper = name.upper()
    if is_secret(name):
        return MASK
    if upper.endswith("HEADERS"):
        return ",".join(_redacted_header(item) for item in value.split(","))
    if "://" in value or _SCHEMELESS_USERINFO.match(value):
        return redact_url(value)
    if any(word in upper for word in CREDENTIAL_WORDS):
        if value.strip().lower() in choices:
            return value
        user = _USER_THEN_COLON.match(value.strip())
        return f"{user.group(1)}:{MASK}" if user else MASK
    return value


def assignment(name: str, value: str, choices: Collection[str] = ()) -> str:
    """``NAME='value'`` for a message, the value `redacted`."""
    return f"{name}={redacted(name, value, choices)!r}"


def redact_url(url: str) -> str:
    """The URL with its password, the value of any query parameter named
    like a secret (``SECRET_PARAMETER``) and its fragment replaced; in a
    comma-separated list of URLs, every entry's. The rest is kept as
    written.

    Read as text, never parsed: a URL the settings refuse is printed in
    their error too, and a password holding ``@ : / ? # %`` or a comma, not
    percent-encoded, breaks any parse (``http://u:p@ss:w#rd@h`` splits into
    host ``ss``, port ``w`` and a fragment). So the user part ends at the
    entry's last ``@``, whatever comes before it: the user (up to the first
    colon) is kept and the rest masked; where that part holds ``/``, ``?``
    or ``#`` it is masked whole, since then it cannot be told from a path
    or query holding an ``@`` (``http://h/?q=a@b`` prints ``http://***@b``,
    more hidden than needed, nothing shown that might be a password)."""
    return ",".join(_redacted_entry(entry) for entry in _NEXT_URL.split(url))


def _redacted_entry(url: str) -> str:
    scheme = _SCHEME.match(url)
    head = scheme.group(0) if scheme else ""
    rest = url[len(head) :]
    userinfo, at, tail = rest.rpartition("@")
    if not at or not (head or ":" in userinfo):
        # No user part: ``user@host`` without a scheme is read as an address.
        return head + _redacted_tail(rest)
    if any(mark in userinfo for mark in "/?#"):
        shown = MASK
    elif ":" in userinfo:
        shown = f"{userinfo.partition(':')[0]}:{MASK}"
    else:  # a user alone, no password
        shown = userinfo
    return f"{head}{shown}@{_redacted_tail(tail)}"


def _redacted_tail(tail: str) -> str:
    """Host, port and path as written; secret query values and the fragment masked."""
    before, hash_mark, fragment = tail.partition("#")
    path, question, query = before.partition("?")
    if question and query:
        query = "&".join(_redacted_parameter(pair) for pair in query.split("&"))
    return path + question + query + (f"#{MASK}" if hash_mark and fragment else hash_mark)


def _redacted_parameter(pair: str) -> str:
    name, equals, value = pair.partition("=")
    return f"{name}={MASK}" if equals and value and SECRET_PARAMETER.search(unquote(name)) else pair


def _redacted_header(item: str) -> str:
    header, equals, _value = item.partition("=")
    return f"{header}={MASK}" if equals else MASK
