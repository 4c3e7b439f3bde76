"""The served protocol's request-head deadline and connection cap (app/http_server.py) on real
sockets, with the event loop's clock moved by hand: the deadline is never waited for. Each wait
below is on what the server does (bytes taken in, a connection closed, the timers due by the
clock run), bounded in real seconds; none is a sleep or a poll. tests/test_http_server.py runs
the same protocol in a real `python -m app serve`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from app import http_server
from app.http_server import GuardedHttpProtocol
from tests.support.apps import make_settings
from tests.support.clock import LoopClock
from tests.support.protocols import bounded, serving

HEAD_TIMEOUT_S = 30.0  # far above the real seconds a test takes: only `advance` reaches it
MAX_CONNECTIONS = 2
REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


async def _answer(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


class Watched(GuardedHttpProtocol):
    """The served protocol, telling the test when bytes reached it and when it lost its
    connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received = asyncio.Event()
        self.lost = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.received.set()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.lost.set()


@dataclass
class Served:
    clock: LoopClock
    port: int
    protocols: list[Watched] = field(default_factory=list)
    made: asyncio.Queue[Watched] = field(default_factory=asyncio.Queue)
    state: ServerState = field(default_factory=ServerState)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        connection = await asyncio.open_connection("127.0.0.1", self.port)
        await bounded(self.made.get())  # the server's side of it
        return connection

    def closed(self, index: int = -1) -> bool:
        return self.protocols[index].transport.is_closing()

    async def send(self, writer: asyncio.StreamWriter, data: bytes, index: int = -1) -> None:
        """`data` written, and taken in by the server's side of the connection."""
        protocol = self.protocols[index]
        protocol.received.clear()
        writer.write(data)
        await bounded(protocol.received.wait())

    async def closed_after(self, seconds: float) -> bool:
        """The clock moved by `seconds`; whether the server has closed the connection once the
        loop has run every timer then due (a marker due now runs after them: timers run in the
        order they fall due)."""
        self.clock.advance(seconds)
        loop = asyncio.get_running_loop()
        marker = loop.create_future()
        loop.call_at(loop.time(), marker.set_result, None)
        await bounded(marker)
        return self.closed()


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    loop = asyncio.get_running_loop()
    clock = LoopClock()
    monkeypatch.setattr(loop, "time", clock)
    settings = make_settings(header_timeout_s=HEAD_TIMEOUT_S, max_connections=MAX_CONNECTIONS)
    monkeypatch.setattr(http_server, "get_settings", lambda: settings)
    served = Served(clock, 0)

    def made(protocol: Watched) -> None:
        served.protocols.append(protocol)
        served.made.put_nowait(protocol)

    async with serving(
        Watched, _answer, keep_alive_s=int(10 * HEAD_TIMEOUT_S), state=served.state, made=made
    ) as served.port:
        yield served


async def _closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before it closed the connection (waits for the close)."""
    return await bounded(reader.read())


async def test_a_silent_connection_is_closed_at_the_deadline(served: Served) -> None:
    reader, writer = await served.connect()
    assert not await served.closed_after(HEAD_TIMEOUT_S - 1)
    assert await served.closed_after(1)
    assert await _closed_by_server(reader) == b""  # closed without a word
    writer.close()


async def test_the_deadline_counts_from_the_opening_not_the_latest_byte(served: Served) -> None:
    """A head sent one line at a time, each in time for a deadline counted from the last one,
    is cut off when the head's own deadline is reached."""
    reader, writer = await served.connect()
    for index in range(9):  # 9 lines, a tenth of the deadline apart: 0.9 of it
        await served.send(writer, b"GET /x HTTP/1.1\r\n" if index == 0 else b"X-%d: x\r\n" % index)
        assert not await served.closed_after(HEAD_TIMEOUT_S / 10)
    assert await served.closed_after(HEAD_TIMEOUT_S / 10)
    assert await _closed_by_server(reader) == b""  # never answered
    writer.close()


async def test_a_head_completed_in_time_is_answered_and_the_connection_kept(
    served: Served,
) -> None:
    reader, writer = await served.connect()
    await served.send(writer, REQUEST[:10])
    served.clock.advance(HEAD_TIMEOUT_S * 0.9)
    writer.write(REQUEST[10:])
    head = await bounded(reader.readuntil(b"\r\n\r\n"))
    assert head.startswith(b"HTTP/1.1 200 ")
    assert await bounded(reader.readexactly(2)) == b"ok"
    # Idle between requests: the keep-alive's to end, not the head deadline.
    assert not await served.closed_after(HEAD_TIMEOUT_S * 2)
    writer.close()


async def test_after_a_response_the_next_head_is_due_from_its_first_byte(
    served: Served,
) -> None:
    reader, writer = await served.connect()
    writer.write(REQUEST)
    await bounded(reader.readuntil(b"ok"))
    assert not await served.closed_after(HEAD_TIMEOUT_S * 2)  # nothing sent: no head is due
    await served.send(writer, b"GET /x HTTP/1.1\r\n")  # and nothing more
    assert not await served.closed_after(HEAD_TIMEOUT_S - 1)
    assert await served.closed_after(1)
    assert await _closed_by_server(reader) == b""
    writer.close()


async def test_one_connection_beyond_the_cap_is_refused_at_once(served: Served) -> None:
    held = [await served.connect() for _ in range(MAX_CONNECTIONS)]
    reader, writer = await served.connect()  # the clock is not moved: refused as it opens
    answer = await _closed_by_server(reader)
    assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer, answer
    assert served.closed() and not any(served.closed(i) for i in range(MAX_CONNECTIONS))
    writer.close()
    for _, held_writer in held:
        held_writer.close()
    for protocol in served.protocols:
        await bounded(protocol.lost.wait())
    assert not served.state.connections
    reader, writer = await served.connect()  # room again once they are gone
    writer.write(REQUEST)
    assert (await bounded(reader.readuntil(b"ok"))).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_after_a_response_bytes_that_start_no_request_are_due_too(served: Served) -> None:
    """Blank lines between requests start no message, and the first byte drops uvicorn's
    keep-alive timer: without the deadline they would hold the connection for ever."""
    reader, writer = await served.connect()
    writer.write(REQUEST)
    await bounded(reader.readuntil(b"ok"))
    for _ in range(9):
        await served.send(writer, b"\r\n")
        assert not await served.closed_after(HEAD_TIMEOUT_S / 10)
    assert await served.closed_after(HEAD_TIMEOUT_S / 10)
    writer.close()
