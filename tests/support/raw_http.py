"""Reading one HTTP/1.1 request off an asyncio stream, for the scripted
loopback servers of the unit tests (the gateway's pass-through is tested
against raw bytes, not a framework's server)."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The request's head (line and headers, through the blank line) and its
    body (``content-length`` bytes; none without the header). Raises
    ``asyncio.IncompleteReadError`` when the client goes away."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")),
        0,
    )
    return head, await reader.readexactly(length)
