"""A filtered request's work, stopped when its deadline passes or its
client goes away.

The work (a place in the model-stage queue, then the library call on a
filter thread) runs as a task of its own while the request waits for the
first of three things: the work's end, the deadline, or the client closing
its connection (after its body, the server's next message for a request is
its disconnect). At the deadline the caller gets its 504 at once, and the
request's :class:`~chunkrag_core.cancellation.Cancellation` is cancelled,
so the work stops at its next check, between two batches; the task keeps
its place in the queue until the thread is free (``FilterThreads.run``), so
the running count says what the machine is doing. A client that goes away
stops the work the same way; nobody is answered.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from chunkrag_core.cancellation import Cancellation
from chunkrag_gateway import errors
from chunkrag_gateway.telemetry import CLIENT_CLOSED

T = TypeVar("T")


class DeadlinePassed(Exception):
    """The work did not end within the request's deadline (it is being stopped)."""


def client_closed() -> errors.GatewayError:
    """What a request whose client went away ends with: nobody reads it;
    the metrics and the access log count it as the client's."""
    return errors.GatewayError(CLIENT_CLOSED, "client_closed_exception", "the client closed its connection")


async def client_gone(receive) -> None:
    """Returns once the client has closed its connection. Called after the
    request's body was read: the server's next message is the disconnect."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def finish_or_stop(work: Awaitable[T], token: Cancellation, deadline_s: float, receive=None) -> T:
    """``work``'s result, unless ``deadline_s`` passes first (then
    :class:`DeadlinePassed`) or the client behind ``receive`` goes away
    (then :func:`client_closed`); either way, and whenever this is itself
    cancelled, ``token`` is cancelled and the work's task with it."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieved)
    gone = asyncio.ensure_future(client_gone(receive)) if receive is not None else None
    reason = "the gateway stopped waiting for the request"
    try:
        waited = {task} if gone is None else {task, gone}
        done, _ = await asyncio.wait(waited, timeout=deadline_s, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            reason = ""
            return task.result()
        if gone is not None and gone in done:
            reason = "the client went away"
            raise client_closed()
        reason = f"the request's deadline of {deadline_s:g} s passed"
        raise DeadlinePassed(reason)
    finally:
        if gone is not None:
            gone.cancel()
        if reason:
            token.cancel(reason)
            task.cancel()


def _retrieved(task: asyncio.Future) -> None:
    # A task left to end on its own after its request was answered: its
    # outcome is read here, so it is never reported as unretrieved.
    if not task.cancelled():
        task.exception()
