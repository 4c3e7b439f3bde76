"""The outbound client's own HTTP/1.1 edges (app/http/client.py on app/http/wire.py),
against raw servers on 127.0.0.1 that misbehave on purpose: what a hostile or broken upstream
can make it do, and when a kept-alive connection is used again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from app.http import client as outbound_client
from app.http.client import (
    OutboundClient,
    OutboundInvalidURLError,
    OutboundTimeoutError,
    OutboundUnreachableError,
)
from app.http.netguard import OutboundPolicy

OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # False: close the connection


@dataclass
class RawServer:
    """Counts connections and keeps every request head it read."""

    answer: Answer
    connections: int = 0
    heads: list[bytes] = field(default_factory=list)
    url: str = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = _content_length(head)
                if length:
                    await reader.readexactly(length)
                self.heads.append(head)
                if not await self.answer(head, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


Start = Callable[[Answer], Awaitable[RawServer]]


@pytest.fixture
async def raw() -> AsyncIterator[Start]:
    servers: list[asyncio.Server] = []

    async def start(answer: Answer) -> RawServer:
        state = RawServer(answer)
        server = await asyncio.start_server(state.serve, "127.0.0.1", 0)
        servers.append(server)
        state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return state

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def _client(**options: float) -> OutboundClient:
    return OutboundClient(
        OutboundPolicy(["127.0.0.1"]),
        timeout_s=options.get("timeout_s", 5),
        connect_timeout_s=5,
    )


def _answering(answer: bytes) -> Answer:
    """A raw server's handler that writes `answer` to each request and keeps the connection."""

    async def handler(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer)
        return True

    return handler


_ok = _answering(OK)


async def test_a_kept_alive_connection_serves_the_next_call(raw: Start) -> None:
    server = await raw(_ok)
    async with _client() as client:
        for _ in range(3):
            async with client.request("GET", f"{server.url}/a") as response:
                assert await response.read_capped(100) == (b"ok", False)
    assert server.connections == 1 and len(server.heads) == 3


