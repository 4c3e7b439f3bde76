"""The service's one HTTP/1.1 client: kept-alive connections per origin, answers parsed by llhttp
(`httptools.HttpResponseParser`), the request head built and checked in one place
(`request_head`). Model calls (`app/chat/http_model_client.py`), external tools, web fetch and the
import fetch (`app/http/client.py`, which adds the connect-time guard, deadlines and
the capped, inflating read) and MCP servers over HTTP (`app/mcp/transport.py`) all send through
it. Why a lean client: docs/performance.md, "External tools on the lean client".

What llhttp decides: the status line, header syntax, the body's framing (Content-Length,
chunked, or up to the close; a length and a chunked coding together are refused, as RFC 9112
6.3 allows), keep-alive, interim (1xx) answers. What this module adds: a cap on the head and on
the framing a body may carry, transfer codings before `chunked` (gzip, deflate) decoded or
refused, HTTP/1.0 and 1.1 only, answers to HEAD (which llhttp cannot be told about) read head
only, and bytes past an answer never read as the next one's. It does not follow redirects,
decompress content codings, keep cookies or use proxies.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
import zlib
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from app.http.outbound import RESERVED_HEADERS
from app.observe.telemetry import outbound_headers

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_IDLE_PER_ORIGIN = 256
READ_SIZE = 64 * 1024
# A body may carry at most this many bytes of framing (chunk sizes, extensions, CRLFs) per byte
# of data, plus a head start: caps count data, and a body of framing alone would otherwise be
# read without end (one-byte chunks take 5).
FRAMING_PER_BYTE = 16
_FRAMING_ALLOWANCE = MAX_HEAD_BYTES + 4096  # the head, and a few chunk sizes
_HIGH_WATER = 4 * READ_SIZE  # body bytes received and not yet taken: reading pauses above
_LOW_WATER = READ_SIZE

# An HTTP field name is an RFC 9110 token; a value has no control character but a tab (no CR,
# LF or NUL above all: they would end the line, add a header, or end the head).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FIELD_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")

# The addresses to dial for (host, port), each already checked against an outbound policy; it
# raises to refuse (netguard's errors, or WireError). Without one the host is dialled as it is.
Connector = Callable[[str, int], Awaitable[list[str]]]


class WireError(Exception):
    """The connection failed or the server broke HTTP/1.1."""


class ConnectionClosedError(WireError):
    """The server closed the connection before the answer's end."""


class DroppedConnectionError(ConnectionClosedError):
    """The server closed the connection before any byte of its answer (a pooled connection:
    retry at once, where the request may be sent twice)."""


class BodyTooLargeError(WireError):
    """The answer's body is larger than the caller's cap; it was not read past it."""


class HeaderError(ValueError):
    """A header that cannot be sent as it is (the message names the header, never its value)."""


def header_problem(name: str, value: str) -> str | None:
    """Why a header cannot go on the wire, or None: the name must be an RFC 9110 token and the
    value free of control characters (CR, LF, NUL above all) and encodable as UTF-8. The one
    check of every header the service sends (`request_head`); stored tools' headers follow the
    same rule when written (`app/schemas/fields.py`)."""
    shown = f"the header {name[:40]!r} cannot be sent"
    if not _TOKEN.fullmatch(name):
        return f"{shown}: its name is not an HTTP token"
    if not _FIELD_VALUE.fullmatch(value):
        return f"{shown}: its value holds a control character (CR, LF, NUL or another)"
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate
            return f"{shown}: its value is not valid text"
    return None


def checked_header(name: str, value: str) -> None:
    """`HeaderError` if `header_problem` finds one."""
    problem = header_problem(name, value)
    if problem is not None:
        raise HeaderError(problem)


def request_head(
    method: str,
    target: str,
    host: str,
    headers: Mapping[str, str],
    body_length: int | None,
) -> bytes:
    """The request line and headers as sent: the one place an outbound request's head is
    built. Every header passes `header_problem` (`HeaderError` otherwise); the headers the
    client owns (`RESERVED_HEADERS`: Host, the body's framing, the connection's) are left out,
    as a stored tool may not set them either: a second length would let the upstream read
    another request into the body."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    for name, value in outbound_headers(headers).items():  # the trace's traceparent, if on
        checked_header(name, value)
        if name.lower() not in RESERVED_HEADERS:
            lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode()


@dataclass(frozen=True, slots=True)
class Head:
    """An answer's status and headers (names in lower case; of a repeated one, its last value)."""

    status: int
    headers: dict[str, str]
    bodiless: bool  # no body whatever the headers say: to a HEAD, a 101, a 204, a 304


