"""A TCP proxy in front of a real server that plays the server's keep-alive timeout at the worst
moment, when the test says: `idle_gap()` marks every connection open now, and the next request
bytes a marked connection carries meet a closed connection (dropped, no answer), as when
uvicorn's 5 s keep-alive timer closes an idle connection just as a client reuses it. Connections
opened later pass through untouched. `refusing` drops every request, whatever its connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

READ_BYTES = 1 << 16


@dataclass
class KeepAliveProxy:
    target_port: int
    port: int = 0
    opened: int = 0  # client connections accepted
    dropped: int = 0  # requests that met a connection "the server had closed"
    refusing: bool = False  # every request is dropped, on any connection (a broken server)
    _marked: set[asyncio.StreamWriter] = field(default_factory=set)
    _open: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def idle_gap(self) -> None:
        """The server's keep-alive timeout passes for every connection open now."""
        self._marked = set(self._open)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        self._open.add(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
        except OSError:
            writer.close()
            return
        back = asyncio.create_task(_pipe(upstream_reader, writer))
        self._tasks.add(back)
        back.add_done_callback(self._tasks.discard)
        try:
            while data := await reader.read(READ_BYTES):
                if self.refusing or writer in self._marked:  # closed as the request arrived
                    self.dropped += 1
                    break
                upstream_writer.write(data)
                await upstream_writer.drain()
        except ConnectionError:
            pass
        finally:
            self._open.discard(writer)
            self._marked.discard(writer)
            back.cancel()
            for side in (writer, upstream_writer):
                side.close()
                with contextlib.suppress(ConnectionError):
                    await side.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(READ_BYTES):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def keepalive_proxy(target_port: int) -> AsyncIterator[KeepAliveProxy]:
    proxy = KeepAliveProxy(target_port)
    server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        for writer in list(proxy._open):
            writer.close()
        await server.wait_closed()
