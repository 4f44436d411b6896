"""Service mode, with ``CHUNKRAG_GATEWAY_REFUSE_FOREIGN_ALIASES``: an alias
whose name a gateway key's patterns cover, but which points to indices they
do not, is refused.

A key's patterns are matched against the names a request uses, and so are the
cluster's own privileges (the derived key's): an alias ``docs-all`` pointing
to ``secret`` is readable by a key for ``docs-*``, and a wildcard ``docs-*``
reaches it too. With the option on, each index expression a request names is
resolved (``GET /_resolve/index/<expression>``, with the gateway's own
credentials, every alias hidden ones included) and every alias it reaches must
point only to indices the key's patterns cover. Answers are kept briefly, so
an alias made or moved is seen within ``CACHE_S``.
"""

from __future__ import annotations

import fnmatch
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import orjson

from chunkrag_gateway import errors
from chunkrag_gateway.identity import Caller, forbidden

# How long one expression's aliases are trusted: an alias changed on the
# cluster is refused (or allowed again) within this.
CACHE_S = 10.0
# Expressions remembered at most; the least recently resolved go first.
MAX_CACHED = 10_000

GetJson = Callable[[str], Awaitable[tuple[int, Any]]]


class ForeignAliases:
    def __init__(self, get_json: GetJson, clock: Callable[[], float] = time.monotonic):
        self._get_json, self._clock = get_json, clock
        self._cache: OrderedDict[str, tuple[float, dict[str, tuple[str, ...]]]] = OrderedDict()

    async def check(self, caller: Caller, indices: tuple[str, ...] | None) -> None:
        """A 403 when an expression of ``indices`` reaches an alias pointing
        outside the caller's patterns (nothing to check without a key, for a
        key that reads everything, or when no index is named)."""
        allowed = caller.indices
        if allowed is None or "*" in allowed or not indices:
            return
        for expression in indices:
            if expression.startswith("-"):  # an exclusion reaches nothing
                continue
            for alias, targets in (await self._aliases(expression)).items():
                foreign = [name for name in targets if not any(fnmatch.fnmatchcase(name, p) for p in allowed)]
                if foreign:
                    raise forbidden(
                        f"gateway API key [{caller.key.name}] may not read alias [{alias}]: it points to indices "
                        f"outside [{', '.join(allowed)}] (CHUNKRAG_GATEWAY_REFUSE_FOREIGN_ALIASES)"
                    )

    async def _aliases(self, expression: str) -> dict[str, tuple[str, ...]]:
        now = self._clock()
        cached = self._cache.get(expression)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(expression)
            return cached[1]
        try:
            status, answer = await self._get_json(
                f"/_resolve/index/{quote(expression, safe='*')}?expand_wildcards=all&ignore_unavailable=true"
            )
        except orjson.JSONDecodeError:
            status, answer = 502, None
        if status == 404:
            found: dict[str, tuple[str, ...]] = {}
        elif status != 200 or not isinstance(answer, dict):
            # Fail closed: without the cluster's answer the alias cannot be told from an index.
            raise errors.unavailable("the gateway could not resolve the aliases this request names; retry later")
        else:
            found = {
                alias["name"]: tuple(alias.get("indices", ()))
                for alias in answer.get("aliases", ())
                if isinstance(alias, dict) and isinstance(alias.get("name"), str)
            }
        self._cache[expression] = (now + CACHE_S, found)
        self._cache.move_to_end(expression)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return found
