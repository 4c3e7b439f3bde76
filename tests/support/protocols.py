"""The served HTTP protocol (app/http/server.py) on a real loopback socket, in the test's own
loop: the protocols it made kept for the test to look at, all closed at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from starlette.types import ASGIApp
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.http.server import GuardedHttpProtocol

BOUND_S = 5.0  # what any wait of these tests may take, in real seconds, before it fails

P = TypeVar("P", bound=GuardedHttpProtocol)


async def bounded(awaitable: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(awaitable, BOUND_S)


@asynccontextmanager
async def serving(
    protocol: type[P],
    app: ASGIApp,
    *,
    keep_alive_s: int,
    state: ServerState | None = None,
    made: Callable[[P], None] = lambda _: None,
) -> AsyncIterator[int]:
    """`protocol` serving `app` on 127.0.0.1: its port. `made` is told of each connection's
    protocol as it is built."""
    loop = asyncio.get_running_loop()
    config = Config(app=app, lifespan="off", access_log=False, timeout_keep_alive=keep_alive_s)
    config.load()
    state = state or ServerState()
    protocols: list[P] = []

    def build() -> P:
        built = protocol(config=config, server_state=state, app_state={}, _loop=loop)
        protocols.append(built)
        made(built)
        return built

    server = await loop.create_server(build, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for built in protocols:
            if built.transport is not None:
                built.transport.close()
        await server.wait_closed()
