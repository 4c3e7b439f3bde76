"""The served protocol's request-head deadline and connection cap (app/http_server.py) on real
sockets, with the event loop's clock moved by hand: the deadline is never waited for. Each wait
below is on what the server does (a connection closed, an answer written), bounded in real
seconds. tests/test_http_server.py runs the same protocol in a real `python -m app serve`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.server import ServerState

from app import http_server
from app.http_server import GuardedHttpProtocol
from tests.support.apps import make_settings
from tests.support.clock import LoopClock

HEAD_TIMEOUT_S = 30.0  # far above the real seconds a test takes: only `advance` reaches it
MAX_CONNECTIONS = 2
BOUND_S = 5.0  # what any wait below may take, in real seconds, before the test fails
REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


async def _answer(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


@dataclass
class Served:
    clock: LoopClock
    port: int
    protocols: list[GuardedHttpProtocol] = field(default_factory=list)
    state: ServerState = field(default_factory=ServerState)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        count = len(self.protocols)
        connection = await asyncio.open_connection("127.0.0.1", self.port)
        await _until(lambda: len(self.protocols) > count)
        return connection

    def closed(self, index: int = -1) -> bool:
        return self.protocols[index].transport.is_closing()

    async def settle(self) -> None:
        """Let the loop run what the clock made due (a few turns: the timer, then its work)."""
        for _ in range(3):
            await asyncio.sleep(0)


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    loop = asyncio.get_running_loop()
    clock = LoopClock()
    monkeypatch.setattr(loop, "time", clock)
    settings = make_settings(header_timeout_s=HEAD_TIMEOUT_S, max_connections=MAX_CONNECTIONS)
    monkeypatch.setattr(http_server, "get_settings", lambda: settings)
    config = Config(
        app=_answer, lifespan="off", access_log=False, timeout_keep_alive=10 * HEAD_TIMEOUT_S
    )
    config.load()
    served = Served(clock, 0)

    def protocol() -> GuardedHttpProtocol:
        made = GuardedHttpProtocol(
            config=config, server_state=served.state, app_state={}, _loop=loop
        )
        served.protocols.append(made)
        return made

    server = await loop.create_server(protocol, "127.0.0.1", 0)
    served.port = server.sockets[0].getsockname()[1]
    try:
        yield served
    finally:
        server.close()
        for made in served.protocols:
            if made.transport is not None:
                made.transport.close()
        await server.wait_closed()


async def _until(check: Callable[[], bool]) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < BOUND_S, "the server did not get there"
        await asyncio.sleep(0.001)


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), BOUND_S)


async def test_a_silent_connection_is_closed_at_the_deadline(served: Served) -> None:
    reader, writer = await served.connect()
    served.clock.advance(HEAD_TIMEOUT_S - 1)
    await served.settle()
    assert not served.closed()
    served.clock.advance(1)
    await _until(served.closed)
    assert await _read_all(reader) == b""  # closed without a word
    writer.close()


async def test_the_deadline_counts_from_the_opening_not_the_latest_byte(served: Served) -> None:
    """A head sent one line at a time, each in time for a deadline counted from the last one,
    is cut off when the head's own deadline is reached."""
    reader, writer = await served.connect()
    for index in range(9):  # 9 lines, a tenth of the deadline apart: 0.9 of it
        writer.write(b"GET /x HTTP/1.1\r\n" if index == 0 else b"X-Drip-%d: x\r\n" % index)
        await writer.drain()
        served.clock.advance(HEAD_TIMEOUT_S / 10)
        await served.settle()
        assert not served.closed()
    served.clock.advance(HEAD_TIMEOUT_S / 10)
    await _until(served.closed)
    assert await _read_all(reader) == b""  # never answered
    writer.close()


async def test_a_head_completed_in_time_is_answered_and_the_connection_kept(
    served: Served,
) -> None:
    reader, writer = await served.connect()
    writer.write(REQUEST[:10])
    served.clock.advance(HEAD_TIMEOUT_S * 0.9)
    writer.write(REQUEST[10:])
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_S)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert await asyncio.wait_for(reader.readexactly(2), BOUND_S) == b"ok"
    served.clock.advance(HEAD_TIMEOUT_S * 2)  # idle between requests: the keep-alive's to end
    await served.settle()
    assert not served.closed()
    writer.close()


async def test_after_a_response_the_next_head_is_due_from_its_first_byte(
    served: Served,
) -> None:
    reader, writer = await served.connect()
    writer.write(REQUEST)
    await asyncio.wait_for(reader.readuntil(b"ok"), BOUND_S)
    served.clock.advance(HEAD_TIMEOUT_S * 2)
    writer.write(b"GET /x HTTP/1.1\r\n")  # and nothing more
    await writer.drain()
    await _until(lambda: served.protocols[0]._head_timer is not None)
    served.clock.advance(HEAD_TIMEOUT_S - 1)
    await served.settle()
    assert not served.closed()
    served.clock.advance(1)
    await _until(served.closed)
    assert await _read_all(reader) == b""
    writer.close()


async def test_one_connection_beyond_the_cap_is_refused_at_once(served: Served) -> None:
    held = [await served.connect() for _ in range(MAX_CONNECTIONS)]
    reader, writer = await served.connect()  # the clock is not moved: refused as it opens
    answer = await _read_all(reader)
    assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer, answer
    assert served.closed() and not any(served.closed(i) for i in range(MAX_CONNECTIONS))
    writer.close()
    for _, held_writer in held:
        held_writer.close()
    await _until(lambda: not served.state.connections)
    reader, writer = await served.connect()  # room again once they are gone
    writer.write(REQUEST)
    assert (await asyncio.wait_for(reader.readuntil(b"ok"), BOUND_S)).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_after_a_response_bytes_that_start_no_request_are_due_too(served: Served) -> None:
    """Blank lines between requests start no message, and the first byte drops uvicorn's
    keep-alive timer: without the deadline they would hold the connection for ever."""
    reader, writer = await served.connect()
    writer.write(REQUEST)
    await asyncio.wait_for(reader.readuntil(b"ok"), BOUND_S)
    for _ in range(9):
        writer.write(b"\r\n")
        await writer.drain()
        await _until(lambda: served.protocols[0]._head_timer is not None)
        served.clock.advance(HEAD_TIMEOUT_S / 10)
        await served.settle()
        assert not served.closed()
    served.clock.advance(HEAD_TIMEOUT_S / 10)
    await _until(served.closed)
    writer.close()
