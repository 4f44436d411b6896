"""What the chat model wrote about a document (title, summary, sections),
kept as small JSON files so ingesting the same text again costs no call.

An entry is found by a hash of what produced it: the prompt version, the
kind of output, the model's name and the document's text (and whatever else
the prompt shows). A file that cannot be read as an entry is a miss; the
next answer overwrites it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping


def cache_key(*parts: Any) -> str:
    """sha256 (hex) of ``parts`` as one JSON array (keys sorted, non-ASCII
    kept, anything else by ``str``): a cache entry's key, and cut to 32 digits
    a document's fingerprint (chunker.document_fingerprint)."""
    payload = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def default_cache_dir() -> Path:
    """Under the project's state directory (CHUNKRAG_HOME, else
    ~/.cache/chunkrag), beside the services' own state."""
    from chunkrag_core.settings import state_home

    return state_home() / "document-context"


class ContextCache:
    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        # Two-character fan-out keeps directories small on large corpora.
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> Mapping[str, Any] | None:
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return entry if isinstance(entry, dict) and entry.get("key") == key else None

    def put(self, key: str, entry: Mapping[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a reader never sees half a file, and a
        # run killed mid-write leaves the old entry or none.
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({**entry, "key": key}, out, ensure_ascii=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