async def test_a_chunk_declaring_a_gigabyte_is_read_in_pieces_up_to_the_cap(raw: Start) -> None:
    async def huge_chunk(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n40000000\r\n")
        writer.write(b"x" * 300_000)  # and never the rest: the client must not wait for it
        return True

    server = await raw(huge_chunk)
    async with _client() as client:
        async with client.request("GET", f"{server.url}/big") as response:
            data, truncated = await response.read_capped(100_000)
    assert truncated and data == b"x" * 100_000


async def test_only_an_answer_read_to_its_end_leaves_its_connection_kept(raw: Start) -> None:
    """A long answer cut at the cap, or not read at all, closes its connection; a short one is
    read with its head, so it is kept even when the caller wants less of it."""

    async def answer(head: bytes, writer: asyncio.StreamWriter) -> bool:
        if head.startswith(b"GET /long"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 200000\r\n\r\n" + b"y" * 200_000)
        else:
            writer.write(OK)
        return True

    server = await raw(answer)
    async with _client() as client:
        for _ in range(2):
            async with client.request("GET", f"{server.url}/long") as response:
                assert await response.read_capped(10) == (b"y" * 10, True)
        async with client.request("GET", f"{server.url}/short") as response:
            assert await response.read_capped(1) == (b"o", True)
        async with client.request("GET", f"{server.url}/long"):
            pass  # a body nobody read
        async with client.request("GET", f"{server.url}/short") as response:
            await response.read_capped(100)
    # cut (closed), cut (closed), short (kept), unread on the kept one (closed), a new one
    assert server.connections == 4


async def test_a_head_request_and_a_204_have_no_body_and_keep_the_connection(raw: Start) -> None:
    async def bodiless(head: bytes, writer: asyncio.StreamWriter) -> bool:
        if head.startswith(b"HEAD"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 12345\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        return True

    server = await raw(bodiless)
    async with _client(timeout_s=1) as client:
        for method in ("HEAD", "DELETE", "HEAD"):
            async with client.request(method, f"{server.url}/x") as response:
                assert await response.read_capped(100) == (b"", False)
    assert server.connections == 1


async def test_a_dropped_kept_alive_connection_is_retried_only_for_idempotent_methods(
    raw: Start,
) -> None:
    async def once(head: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(server.heads) % 2 == 0:  # every second request: closed before any answer
            return False
        writer.write(OK)
        return True

    server = await raw(once)
    async with _client() as client:
        async with client.request("GET", f"{server.url}/a") as response:
            await response.read_capped(100)
        async with client.request("GET", f"{server.url}/a") as response:  # dropped, sent again
            assert response.status == 200
            await response.read_capped(100)
        sent = len(server.heads)
        with pytest.raises(OutboundUnreachableError, match="ServerDisconnected"):
            async with client.request("POST", f"{server.url}/charge", body=b"{}"):
                pass
    assert len(server.heads) == sent + 1  # the POST went out once, never twice


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Note": "a\r\nX-Injected: 1"},
        {"X-Note": "a\nb"},
        {"X-Note": "nul\x00"},
        {"X-Note": "escape \x1b[2J"},
        {"X Bad": "name with a space"},
        {"X-Bad:": "name with a colon"},
        {"": "no name"},
    ],
)
async def test_a_header_that_could_add_a_line_is_refused_before_sending(
    raw: Start,
    headers: dict[str, str],
) -> None:
    server = await raw(_ok)
    async with _client() as client:
        with pytest.raises(ValueError, match="cannot be sent"):
            async with client.request("GET", f"{server.url}/a", headers=headers):
                pass
    assert server.heads == []


async def test_the_callers_headers_replace_the_defaults_but_never_the_clients_own(
    raw: Start,
) -> None:
    """A caller's header replaces a default of the same name in any case; those the client
    owns (app/http/outbound.py `RESERVED_HEADERS`, which stored tools may not set either) are left
    out: Host, the body's framing, the connection's."""
    server = await raw(_ok)
    async with _client() as client:
        headers = {
            "user-agent": "mine",
            "content-type": "text/plain",
            "HOST": "api.example",
            "Content-Length": "0",
            "transfer-encoding": "chunked",
            "Connection": "close",
        }
        async with client.request("POST", f"{server.url}/a", body=b"x", headers=headers):
            pass
        async with client.request("POST", f"{server.url}/b"):  # no body: a length of 0
            pass
    lines = server.heads[0].decode().lower().split("\r\n")
    names = [line.split(":")[0] for line in lines[1:] if line]
    assert lines[0] == "post /a http/1.1"
    assert names.count("user-agent") == names.count("content-length") == names.count("host") == 1
    assert "transfer-encoding" not in names and "connection" not in names
    assert "user-agent: mine" in lines and f"host: {server.url.split('//')[1]}" in lines
    assert "content-type: text/plain" in lines and "content-length: 1" in lines
    assert "content-length: 0" in server.heads[1].decode().lower().split("\r\n")
    assert server.connections == 1


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 12x\r\n\r\nok",
        b"HTTP/1.1 2\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",  # then closed
        b"HTTP/1.1 200 OK\r\ncontent-length: \xb2\r\n\r\nok",  # int() takes none of these
        b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1_0\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
    ],
)
async def test_a_broken_answer_is_unreachable_not_a_crash(raw: Start, answer: bytes) -> None:
    async def broken(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer)
        return False

    server = await raw(broken)
    async with _client() as client:
        with pytest.raises(OutboundUnreachableError):
            async with client.request("GET", f"{server.url}/a") as response:
                await response.read_capped(100)


async def test_a_body_that_stalls_is_a_timeout(raw: Start) -> None:
    async def stalls(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 200000\r\n\r\n" + b"z" * 70_000)
        await asyncio.Event().wait()  # the rest never comes
        return False

    server = await raw(stalls)
    async with _client(timeout_s=0.2) as client:
        with pytest.raises(OutboundTimeoutError):
            async with client.request("GET", f"{server.url}/a") as response:
                await response.read_capped(1_000_000)


async def test_idle_connections_are_closed_and_their_origins_forgotten(
    raw: Start,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = await raw(_ok)
    async with _client() as client:
        async with client.request("GET", f"{server.url}/a") as response:
            await response.read_capped(100)
        assert client._pools  # the origin, with its idle connection
        monkeypatch.setattr(outbound_client, "KEEPALIVE_S", -1.0)  # idle long enough already
        client._expire()
        assert client._pools == {}
        async with client.request("GET", f"{server.url}/a") as response:
            await response.read_capped(100)
    assert server.connections == 2


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1/w?city=Oslo&units=metric",
        'http://HOST:80/a b?q=a b&c="d"<e>',
        "https://bücher.example/ü?ä=ö",
        "http://h/p?%zz&%41",
        "http://h/p?a#frag",
        "http://h/p#f?x",
        "http://[::1]:8080/x?y=1",
        "http://h/p?a=1?b=2",
        "https://h:443/?",
    ],
)
def test_a_url_is_sent_as_httpx_normalizes_it(url: str) -> None:
    assert outbound_client.request_url(url) == str(httpx.URL(url)).split("#", 1)[0]


