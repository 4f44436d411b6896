"""What of a setting's value may be printed: the one rule every message,
log line and listing that echoes a configured value goes through
(`chunkrag config show` and `check`, the settings' own errors that every
command and `chunkrag serve` print, the services' and the workers' logs).

A value is judged by its variable's name first (a name holding ``KEY``,
``PASSWORD``, ``SECRET`` or ``TOKEN`` hides it whole), then by its shape: a
URL keeps its scheme, user, host, port and path, and loses its password, the
values of query parameters named like secrets (``?api_key=``, ``?sig=``,
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
from urllib.parse import unquote, urlsplit, urlunsplit

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
# ``user:password@host`` written without a scheme.
_SCHEMELESS_USERINFO = re.compile(r"^\s*[^:/@\s]+:[^/@\s]*@")
# A URL too broken to split: everything between "://" and the last "@".
_BROKEN_USERINFO = re.compile(r"(?<=://)[^/?#]*@")


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
    comma-separated list of node URLs, every entry's. The rest is kept as
    written. A URL too broken to split loses its user part, query and
    fragment whole."""
    if "," in url:
        return ",".join(redact_url(entry) for entry in url.split(","))
    if "://" not in url and (userinfo := _SCHEMELESS_USERINFO.match(url)):
        return f"{userinfo.group(0).partition(':')[0]}:{MASK}@{url[userinfo.end() :]}"
    try:
        parts = urlsplit(url)
    except ValueError:
        kept = _BROKEN_USERINFO.sub(f"{MASK}@", url)
        return re.sub(r"[?#].*", f"?{MASK}", kept, flags=re.DOTALL)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:{MASK}@{hostport}")
    if parts.query:
        parts = parts._replace(query="&".join(_redacted_parameter(pair) for pair in parts.query.split("&")))
    if parts.fragment:
        parts = parts._replace(fragment=MASK)
    return urlunsplit(parts)


def _redacted_parameter(pair: str) -> str:
    name, equals, value = pair.partition("=")
    return f"{name}={MASK}" if equals and value and SECRET_PARAMETER.search(unquote(name)) else pair


def _redacted_header(item: str) -> str:
    header, equals, _value = item.partition("=")
    return f"{header}={MASK}" if equals else MASK
