"""A minimal HTTP/1.1 client over asyncio streams, for the model call only.

Why not a general client: per model call, the `openai` SDK spent ~2 ms of CPU here, aiohttp
~0.2 ms, and this ~0.05 ms (see the README's performance section). It does exactly what a
chat-completions POST needs: keep-alive pooling, Content-Length and chunked bodies, TLS. It does
not follow redirects, decompress, or use proxies (set MODEL_CLIENT=openai-sdk for a proxy).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_IDLE_PER_ORIGIN = 256


class WireError(Exception):
    """The connection failed or the server broke HTTP/1.1."""


class DroppedConnectionError(WireError):
    """A pooled connection was closed by the server before it answered (retry at once)."""


@dataclass(frozen=True)
class WireResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.reused = reader, writer, False

    def close(self) -> None:
        self.writer.close()


class WirePool:
    """Keep-alive connections to one origin (scheme, host, port)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            self.host_header = f"[{self.host}]" + ("" if default_port else f":{self.port}")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._idle: deque[_Connection] = deque()

    async def post(self, body: bytes, headers: dict[str, str]) -> WireResponse:
        """POST `body`; a pooled connection the server dropped is replaced once, at once."""
        connection = await self._acquire()
        try:
            return await self._exchange(connection, body, headers)
        except DroppedConnectionError:
            if not connection.reused:
                raise
        return await self._exchange(await self._open(), body, headers)

    async def _acquire(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.writer.is_closing() and not connection.reader.at_eof():
                connection.reused = True
                return connection
            connection.close()
        return await self._open()

    async def _open(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=self._ssl,
                server_hostname=self.host if self._ssl else None,
                limit=MAX_HEAD_BYTES,
            )
        except OSError as exc:
            raise WireError(f"cannot connect: {exc}") from exc
        return _Connection(reader, writer)

    async def _exchange(
        self, connection: _Connection, body: bytes, headers: dict[str, str]
    ) -> WireResponse:
        head = [
            f"POST {self.path} HTTP/1.1",
            f"Host: {self.host_header}",
            f"Content-Length: {len(body)}",
        ]
        head += [f"{name}: {value}" for name, value in headers.items()]
        try:
            connection.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await connection.writer.drain()
            response, keep_alive = await _read_response(connection.reader)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            connection.close()
            raise DroppedConnectionError("the server closed the connection") from exc
        except (asyncio.LimitOverrunError, ValueError) as exc:
            connection.close()
            raise WireError(f"malformed HTTP response: {exc}") from exc
        except BaseException:  # cancelled or timed out mid-exchange: the connection is unusable
            connection.close()
            raise
        if keep_alive and len(self._idle) < MAX_IDLE_PER_ORIGIN:
            connection.reused = False
            self._idle.append(connection)
        else:
            connection.close()
        return response

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[WireResponse, bool]:
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if status >= 200:  # skip 1xx interim responses (100 Continue, 103 Early Hints)
            break
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        body = await reader.readexactly(length)
    else:
        body = await reader.read(MAX_BODY_BYTES)
        return WireResponse(status, headers, body), False
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    return WireResponse(status, headers, body), keep_alive


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        length = int(line.split(b";", 1)[0].strip(), 16)
        if length == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        size += length
        if size > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        chunks.append(await reader.readexactly(length))
        await reader.readexactly(2)
