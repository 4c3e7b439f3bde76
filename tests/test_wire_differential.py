"""The outbound client against llhttp itself: the same answers, written by a real socket server
to the client (`app/http/wire.py`) and fed to `httptools.HttpResponseParser` directly, get the same
verdict; where llhttp accepts, the client reads the same body, and a refused answer's
connection is never used again."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httptools
import pytest

from app.http.wire import WireError, WirePool

OK_HEAD = b"HTTP/1.1 200 OK\r\n"

# Answers llhttp refuses. The hand-written parser this client had before accepted ten of them
# (and kept the connection after nine) and waited for ever on three (the odd statuses, bare LF).
MALFORMED = {
    "status of four digits": b"HTTP/1.1 1000 OK\r\nContent-Length: 2\r\n\r\nhi",
    "header line without a colon": OK_HEAD + b"X-A\r\nContent-Length: 2\r\n\r\nhi",
    "obs-fold": OK_HEAD + b"X-A: a\r\n b\r\nContent-Length: 2\r\n\r\nhi",
    "a list as Content-Length": OK_HEAD + b"Content-Length: 2, 2\r\n\r\nhi",
    "space before the colon": OK_HEAD + b"Content-Length : 2\r\n\r\nhi",
    "bare LF line ends": b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi",
    "NUL in a value": OK_HEAD + b"X-A: 1\x00\r\nContent-Length: 2\r\n\r\nhi",
    "space in a name": OK_HEAD + b"X A: 1\r\nContent-Length: 2\r\n\r\nhi",
    "status of two digits": b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nhi",
    "two Content-Lengths": OK_HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nhi",
    "chunked and a length": OK_HEAD
    + b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    "negative length": OK_HEAD + b"Content-Length: -1\r\n\r\n",
    "length overflow": OK_HEAD + b"Content-Length: 99999999999999999999999\r\n\r\n",
    "header line starting with a space": OK_HEAD + b" Content-Length: 2\r\n\r\nhi",
    "DEL in a value": OK_HEAD + b"X-A: \x7f\r\nContent-Length: 2\r\n\r\nhi",
    "a chunk size with a space": OK_HEAD
    + b"Transfer-Encoding: chunked\r\n\r\n2 \r\nhi\r\n0\r\n\r\n",
    "a chunk size not in hex": OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n",
    "chunk data without its CRLF": OK_HEAD
    + b"Transfer-Encoding: chunked\r\n\r\n2\r\nhiXX0\r\n\r\n",
    "chunk size overflow": OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
    "not HTTP at all": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "CR alone in a value": OK_HEAD + b"X-A: a\rb\r\nContent-Length: 2\r\n\r\nhi",
}

_GZIPPED = gzip.compress(b'{"answer": 42}')
# Answers llhttp accepts: the client reads the same body (a transfer coding before chunked
# undone).
WELL_FORMED = {
    "a length": (OK_HEAD + b"Content-Length: 2\r\n\r\nhi", b"hi"),
    "chunked with extensions and trailers": (
        OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n5;a=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
        b"hello",
    ),
    "up to the close": (OK_HEAD + b"\r\nuntil the end", b"until the end"),
    "an interim answer first": (
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"Content-Length: 2\r\n\r\nhi",
        b"hi",
    ),
    "gzip, chunked": (
        OK_HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(_GZIPPED), _GZIPPED),
        b'{"answer": 42}',
    ),
    "a 204 claiming a length": (b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n", b""),
    "HTTP/1.0 with a length": (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi"),
}


class _Recorder:
    def __init__(self) -> None:
        self.body = b""
        self.complete = False
        self.framed = False  # a length or chunked (else the body ends at the close)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


def llhttp_verdict(answer: bytes) -> tuple[bool, bytes]:
    """(accepted, body) as llhttp reads `answer` followed by the connection's close."""
    recorder = _Recorder()
    parser = httptools.HttpResponseParser(recorder)
    try:
        parser.feed_data(answer)
    except httptools.HttpParserError:
        return False, b""
    accepted = recorder.complete or not recorder.framed  # cut short, unless it ends at the close
    return accepted, recorder.body


@asynccontextmanager
async def answering(answer: bytes) -> AsyncIterator[tuple[WirePool, list[int]]]:
    """A pool whose server writes `answer` to every request, then waits for the client (the
    client decides whether the answer is over), closing after an unframed one."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()
                if b"\r\n\r\nuntil" in answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = WirePool(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/")
    try:
        yield pool, connections
    finally:
        await pool.close()
        listener.close()
        await listener.wait_closed()


@pytest.mark.parametrize("name", MALFORMED)
async def test_what_llhttp_refuses_the_client_refuses(name: str) -> None:
    answer = MALFORMED[name]
    assert llhttp_verdict(answer) == (False, b"")
    async with answering(answer) as (pool, connections):
        for attempt in (1, 2):
            with pytest.raises(WireError):
                async with asyncio.timeout(10):
                    await pool.post(b"{}", {})
            assert len(connections) == attempt  # a refused answer's connection is not reused


@pytest.mark.parametrize("name", WELL_FORMED)
async def test_what_llhttp_accepts_the_client_reads_alike(name: str) -> None:
    answer, body = WELL_FORMED[name]
    accepted, parsed = llhttp_verdict(answer)
    assert accepted
    if name == "gzip, chunked":
        parsed = gzip.decompress(parsed)  # llhttp leaves the transfer coding to its caller
    assert parsed == body
    async with answering(answer) as (pool, _):
        async with asyncio.timeout(10):
            assert (await pool.post(b"{}", {})).body == body
