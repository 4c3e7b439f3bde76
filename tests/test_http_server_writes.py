"""The served protocol's writes (app/http_server.py, `_OneWrite`) on real sockets: an answer of
known length leaves in one write, head and body together; a streamed answer's head leaves at
once, before its body is ready; nothing is held back for ever (a HEAD, a body-less answer, an
app that fails after starting its answer, a `100 Continue`, pipelined requests). Each wait is
on what the server sends, bounded in real seconds; none is a sleep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from app import http_server
from app.api.routing import whole_body
from app.http_server import GuardedHttpProtocol
from tests.support.apps import make_settings
from tests.support.protocols import bounded, serving

BODY = b'{"status":"ok"}'


class _Counted:
    """A transport that keeps what is written to it, write by write."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def writelines(self, pieces: tuple[bytes, ...]) -> None:  # one send of them all
        self.writes.append(b"".join(pieces))
        self._transport.writelines(pieces)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class Watched(GuardedHttpProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.counted = _Counted(transport)
        super().connection_made(self.counted)  # type: ignore[arg-type]


@dataclass
class Served:
    port: int = 0
    protocols: list[Watched] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # lets /slow-stream go on

    def writes(self) -> list[bytes]:
        """The latest connection's writes that sent something (a transport skips b"")."""
        return [data for data in self.protocols[-1].counted.writes if data]


async def _app(scope: Scope, receive: Receive, send: Send, served: Served) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/json":
        length = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": BODY})
    elif path == "/parts":  # a known length sent in two parts
        length = [(b"content-length", b"4")]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": b"ab", "more_body": True})
        await send({"type": "http.response.body", "body": b"cd"})
    elif path == "/slow-stream":  # chunked: the head must not wait for the body
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await served.release.wait()
        await send({"type": "http.response.body", "body": b"late"})
    elif path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/fails":  # starts an answer of known length, then fails
        length = [(b"content-length", b"10")]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        raise RuntimeError("the app failed mid-answer")
    elif path == "/echo":
        body = await whole_body(receive)
        length = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    settings = make_settings(header_timeout_s=30.0, max_connections=10)
    monkeypatch.setattr(http_server, "get_settings", lambda: settings)
    served = Served()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await _app(scope, receive, send, served)

    try:
        async with serving(Watched, app, keep_alive_s=30, made=served.protocols.append) as port:
            served.port = port
            yield served
    finally:
        served.release.set()


async def _request(
    served: Served, data: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await bounded(asyncio.open_connection("127.0.0.1", served.port))
    writer.write(data)
    return reader, writer


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One answer framed by its Content-Length: (head, body)."""
    head = await bounded(reader.readuntil(b"\r\n\r\n"))
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await bounded(reader.readexactly(length))


async def test_an_answer_of_known_length_leaves_in_one_write(served: Served) -> None:
    reader, writer = await _request(served, b"GET /json HTTP/1.1\r\nHost: t\r\n\r\n")
    head, body = await _response(reader)
    assert head.startswith(b"HTTP/1.1 200 ") and body == BODY
    assert served.writes() == [head + body]
    # And again on the same kept-alive connection: every answer's head is held for its body.
    writer.write(b"GET /json HTTP/1.1\r\nHost: t\r\n\r\n")
    second = await _response(reader)
    assert served.writes() == [head + body, second[0] + second[1]]
    writer.close()


async def test_a_body_in_parts_goes_with_the_head_first_then_as_it_comes(served: Served) -> None:
    reader, writer = await _request(served, b"GET /parts HTTP/1.1\r\nHost: t\r\n\r\n")
    head, body = await _response(reader)
    assert body == b"abcd"
    assert served.writes() == [head + b"ab", b"cd"]
    writer.close()


async def test_a_streamed_answer_sends_its_head_before_its_body(served: Served) -> None:
    """Server-sent events are chunked: their head is not held, whatever the body waits for."""
    reader, writer = await _request(served, b"GET /slow-stream HTTP/1.1\r\nHost: t\r\n\r\n")
    head = await bounded(reader.readuntil(b"\r\n\r\n"))  # while the app still waits
    assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head
    served.release.set()
    assert await bounded(reader.readuntil(b"0\r\n\r\n")) == b"4\r\nlate\r\n0\r\n\r\n"
    writer.close()


@pytest.mark.parametrize(
    ("request_line", "status"),
    [(b"HEAD /json HTTP/1.1", b"200"), (b"GET /empty HTTP/1.1", b"204")],
)
async def test_a_bodiless_answer_is_not_held(
    served: Served, request_line: bytes, status: bytes
) -> None:
    reader, writer = await _request(served, request_line + b"\r\nHost: t\r\n\r\n")
    head = await bounded(reader.readuntil(b"\r\n\r\n"))
    assert head.startswith(b"HTTP/1.1 " + status)
    assert served.writes() == [head]
    writer.write(b"GET /json HTTP/1.1\r\nHost: t\r\n\r\n")  # the connection still serves
    assert (await _response(reader))[1] == BODY
    writer.close()


async def test_an_app_failing_mid_answer_sends_the_head_then_closes(served: Served) -> None:
    """As uvicorn does without the held head: the client sees the head, then the close."""
    reader, writer = await _request(served, b"GET /fails HTTP/1.1\r\nHost: t\r\n\r\n")
    received = await bounded(reader.read())  # to the close
    assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b"\r\n\r\n")
    writer.close()


async def test_100_continue_goes_out_before_the_answer(served: Served) -> None:
    reader, writer = await _request(
        served,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    interim = await bounded(reader.readuntil(b"\r\n\r\n"))
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hello")
    head, body = await _response(reader)
    assert body == b"hello"
    assert served.writes() == [interim, head + body]
    writer.close()


async def test_pipelined_requests_are_answered_in_order(served: Served) -> None:
    requests = b"".join(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\n%03d" % index
        for index in range(5)
    )
    reader, writer = await _request(served, requests)
    bodies = [(await _response(reader))[1] for _ in range(5)]
    assert bodies == [b"%03d" % index for index in range(5)]
    assert len(served.writes()) == 5  # one write per answer
    writer.close()
