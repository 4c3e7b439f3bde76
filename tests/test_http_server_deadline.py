"""The served protocol's request-head deadline and fair connection cap (app/http/server.py) on
real sockets, with the event loop's clock moved by hand: the deadline is never waited for. Each wait
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

from app.http import server as http_server
from app.http.server import GuardedHttpProtocol
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

    async def connect(
        self, source: str = "127.0.0.1"
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection from `source` (any 127.x address is this machine's)."""
        connection = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
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
async def served(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> AsyncIterator[Served]:
    loop = asyncio.get_running_loop()
    clock = LoopClock()
    monkeypatch.setattr(loop, "time", clock)
    marker = request.node.get_closest_marker("settings")
    overrides = {"header_timeout_s": HEAD_TIMEOUT_S, "max_connections": MAX_CONNECTIONS}
    settings = make_settings(**{**overrides, **(marker.kwargs if marker else {})})
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


async def _answered(served: Served, index: int = -1) -> tuple[asyncio.StreamReader, Any]:
    """A connection that sent a request and read its answer: idle, kept alive."""
    reader, writer = await served.connect()
    writer.write(REQUEST)
    assert (await bounded(reader.readuntil(b"ok"))).startswith(b"HTTP/1.1 200")
    return reader, writer


async def test_past_the_cap_the_oldest_idle_connection_is_closed_first(served: Served) -> None:
    """Connections idle between requests make room for a new one, the oldest idle first; the
    new one is served."""
    first, second = await _answered(served), await _answered(served)
    first[1].write(REQUEST)  # the first is used again: the second is now the oldest idle
    assert (await bounded(first[0].readuntil(b"ok"))).startswith(b"HTTP/1.1 200")
    reader, writer = await _answered(served)
    assert served.closed(1) and not served.closed(0)
    assert await _closed_by_server(second[0]) == b""  # closed between requests, unanswered
    for held in (first, (reader, writer)):
        held[1].close()
    second[1].close()


async def test_past_the_cap_with_none_idle_only_probes_are_answered(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every connection busy (heads not sent yet): the next ones get one answer each, 200 to a
    health probe and 503 to anything else, and are closed; past the probes' allowance a
    connection is refused at once, unread."""
    monkeypatch.setattr(http_server, "PROBE_CONNECTIONS", 2)
    held = [await served.connect() for _ in range(MAX_CONNECTIONS)]
    probe, other = await served.connect(), await served.connect()
    probe[1].write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    other[1].write(REQUEST)
    answered = await _closed_by_server(probe[0])
    assert answered.startswith(b"HTTP/1.1 200 ") and b"connection: close" in answered
    refused = await _closed_by_server(other[0])
    assert refused.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in refused
    for protocol in served.protocols[-2:]:
        await bounded(protocol.lost.wait())
    more = [await served.connect() for _ in range(2)]
    extra = await served.connect()  # past the allowance: refused as it opens
    answer = await _closed_by_server(extra[0])
    assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer, answer
    assert not any(served.closed(i) for i in range(MAX_CONNECTIONS))
    for _, writer in [*held, *more, extra, probe, other]:
        writer.close()
    for protocol in served.protocols:
        await bounded(protocol.lost.wait())
    assert not served.state.connections
    reader, writer = await served.connect()  # room again once they are gone
    writer.write(REQUEST)
    assert (await bounded(reader.readuntil(b"ok"))).startswith(b"HTTP/1.1 200")
    writer.close()


@pytest.mark.settings(max_connections=50, max_connections_per_client=2)
async def test_one_address_cannot_take_the_cap(served: Served) -> None:
    """Past MAX_CONNECTIONS_PER_CLIENT an address's own oldest idle connection makes room;
    with none idle its next connection is refused, and other addresses still get in."""
    idle = await _answered(served)
    busy = await served.connect()
    third = await served.connect()  # the address's third: its idle one is closed for it
    assert served.closed(0) and not served.closed(1) and not served.closed(2)
    assert await _closed_by_server(idle[0]) == b""
    await bounded(served.protocols[0].lost.wait())
    refused = await served.connect()  # its two others wait for their heads: none idle
    assert (await _closed_by_server(refused[0])).startswith(b"HTTP/1.1 503 ")
    other = await served.connect("127.0.0.2")
    other[1].write(REQUEST)
    assert (await bounded(other[0].readuntil(b"ok"))).startswith(b"HTTP/1.1 200")
    for _, writer in (idle, busy, third, refused, other):
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
