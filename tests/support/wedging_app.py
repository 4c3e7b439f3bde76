"""The app as `app/asgi.py` serves it, whose database driver wedges when the shutdown starts:
PyMongo's topology lock is taken for good (as a driver call cancelled half-way left it after a
long outage), so closing the client hangs. For tests/test_shutdown.py:
`uvicorn tests.support.wedging_app:app`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from app.main import create_app

Message = MutableMapping[str, Any]

inner = create_app(tune_gc=True)


async def app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] != "lifespan":
        await inner(scope, receive, send)
        return

    async def wedged_at_shutdown() -> Message:
        message = await receive()
        if message["type"] == "lifespan.shutdown":
            topology = inner.state.services.database._client._topology  # the driver's own lock
            await topology._lock.acquire()
        return message

    await inner(scope, wedged_at_shutdown, send)
