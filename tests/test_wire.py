"""The model call's HTTP/1.1 client against raw responses from a real socket server."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from app.http.wire import WireError, WirePool

Responder = Callable[[int], bytes]  # request number on the connection -> raw response


class RawServer:
    def __init__(self) -> None:
        self.respond: Responder = lambda n: b""
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for number in range(100):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(length))
                raw = self.respond(number)
                if not raw:
                    break
                writer.write(raw)
                await writer.drain()
                if b"connection: close" in raw.lower() or raw.startswith(b"HTTP/1.0"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.fixture
async def raw() -> AsyncIterator[tuple[RawServer, WirePool]]:
    server = RawServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    pool = WirePool(f"http://127.0.0.1:{port}/v1/chat/completions?api-version=1")
    yield server, pool
    await pool.close()
    listener.close()
    await listener.wait_closed()


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%b\r\n%b" % (len(body), extra, body)


async def test_keep_alive_reuses_one_connection(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: ok(b'{"n": %d}' % n)
    for n in range(3):
        response = await pool.post(b"{}", {"Content-Type": "application/json"})
        assert response.status == 200 and response.body == b'{"n": %d}' % n
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions?api-version=1 HTTP/1.1\r\n")
    assert b"Host: 127.0.0.1:" in first and first.endswith(b"\r\n\r\n{}")


async def test_chunked_body_with_extensions_and_trailers(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    response = await pool.post(b"{}", {})
    assert response.body == b"hello world"
    assert (await pool.post(b"{}", {})).body == b"hello world"
    assert server.connections == 1


async def test_interim_responses_are_skipped(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"done")
    assert (await pool.post(b"{}", {})).body == b"done"


async def test_a_204_has_no_body_to_wait_for(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: b"HTTP/1.1 204 No Content\r\n\r\n"
    async with asyncio.timeout(10):  # waiting for a body would hang: fail instead
        for _ in range(2):  # read at once, without a length, and the connection kept
            assert (await pool.post(b"{}", {})).body == b""
            async with pool.stream(b"{}", {}) as response:
                assert await response.read() == b""
    assert server.connections == 1


@pytest.mark.parametrize(
    "response",
    [ok(b"bye", b"Connection: close\r\n"), b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nbye"],
)
async def test_connection_close_is_honoured(
    raw: tuple[RawServer, WirePool], response: bytes
) -> None:
    server, pool = raw
    server.respond = lambda n: response
    for _ in range(2):
        assert (await pool.post(b"{}", {})).body == b"bye"
    assert server.connections == 2


async def test_body_until_close_without_length(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\nupstream down"
    response = await pool.post(b"{}", {})
    assert response.status == 502 and response.body == b"upstream down"


@pytest.mark.parametrize(
    "garbage",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
async def test_malformed_responses_raise_wire_errors(
    raw: tuple[RawServer, WirePool], garbage: bytes
) -> None:
    server, pool = raw
    server.respond = lambda n: garbage
    with pytest.raises(WireError):
        await pool.post(b"{}", {})


async def test_a_body_cut_short_is_an_error(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: (
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nshort"
    )
    with pytest.raises(WireError):
        await pool.post(b"{}", {})


async def test_unreachable_port_is_a_wire_error() -> None:
    from tests.support.secantus import free_port

    pool = WirePool(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(WireError, match="cannot connect"):
        await pool.post(b"{}", {})


def test_host_header_and_path() -> None:
    assert WirePool("https://api.openai.com/v1/chat/completions").host_header == "api.openai.com"
    assert WirePool("http://[::1]:8080/x").host_header == "[::1]:8080"
    assert WirePool("https://example.com:8443").path == "/"
    with pytest.raises(ValueError):
        WirePool("ftp://example.com/")


async def test_a_body_of_tiny_chunks_is_read_whole(raw: tuple[RawServer, WirePool]) -> None:
    """200,000 one-byte chunks: parsed by llhttp, the data passed on whole."""
    server, pool = raw
    body = b"".join(b"1\r\nx\r\n" for _ in range(200_000)) + b"0\r\nx-trailer: 1\r\n\r\n"
    server.respond = lambda n: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    assert (await pool.post(b"{}", {})).body == b"x" * 200_000


async def test_a_chunked_body_is_parsed_across_any_read_boundary() -> None:
    body = b"5;ext=1\r\nhello\r\n10\r\n" + b"y" * 16 + b"\r\n0\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    for step in (1, 2, 3, 7):
        async with trickling(answer, step) as pool:
            assert (await pool.post(b"{}", {})).body == b"hello" + b"y" * 16


@pytest.mark.parametrize(
    "body",
    [
        b"zz\r\nhi\r\n0\r\n\r\n",
        b"0x2\r\nhi\r\n0\r\n\r\n",
        b"+2\r\nhi\r\n0\r\n\r\n",
        b"2\r\nhiXX0\r\n\r\n",
        b"1" * 5000,
        b"2\r\nhi\r\n",  # then closed
    ],
)
async def test_a_broken_chunked_body_is_refused(body: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    async with trickling(answer, len(answer)) as pool:
        with pytest.raises(WireError):
            await pool.post(b"{}", {})


async def test_bytes_past_a_chunked_body_close_its_connection(
    raw: tuple[RawServer, WirePool],
) -> None:
    server, pool = raw
    server.respond = lambda n: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        + (b"HTTP/1.1 200 OK\r\n" if n == 0 else b"")
    )
    for _ in range(2):
        assert (await pool.post(b"{}", {})).body == b"hi"
    assert server.connections == 2  # the first, with bytes past its answer, was not kept


async def test_a_body_of_chunk_extensions_is_refused(raw: tuple[RawServer, WirePool]) -> None:
    """Caps count the data: a body that is all framing (a byte of data per 2 KB extension)
    would be read and parsed without end."""
    server, pool = raw
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    padded = b"".join(b"1;" + b"e" * 2000 + b"\r\nx\r\n" for _ in range(100)) + b"0\r\n\r\n"
    server.respond = lambda n: head + padded
    with pytest.raises(WireError, match="framing"):
        await pool.post(b"{}", {})
    plain = b"".join(b"1;e=1\r\nx\r\n" for _ in range(10_000)) + b"0\r\n\r\n"
    server.respond = lambda n: head + plain
    assert (await pool.post(b"{}", {})).body == b"x" * 10_000


async def test_a_head_past_its_cap_is_refused(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    with pytest.raises(WireError, match="head is too long"):
        await pool.post(b"{}", {})


async def test_a_gzip_transfer_coding_before_chunked_is_undone(
    raw: tuple[RawServer, WirePool],
) -> None:
    server, pool = raw
    packed = gzip.compress(b'{"ok": true}')
    server.respond = lambda n: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(packed), packed)
    )
    for _ in range(2):
        assert (await pool.post(b"{}", {})).body == b'{"ok": true}'
    assert server.connections == 1


@pytest.mark.parametrize(
    "coding",
    [b"br, chunked", b"chunked, gzip", b"gzip", b"chunked, chunked", b"gzip, gzip, chunked"],
)
async def test_a_transfer_coding_it_cannot_undo_is_refused(
    raw: tuple[RawServer, WirePool], coding: bytes
) -> None:
    server, pool = raw
    server.respond = lambda n: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: %s\r\n\r\n0\r\n\r\n" % coding
    with pytest.raises(WireError, match="Transfer-Encoding"):
        await pool.post(b"{}", {})


async def test_a_gzip_transfer_coding_cut_short_is_refused(
    raw: tuple[RawServer, WirePool],
) -> None:
    server, pool = raw
    packed = gzip.compress(b"x" * 1000)[:-8]
    server.respond = lambda n: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(packed), packed)
    )
    with pytest.raises(WireError, match="cut short"):
        await pool.post(b"{}", {})


async def test_an_answer_past_the_callers_cap_is_refused(raw: tuple[RawServer, WirePool]) -> None:
    server, pool = raw
    server.respond = lambda n: ok(b"x" * 5000)
    with pytest.raises(WireError, match="larger than 4096"):
        await pool.post(b"{}", {}, cap=4096)
    assert (await pool.post(b"{}", {}, cap=5000)).body == b"x" * 5000


@asynccontextmanager
async def trickling(answer: bytes, step: int) -> AsyncIterator[WirePool]:
    """A pool whose server answers every request with `answer`, `step` bytes per write, and
    then closes the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            for at in range(0, len(answer), step):
                writer.write(answer[at : at + step])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    pool = WirePool(f"http://127.0.0.1:{port}/")
    try:
        yield pool
    finally:
        await pool.close()
        listener.close()
        await listener.wait_closed()
