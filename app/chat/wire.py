"""A minimal HTTP/1.1 client over asyncio streams, for the model call only.

Why not a general client: per model call, the `openai` SDK spent ~2 ms of CPU here, aiohttp
~0.2 ms, and this ~0.05 ms (see docs/performance.md). It does exactly what a
chat-completions POST needs: keep-alive pooling, Content-Length, chunked and close-delimited
bodies, read whole or as a stream, and TLS. It does not follow redirects, decompress, or use
proxies (set MODEL_CLIENT=openai-sdk for a proxy).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_IDLE_PER_ORIGIN = 256
READ_SIZE = 64 * 1024


# The addresses to dial for (host, port), each already checked against an outbound policy; it
# raises WireError to refuse. Without one the host is dialled as it is.
Connector = Callable[[str, int], Awaitable[list[str]]]


class WireError(Exception):
    """The connection failed or the server broke HTTP/1.1."""


class DroppedConnectionError(WireError):
    """A pooled connection was closed by the server before it answered (retry at once)."""


@dataclass(frozen=True)
class WireResponse:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class _Head:
    status: int
    headers: dict[str, str]
    keep_alive: bool


class WireStream:
    """A response whose body is read as it arrives."""

    def __init__(self, head: _Head, chunks: AsyncIterator[bytes]) -> None:
        self.status, self.headers = head.status, head.headers
        self._chunks = chunks
        self.finished = False

    async def read(self) -> bytes:
        parts = [chunk async for chunk in self]
        return b"".join(parts)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk
        self.finished = True


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.reused = reader, writer, False

    def close(self) -> None:
        self.writer.close()


class WirePool:
    """Keep-alive connections to one origin (scheme, host, port)."""

    def __init__(
        self,
        url: str,
        *,
        connect: Connector | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        if not self.host.isascii():  # an international name goes on the wire as its ASCII form
            try:
                self.host = self.host.encode("idna").decode("ascii")
            except UnicodeError as exc:
                raise ValueError(f"not a valid host name: {parts.hostname!r}") from exc
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        https = parts.scheme == "https"
        self._ssl = (ssl_context or ssl.create_default_context()) if https else None
        self._idle: deque[_Connection] = deque()
        self._connect = connect

    async def post(self, body: bytes, headers: dict[str, str]) -> WireResponse:
        """POST `body` and read the whole answer (the hot path: no streaming layers)."""
        connection, head = await self._start(body, headers)
        try:
            data = await _read_body(connection.reader, head.headers)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            connection.close()
            raise WireError("the connection closed mid-response") from exc
        except (asyncio.LimitOverrunError, ValueError) as exc:
            connection.close()
            raise WireError(f"malformed HTTP response body: {exc}") from exc
        except BaseException:
            connection.close()
            raise
        self._release(connection, head.keep_alive)
        return WireResponse(head.status, head.headers, data)

    @asynccontextmanager
    async def stream(self, body: bytes, headers: dict[str, str]) -> AsyncIterator[WireStream]:
        """POST `body`; the answer's body is read as it arrives.

        A pooled connection the server dropped before answering is replaced once, at once. The
        connection goes back to the pool only if the body was read to its end.
        """
        connection, head = await self._start(body, headers)
        response = WireStream(head, _guarded(_body(connection.reader, head.headers)))
        try:
            yield response
        except BaseException:
            connection.close()
            raise
        self._release(connection, head.keep_alive and response.finished)

    async def _start(self, body: bytes, headers: dict[str, str]) -> tuple[_Connection, _Head]:
        """Send the request and read the head; a dropped pooled connection is replaced once."""
        connection = await self._acquire()
        try:
            return connection, await self._send(connection, body, headers)
        except DroppedConnectionError:
            if not connection.reused:
                raise
        connection = await self._open()
        return connection, await self._send(connection, body, headers)

    def _release(self, connection: _Connection, reusable: bool) -> None:
        if reusable and len(self._idle) < MAX_IDLE_PER_ORIGIN:
            connection.reused = False
            self._idle.append(connection)
        else:
            connection.close()

    async def _acquire(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.writer.is_closing() and not connection.reader.at_eof():
                connection.reused = True
                return connection
            connection.close()
        return await self._open()

    async def _open(self) -> _Connection:
        addresses = [self.host]
        if self._connect is not None:
            addresses = await self._connect(self.host, self.port)
        error: OSError | None = None
        for address in addresses:  # every one was checked: try them in the resolver's order
            try:
                reader, writer = await asyncio.open_connection(
                    address,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                    limit=MAX_HEAD_BYTES,
                )
            except OSError as exc:
                error = exc
                continue
            return _Connection(reader, writer)
        raise WireError(f"cannot connect: {error}")

    async def _send(self, connection: _Connection, body: bytes, headers: dict[str, str]) -> _Head:
        lines = [
            f"POST {self.path} HTTP/1.1",
            f"Host: {self.host_header}",
            f"Content-Length: {len(body)}",
        ]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        try:
            connection.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await connection.writer.drain()
            return await _read_head(connection.reader)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            connection.close()
            raise DroppedConnectionError("the server closed the connection") from exc
        except (asyncio.LimitOverrunError, ValueError, IndexError) as exc:
            connection.close()
            raise WireError(f"malformed HTTP response: {exc}") from exc
        except BaseException:  # cancelled or timed out mid-exchange: the connection is unusable
            connection.close()
            raise

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


async def _read_head(reader: asyncio.StreamReader) -> _Head:
    while True:
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if status >= 200:  # skip 1xx interim responses (100 Continue, 103 Early Hints)
            break
    connection = headers.get("connection", "").lower()
    framed = "content-length" in headers or _chunked(headers)
    keep_alive = (
        framed and connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    )
    return _Head(status, headers, keep_alive)


def _chunked(headers: dict[str, str]) -> bool:
    return headers.get("transfer-encoding", "").lower() == "chunked"


async def _guarded(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Body bytes, with protocol and connection failures as WireError and a size cap."""
    size = 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise WireError("response body too large")
            yield chunk
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        raise WireError("the connection closed mid-response") from exc
    except (asyncio.LimitOverrunError, ValueError) as exc:
        raise WireError(f"malformed HTTP response body: {exc}") from exc


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers and not _chunked(headers):
        length = int(headers["content-length"])
        if length > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        return await reader.readexactly(length)
    parts: list[bytes] = []
    size = 0
    async for chunk in _body(reader, headers):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        parts.append(chunk)
    return b"".join(parts)


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if _chunked(headers):
        while True:
            length = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
            if length == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return
            yield await reader.readexactly(length)
            await reader.readexactly(2)
    elif "content-length" in headers:
        remaining = int(headers["content-length"])
        if remaining > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        while remaining:
            chunk = await reader.readexactly(min(remaining, READ_SIZE))
            remaining -= len(chunk)
            yield chunk
    else:  # delimited by the server closing the connection
        while chunk := await reader.read(READ_SIZE):
            yield chunk


async def server_sent_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The `data` of each server-sent event in a byte stream (comments and other fields skipped)."""
    buffer = b""
    data: list[str] = []
    async for chunk in chunks:
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end].rstrip(b"\r").decode("utf-8", "replace"), buffer[end + 1 :]
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)