def test_a_url_without_a_path_keeps_its_query() -> None:
    assert outbound_client.request_url("http://host?x=1") == "http://host/?x=1"


def test_a_tools_url_is_parsed_once_whatever_its_query() -> None:
    """Arguments change the query on every call; the URL before it is parsed once (38 us)."""
    outbound_client._parts.cache_clear()
    for index in range(200):
        sent = outbound_client.request_url(f"https://api.example.com/v1/w?city=c{index}%20x")
        assert sent == f"https://api.example.com/v1/w?city=c{index}%20x"
    assert outbound_client._parts.cache_info().currsize == 1


async def test_credentials_in_a_url_are_never_sent(raw: Start) -> None:
    server = await raw(_ok)
    async with _client() as client:
        with pytest.raises(OutboundInvalidURLError, match="credentials"):
            async with client.request("GET", server.url.replace("//", "//user:pw@")):
                pass
    assert server.heads == []


async def test_bytes_past_an_answer_never_become_the_next_calls_answer(raw: Start) -> None:
    """An upstream that sends more than its answer (a body after a HEAD's head, or bytes after
    a whole answer) must not queue a forged answer for the next call on the connection, which
    may be another tenant's on the shared client."""
    after = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nEVIL"

    async def overflowing(head: bytes, writer: asyncio.StreamWriter) -> bool:
        # One write each, answer and overflow together: they arrive in one read, so the bytes
        # past the answer are waiting when the client hands the connection back.
        if head.startswith(b"HEAD"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 37\r\n\r\n" + after)
        elif head.startswith(b"GET /first"):
            writer.write(OK + after)
        else:
            writer.write(OK)
        return True

    server = await raw(overflowing)
    async with _client() as client:
        for first in ("HEAD", "GET"):
            async with client.request(first, f"{server.url}/first") as response:
                await response.read_capped(100)
            async with client.request("GET", f"{server.url}/second") as response:
                assert await response.read_capped(100) == (b"ok", False)
    # HEAD (closed: bytes past it), GET /second and GET /first (closed), GET /second
    assert server.connections == 3


@pytest.mark.parametrize(
    ("head", "kept"),
    [
        (b"HTTP/1.1 200 OK\r\nconnection: close, te\r\ncontent-length: 2\r\n\r\nok", False),
        (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 2\r\n\r\nok", True),
        (b"HTTP/1.0 200 OK\r\nconnection: keep-alive, x\r\ncontent-length: 2\r\n\r\nok", True),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", False),
    ],
)
async def test_a_connection_is_kept_only_when_the_answer_says_so(
    raw: Start, head: bytes, kept: bool
) -> None:
    server = await raw(_answering(head))
    async with _client() as client:
        for _ in range(2):
            async with client.request("GET", f"{server.url}/a") as response:
                assert await response.read_capped(100) == (b"ok", False)
    assert server.connections == (1 if kept else 2)


async def test_a_101_answer_is_given_not_waited_past(raw: Start) -> None:
    server = await raw(_answering(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n"))
    async with _client(timeout_s=5) as client:
        async with client.request("GET", f"{server.url}/a") as response:
            assert response.status == 101
            assert await response.read_capped(100) == (b"", False)


async def test_a_charset_that_is_no_text_encoding_reads_as_utf8(raw: Start) -> None:
    body = "héllo".encode()
    hex_charset = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=hex\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    server = await raw(_answering(hex_charset))
    async with _client() as client:
        async with client.request("GET", f"{server.url}/a") as response:
            assert await response.text_capped(100) == ("héllo", False)


@pytest.mark.parametrize("port", ["0", "70000"])
async def test_a_port_out_of_range_is_an_invalid_url(port: str) -> None:
    async with _client() as client:
        with pytest.raises(OutboundInvalidURLError, match="port"):
            async with client.request("GET", f"http://127.0.0.1:{port}/a"):
                pass


async def test_a_header_value_that_cannot_be_encoded_is_refused(raw: Start) -> None:
    server = await raw(_ok)
    async with _client() as client:
        with pytest.raises(ValueError, match="cannot be sent"):
            async with client.request("GET", f"{server.url}/a", headers={"X-A": "\udc80"}):
                pass
    assert server.heads == []