@dataclass(frozen=True)
class WireResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class Connection(asyncio.Protocol):
    """One connection, one exchange at a time: `send`, then `head`, then the body's `piece`s
    (or `body`). Bytes the server sends while no exchange is open close the connection."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reused = False
        self.idle_since = 0.0
        self._parser: httptools.HttpResponseParser | None = None
        self._head_only = False  # an answer to HEAD: its head is all of it
        self._pending = b""  # of a HEAD's answer: bytes not yet fed, up to a head's end
        self._fields: dict[str, str] = {}
        self._head: Head | None = None
        self._keep_alive = False
        self._until_close = False  # the body ends when the connection does
        self._decoder: _TransferDecoder | None = None
        self._pieces: deque[bytes] = deque()
        self._queued = 0
        self._complete = False
        self._overrun = False  # bytes past the answer: never used again
        self._failure: WireError | None = None
        self._received = 0  # bytes of this answer
        self._head_size = 0  # of its header lines
        self._data = 0  # body bytes given by llhttp
        self._lost = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    # The transport's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None or self._complete:  # nothing asked, or past the answer
            self._overrun = True
            self.close()
            return
        self._received += len(data)
        if self._head_only:
            self._feed_head_only(parser, data)
        else:
            self._feed(parser, data)
        if self._failure is None:
            if self._head is None:
                if self._received > MAX_HEAD_BYTES:
                    self._fail(WireError("the answer's head is too long"))
            elif self._received > FRAMING_PER_BYTE * self._data + _FRAMING_ALLOWANCE:
                self._fail(WireError("the answer's body is mostly framing"))
        self._wake()

    def _feed(self, parser: httptools.HttpResponseParser, data: bytes) -> None:
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # a 101: what follows is not HTTP any more
            self._keep_alive = False
            self._complete = True
        except httptools.HttpParserError as exc:
            if self._complete:  # bytes past a whole answer, or after `Connection: close`
                self._overrun = True
            elif self._failure is None:
                cause = exc.__context__ if isinstance(exc.__context__, WireError) else None
                self._fail(cause or WireError(f"malformed HTTP response: {exc}"))

    def _feed_head_only(self, parser: httptools.HttpResponseParser, data: bytes) -> None:
        """An answer to HEAD: llhttp is given each head (interim ones, then the final one) up
        to its end and nothing past it, since it would take a Content-Length's bytes for a body."""
        self._pending += data
        while self._head is None and self._failure is None:
            end = self._pending.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self._pending = self._pending[: end + 4], self._pending[end + 4 :]
            self._feed(parser, head)
        if self._head is not None:
            self._complete = True
            self._overrun = self._overrun or bool(self._pending)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._parser is not None and not self._complete and self._failure is None:
            if self._head is not None and self._until_close:
                self._finish()
            elif self._received == 0:
                self._failure = DroppedConnectionError("the server closed the connection")
            else:
                self._failure = ConnectionClosedError("the connection closed mid-response")
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # llhttp's callbacks.

    def on_message_begin(self) -> None:
        if self._head is not None:  # a second answer begins: bytes past ours
            raise WireError("bytes past the answer")
        self._fields = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._head_size > MAX_HEAD_BYTES:
            raise WireError("the answer's head is too long")
        self._fields[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        status = self._parser.get_status_code()
        if status < 100:
            raise WireError(f"malformed HTTP response: status {status}")
        if self._parser.get_http_version() not in ("1.1", "1.0"):
            raise WireError("malformed HTTP response: not HTTP/1.0 or HTTP/1.1")
        if 100 <= status < 200 and status != 101:  # interim (100 Continue, 103 Early Hints)
            self._fields = {}
            return
        headers = self._fields
        self._keep_alive = self._parser.should_keep_alive() and status != 101
        bodiless = self._head_only or status < 200 or status in (204, 304)
        if not bodiless:
            self._frame(headers)
        self._head = Head(status, headers, bodiless)

    def _frame(self, headers: dict[str, str]) -> None:
        """The body's transfer codings: `chunked` (llhttp's) last, gzip or deflate before it
        decoded here; without `chunked` last, or with any other coding, the body cannot be
        read (RFC 9112 6.1 lets a recipient refuse a coding it does not know)."""
        encoding = headers.get("transfer-encoding")
        if encoding is None:
            self._until_close = "content-length" not in headers
            return
        codings = [coding.strip().lower() for coding in encoding.split(",")]
        if codings[-1] != "chunked" or "chunked" in codings[:-1]:
            raise WireError(f"unsupported Transfer-Encoding: {encoding[:60]!r}")
        if len(codings) > 2:
            raise WireError(f"unsupported Transfer-Encoding: {encoding[:60]!r}")
        if len(codings) == 2:
            self._decoder = _TransferDecoder(codings[0], encoding)

    def on_body(self, body: bytes) -> None:
        self._data += len(body)
        if self._decoder is not None:
            body = self._decoder.decode(body)
        if body:
            self._queue(body)

    def on_message_complete(self) -> None:
        if self._head is None:  # the end of an interim answer
            return
        if self._decoder is not None:
            self._decoder.finish()
        parser = self._parser
        self._keep_alive = self._keep_alive and parser is not None and parser.should_keep_alive()
        self._finish()

    # The exchange's side.

    def send(self, method: str, data: bytes) -> Awaitable[None] | None:
        """Write a request (head and body) and get ready for its answer; an awaitable when the
        transport's buffer is full (await it before reading)."""
        self._parser = httptools.HttpResponseParser(self)
        self._head_only = method == "HEAD"
        self._pending = b""
        self._head, self._decoder, self._failure = None, None, None
        self._complete = self._until_close = self._overrun = False
        self._pieces.clear()
        self._queued = self._received = self._data = self._head_size = 0
        assert self.transport is not None
        if self._lost:  # closed since it was picked: as if closed before the answer
            self._failure = DroppedConnectionError("the server closed the connection")
            return None
        self.transport.write(data)
        return self._drained

    async def head(self) -> Head:
        """The answer's final head (interim answers skipped)."""
        while self._head is None:
            if self._failure is not None:
                raise self._failure
            await self._wait()
        return self._head

    async def piece(self) -> bytes | None:
        """The body's next bytes as they came, None at its end."""
        while not self._pieces:
            if self._failure is not None:
                raise self._failure
            if self._complete:
                return None
            await self._wait()
        piece = self._pieces.popleft()
        self._queued -= len(piece)
        if self._reading_paused and self._queued <= _LOW_WATER and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return piece

    async def body(self, cap: int = MAX_BODY_BYTES) -> bytes:
        """The whole body; WireError past `cap` bytes."""
        if self._complete and self._failure is None:  # the usual answer: all in already
            parts = list(self._pieces)
            self._pieces.clear()
            self._queued = 0
        else:
            parts = []
            size = 0
            while (piece := await self.piece()) is not None:
                size += len(piece)
                if size > cap:
                    raise BodyTooLargeError(f"the answer's body is larger than {cap} bytes")
                parts.append(piece)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if len(data) > cap:
            raise BodyTooLargeError(f"the answer's body is larger than {cap} bytes")
        return data

    @property
    def finished(self) -> bool:
        """The answer has been read to its end."""
        return self._complete and not self._pieces and self._failure is None

    @property
    def reusable(self) -> bool:
        """Read to its end, kept alive by the server, nothing past it, still open."""
        return (
            self.finished
            and self._keep_alive
            and not self._overrun
            and not self._lost
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def idle(self) -> None:
        """Between exchanges: any byte the server sends now closes the connection."""
        self._parser = None

    def usable(self) -> bool:
        return not self._lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # Internals.

    def _queue(self, body: bytes) -> None:
        self._pieces.append(body)
        self._queued += len(body)
        if self._queued > _HIGH_WATER and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _finish(self) -> None:
        self._complete = True
        if self._reading_paused and self.transport is not None and not self._lost:
            self._reading_paused = False
            self.transport.resume_reading()

    def _fail(self, error: WireError) -> None:
        self._failure = error
        self._keep_alive = False
        self.close()

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _TransferDecoder:
    """A transfer coding applied before `chunked` (gzip, x-gzip or deflate), undone, at most
    MAX_BODY_BYTES out (a compression bomb stops there)."""

    def __init__(self, coding: str, header: str) -> None:
        if coding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS)
        else:
            raise WireError(f"unsupported Transfer-Encoding: {header[:60]!r}")
        self._out = 0

    def decode(self, data: bytes) -> bytes:
        try:
            out = self._inflate.decompress(data, MAX_BODY_BYTES + 1 - self._out)
        except zlib.error as exc:
            raise WireError(f"malformed transfer coding: {exc}") from None
        self._out += len(out)
        if self._out > MAX_BODY_BYTES or self._inflate.unconsumed_tail:
            raise BodyTooLargeError(f"the answer's body is larger than {MAX_BODY_BYTES} bytes")
        return out

    def finish(self) -> None:
        if not self._inflate.eof:
            raise WireError("malformed transfer coding: the compressed body is cut short")


class WireStream:
    """A response whose body is read as it arrives, at most `cap` bytes."""

    def __init__(self, head: Head, connection: Connection, cap: int = MAX_BODY_BYTES) -> None:
        self.status, self.headers = head.status, head.headers
        self._connection = connection
        self._cap = cap

    async def read(self) -> bytes:
        return await self._connection.body(self._cap)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        while (piece := await self._connection.piece()) is not None:
            size += len(piece)
            if size > self._cap:
                raise BodyTooLargeError(f"the answer's body is larger than {self._cap} bytes")
            yield piece

    @property
    def finished(self) -> bool:
        return self._connection.finished


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

    async def post(
        self, body: bytes, headers: Mapping[str, str], *, cap: int = MAX_BODY_BYTES
    ) -> WireResponse:
        """POST `body` to the pool's URL and read the whole answer (BodyTooLargeError past
        `cap`)."""
        connection, head = await self.exchange("POST", self.path, body, headers, retry_dropped=True)
        try:
            data = await connection.body(cap)
        except BaseException:
            connection.close()
            raise
        self.release(connection)
        return WireResponse(head.status, head.headers, data)

    @asynccontextmanager
    async def stream(
        self, body: bytes, headers: Mapping[str, str], *, cap: int = MAX_BODY_BYTES
    ) -> AsyncIterator[WireStream]:
        """POST `body`; the answer's body is read as it arrives (BodyTooLargeError past `cap`).
        The connection goes back to the pool only if the body was read to its end."""
        connection, head = await self.exchange("POST", self.path, body, headers, retry_dropped=True)
        try:
            yield WireStream(head, connection, cap)
        except BaseException:
            connection.close()
            raise
        self.release(connection)

    async def exchange(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        retry_dropped: bool,
        connect_timeout_s: float | None = None,
    ) -> tuple[Connection, Head]:
        """Send one request (`target`: the path and query) and read the answer's head; the
        caller reads the body (`Connection.piece`, `body`) and then hands the connection back
        (`release`). A new connection (lookup, connect, TLS) has `connect_timeout_s`; the caller
        bounds the rest. `retry_dropped`: a pooled connection the server closed before any
        byte of its answer is replaced once (for requests that may be sent twice)."""
        length = len(body) if body is not None else None
        data = request_head(method, target, self.host_header, headers, length)
        if body:
            data += body
        connection = await self._acquire(connect_timeout_s)
        try:
            return connection, await self._send(connection, method, data)
        except DroppedConnectionError:
            if not connection.reused or not retry_dropped:
                raise
        connection = await self._open(connect_timeout_s)
        return connection, await self._send(connection, method, data)

    def release(self, connection: Connection, reusable: bool = True) -> None:
        """Back to the pool if `reusable` and the connection is (its answer read to the end,
        kept alive, nothing past it), else closed."""
        if reusable and connection.reusable and len(self._idle) < self._max_idle:
            connection.idle()
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
            if connection.usable():
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
        loop = asyncio.get_running_loop()
        error: OSError | None = None
        for address in addresses:  # every one was checked: try them in the resolver's order
            try:
                _, connection = await loop.create_connection(
                    Connection,
                    address,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
            except OSError as exc:
                error = exc
                continue
            return connection
        raise WireError(f"cannot connect: {error}") from error

    async def _send(self, connection: Connection, method: str, data: bytes) -> Head:
        try:
            drained = connection.send(method, data)
            if drained is not None:
                await drained
            return await connection.head()
        except BaseException:  # failed, cancelled or timed out mid-exchange: unusable
            connection.close()
            raise

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


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
