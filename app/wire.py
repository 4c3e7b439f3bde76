"""A minimal HTTP/1.1 client over asyncio streams: the model call's, and under the outbound
client of external tools (`app/tools/outbound_client.py`), which adds the connect-time guard,
timeouts and the capped, inflating read.

Why not a general client: per model call, the `openai` SDK spent ~2 ms of CPU here, aiohttp
~0.2 ms, and this ~0.05 ms (see docs/performance.md). It does what those calls need:
keep-alive pooling per origin, Content-Length, chunked and close-delimited bodies, read whole
or as a stream, and TLS with the caller's context. It does not follow redirects, decompress,
keep cookies or use proxies (set MODEL_CLIENT=openai-sdk for a proxy).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.telemetry import outbound_headers

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_IDLE_PER_ORIGIN = 256
READ_SIZE = 64 * 1024
BODILESS_STATUSES = frozenset({204, 304})  # no body whatever their headers say (RFC 9112 6.3)


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
    headers: dict[str, str]  # names in lower case; of a repeated one, its last value
    keep_alive: bool  # the connection may carry another request once the body is read
    bodiless: bool  # no body whatever the headers say: to a HEAD, a 101, a 204, a 304


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


class Connection:
    __slots__ = ("idle_since", "reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.reused = reader, writer, False
        self.idle_since = 0.0

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
        max_idle: int = MAX_IDLE_PER_ORIGIN,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        https = parts.scheme == "https"
        self.host = parts.hostname
        if not self.host.isascii():  # an international name goes on the wire as its ASCII form
            try:
                self.host = self.host.encode("idna").decode("ascii")
            except UnicodeError as exc:
                raise ValueError(f"not a valid host name: {parts.hostname!r}") from exc
        self.port = parts.port if parts.port is not None else (443 if https else 80)
        if not 0 < self.port < 65536:
            raise ValueError(f"not a port: {self.port}")
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = self.port == (443 if https else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self._ssl = (ssl_context or ssl.create_default_context()) if https else None
        self._idle: deque[Connection] = deque()
        self._connect = connect
        self._max_idle = max_idle

    async def post(self, body: bytes, headers: dict[str, str]) -> WireResponse:
        """POST `body` and read the whole answer (the hot path: no streaming layers)."""
        connection, head = await self._start(body, headers)
        try:
            data = b""
            if not head.bodiless:
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
        self.release(connection, head.keep_alive)
        return WireResponse(head.status, head.headers, data)

    @asynccontextmanager
    async def stream(self, body: bytes, headers: dict[str, str]) -> AsyncIterator[WireStream]:
        """POST `body`; the answer's body is read as it arrives.

        A pooled connection the server dropped before answering is replaced once, at once. The
        connection goes back to the pool only if the body was read to its end.
        """
        connection, head = await self._start(body, headers)
        chunks = body_chunks(connection.reader, head.headers)
        if head.bodiless:
            chunks = _nothing()
        response = WireStream(head, _guarded(chunks))
        try:
            yield response
        except BaseException:
            connection.close()
            raise
        self.release(connection, head.keep_alive and response.finished)

    async def exchange(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        *,
        retry_dropped: bool,
        connect_timeout_s: float | None = None,
    ) -> tuple[Connection, _Head]:
        """Send one request (`target`: the path and query) and read the answer's head; the
        caller reads the body (`body_chunks`) and then hands the connection back (`release`).
        A new connection (lookup, connect, TLS) has `connect_timeout_s`; the caller bounds the
        rest. `retry_dropped`: a pooled connection the server closed before answering is
        replaced once (only for requests that may be sent twice)."""
        connection = await self._acquire(connect_timeout_s)
        try:
            return connection, await self._send(connection, method, target, body, headers)
        except DroppedConnectionError:
            if not connection.reused or not retry_dropped:
                raise
        connection = await self._open(connect_timeout_s)
        return connection, await self._send(connection, method, target, body, headers)

    async def _start(self, body: bytes, headers: dict[str, str]) -> tuple[Connection, _Head]:
        """POST to the pool's URL and read the head; a dropped pooled connection is replaced
        once."""
        return await self.exchange("POST", self.path, body, headers, retry_dropped=True)

    def release(self, connection: Connection, reusable: bool) -> None:
        """Back to the pool if `reusable` (its answer read to the end, keep-alive) and nothing
        more came after the answer, else closed: bytes past an answer (a body sent after a HEAD
        or a 204, or after its Content-Length) would be read as the next call's answer."""
        if reusable and not _unread(connection.reader) and len(self._idle) < self._max_idle:
            connection.reused = False
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()

    def expire(self, idle_since: float) -> int:
        """Close the kept-alive connections idle since before `idle_since`; how many remain."""
        while self._idle and self._idle[0].idle_since < idle_since:  # oldest first
            self._idle.popleft().close()
        return len(self._idle)

    async def _acquire(self, connect_timeout_s: float | None = None) -> Connection:
        while self._idle:
            connection = self._idle.pop()
            reader = connection.reader
            if not connection.writer.is_closing() and not reader.at_eof() and not _unread(reader):
                connection.reused = True
                return connection
            connection.close()
        return await self._open(connect_timeout_s)

    async def _open(self, timeout_s: float | None = None) -> Connection:
        if timeout_s is None:
            return await self._dial()
        async with asyncio.timeout(timeout_s):
            return await self._dial()

    async def _dial(self) -> Connection:
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
            return Connection(reader, writer)
        raise WireError(f"cannot connect: {error}") from error

    async def _send(
        self,
        connection: Connection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> _Head:
        headers = outbound_headers(headers)  # the trace's traceparent, when tracing is on
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        lines += [f"{name}: {value}" for name, value in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        try:
            connection.writer.write(head + body if body else head)
            await connection.writer.drain()
            return await _read_head(connection.reader, method)
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


async def _read_head(reader: asyncio.StreamReader, method: str) -> _Head:
    while True:
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                name, value = name.strip().lower(), value.strip()
                if name == "content-length" and headers.get(name, value) != value:
                    raise ValueError("two different Content-Length values")
                headers[name] = value
        # Skip 1xx interim responses (100 Continue, 103 Early Hints); 101 is the last answer
        # on this connection.
        if status >= 200 or status == 101:
            break
    tokens = {token.strip() for token in headers.get("connection", "").lower().split(",")}
    persistent = status != 101 and "close" not in tokens
    persistent = persistent and (version == "HTTP/1.1" or "keep-alive" in tokens)
    chunked = _chunked(headers)
    # With both, Transfer-Encoding frames the body and the connection is not used again (RFC
    # 9112 6.3): the two may disagree.
    bodiless = method == "HEAD" or status < 200 or status in BODILESS_STATUSES
    framed = bodiless or chunked or "content-length" in headers
    keep_alive = framed and persistent and not (chunked and "content-length" in headers)
    return _Head(status, headers, keep_alive, bodiless)


def framing_length(headers: dict[str, str]) -> int | None:
    """The body's length when its Content-Length frames it (it is not chunked), else None;
    ValueError unless it is digits only (`int` would also take ` 1_0`, `+5` or `²`)."""
    if "content-length" not in headers or _chunked(headers):
        return None
    value = headers["content-length"]
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"malformed Content-Length: {value[:40]!r}")
    return int(value)


def _unread(reader: asyncio.StreamReader) -> int:
    """Bytes received and not yet read (StreamReader has no public way to ask)."""
    return len(reader._buffer)  # type: ignore[attr-defined]


def _push_back(reader: asyncio.StreamReader, data: bytes) -> None:
    """Return bytes read past a body to the reader, so that `release` sees them."""
    reader._buffer[:0] = data  # type: ignore[attr-defined]


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
    length = framing_length(headers)
    if length is not None:
        if length > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        return await reader.readexactly(length)
    parts: list[bytes] = []
    size = 0
    async for chunk in body_chunks(reader, headers):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        parts.append(chunk)
    return b"".join(parts)


async def body_chunks(
    reader: asyncio.StreamReader, headers: dict[str, str]
) -> AsyncIterator[bytes]:
    """A body's bytes as they arrive: chunked, of a Content-Length, or up to the close."""
    remaining = framing_length(headers)
    if _chunked(headers):
        async for piece in _dechunked(reader):
            yield piece
    elif remaining is not None:
        if remaining > MAX_BODY_BYTES:
            raise ValueError("response body too large")
        while remaining:
            chunk = await reader.readexactly(min(remaining, READ_SIZE))
            remaining -= len(chunk)
            yield chunk
    else:  # delimited by the server closing the connection
        while chunk := await reader.read(READ_SIZE):
            yield chunk


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


_SIZE_LINE = 4096  # a chunk's size with its extensions
FRAMING_PER_BYTE = 16
_HEX = b"0123456789abcdefABCDEF"


async def _dechunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's data, one piece per read from the socket whatever the chunks' sizes
    (a body of one-byte chunks costs the parsing of each, not an await and an object each;
    a chunk declaring a gigabyte is passed on as it arrives), then its trailers read and
    dropped. Bytes past the body's end go back to the reader. The framing may be at most
    FRAMING_PER_BYTE times the data (one-byte chunks take 5): a body of chunk extensions would
    otherwise be read and parsed without end, since caps count the data."""
    pending = b""  # read, not yet parsed
    carried = framing = 0  # data bytes passed on, and bytes of size lines and CRLFs
    left = 0  # data bytes still due in the current chunk
    state = "size"  # or "data", "crlf" (after a chunk's data), "trailers"
    trailers = 0
    while True:
        data = await reader.read(READ_SIZE)
        if not data:
            raise asyncio.IncompleteReadError(pending, None)
        pending += data
        out: list[bytes] = []
        at = 0
        while at < len(pending):
            if state == "data":
                taken = pending[at : at + left]
                out.append(taken)
                carried += len(taken)
                at += len(taken)
                left -= len(taken)
                if not left:
                    state = "crlf"
            elif state == "crlf":
                if len(pending) - at < 2:
                    break
                if pending[at : at + 2] != b"\r\n":
                    raise ValueError("a chunk's data is not followed by CRLF")
                at += 2
                state = "size"
            else:
                end = pending.find(b"\r\n", at)
                if end < 0:
                    if len(pending) - at > _SIZE_LINE:
                        raise ValueError("a chunk size line is too long")
                    break
                line, at = pending[at:end], end + 2
                if state == "trailers":
                    trailers += len(line) + 2
                    if trailers > MAX_HEAD_BYTES:
                        raise ValueError("the trailers are too long")
                    if not line:  # the body's end
                        if out:
                            yield b"".join(out)
                        if at < len(pending):
                            _push_back(reader, pending[at:])
                        return
                    continue
                framing += len(line) + 4  # with its CRLF and the one after the data
                if framing > FRAMING_PER_BYTE * carried + _SIZE_LINE:
                    raise ValueError("the chunked body is mostly framing")
                size = line.split(b";", 1)[0].strip(b" \t")
                if not size or len(size) > 16 or size.strip(_HEX):
                    raise ValueError(f"malformed chunk size: {size[:20]!r}")
                left = int(size, 16)
                state = "data" if left else "trailers"
        pending = pending[at:]
        if out:
            yield b"".join(out)


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
