"""A request whose client leaves before its answer: the work stops, and the request is logged and
counted as 499 (nginx's "client closed request"), not as a server error.

A whole (non-streamed) chat runs in a task of its own while the request's task waits for the
first of its end and the connection's `http.disconnect` (its body already read, the next
message the server gives is that one); a disconnect cancels the chat, model call and tools
included, and its run is recorded `cancelled`, as a streamed chat's is when its consumer stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.types import Receive, Scope

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499
_LEFT = "client_left"


def note_client_left(scope: Scope) -> None:
    """The client closed the connection before its answer and the app stopped for it."""
    scope.setdefault("state", {})[_LEFT] = True


def client_left(scope: Scope) -> bool:
    return bool(scope.get("state", {}).get(_LEFT))


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(
    scope: Scope, receive: Receive, work: Coroutine[Any, Any, T]
) -> T | None:
    """`work`'s result; None when the client left first (`work` was cancelled and has ended,
    and the request is noted as left)."""
    job = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((job, watcher), return_when=asyncio.FIRST_COMPLETED)
        if not job.done() and watcher.exception() is not None:
            await asyncio.wait((job,))  # the connection cannot be watched: the work decides
    finally:
        watcher.cancel()
        if not job.done():  # the client left (or this request was cancelled): stop the work
            job.cancel()
            await asyncio.wait((job,))
    if job.cancelled():
        note_client_left(scope)
        return None
    return job.result()
