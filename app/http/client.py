"""The HTTP client of external tools, web fetch and the OpenAPI import fetch: kept-alive
connections per origin (`app/http/wire.py`'s pool) under one outbound policy, with the
guarantees of `app/http/netguard.py` at connect time.

Why this client, measured: docs/performance.md, "Why the code is shaped as it is".
What each call can rely on:

- Every connection goes to an address the one connect guard (`guarded_connector`) checked
  (resolved once, the port and every address judged, IPv4-mapped IPv6 by its IPv4): the pool
  dials only the addresses the guard returns, for a literal host too, and nothing is looked up
  again for that connection.
  A kept-alive connection serves only the client that opened it (one per policy: a tenant's
  allow list has its own client, `app/services/outbound.py`).
- TLS is verified against the policy's CA bundle only; nothing is read from the environment
  (no proxy, no `.netrc`, no CA variables); no cookies are kept; redirects are never followed.
- The body is read up to a cap, and gzip and deflate are inflated here a bounded step at a
  time, so a compression bomb stops at the cap in memory and in CPU; a connection whose answer
  was not read to its end is closed, never reused.
- A connect deadline (lookup, connect, TLS, and the wait for a free connection when
  `max_connections` are busy) and a read deadline (from the request's start to the answer's
  head, with its body when that is small; then each further piece of the body) on every
  request; failures come out as the `OutboundError` tree. A caller that bounds the whole call
  itself may leave the first read deadline out (`fetch(read_deadline=False)`: the external
  executor, under the invoker's tool timeout, which is never longer).

`fetch` (an answer read whole: external tools) and `request` (read as the caller goes: web
fetch, the import fetch) take the same steps (`_begin`, `_Exchange`, `outbound_error`).
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx

from app.http.netguard import OutboundPolicy, Resolver, guarded_connector, system_resolver
from app.http.wire import (
    READ_SIZE,
    Connection,
    ConnectionClosedError,
    Head,
    WireError,
    WirePool,
)

USER_AGENT = "toolgate/0.1"
MAX_CONNECTIONS = 200
KEEPALIVE_S = 15.0
# Requests that may be sent again when a kept-alive connection turns out closed before any
# answer (RFC 9110 9.2.2); any other method fails instead of being sent twice.
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class OutboundError(Exception):
    """An outbound request got no usable answer (blocked calls raise `OutboundBlockedError`):

    - OutboundTimeoutError: no connection or no answer in time.
    - OutboundInvalidURLError: the URL cannot be sent.
    - OutboundUnreachableError: the connection failed or the answer broke HTTP.
    """


class OutboundTimeoutError(OutboundError):
    pass


class OutboundInvalidURLError(OutboundError):
    pass


class OutboundUnreachableError(OutboundError):
    """`reason` names the failure's kind (an exception's type), never its text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class OutboundResponse:
    """A response whose body has not been read yet; `headers` has lower-case names."""

    __slots__ = ("_connection", "_read_s", "_ready", "headers", "status")

    def __init__(self, head: Head, connection: Connection, *, read_s: float) -> None:
        self.status = head.status
        self.headers = head.headers
        self._connection = connection
        self._read_s = read_s
        self._ready: bytes | None = None  # read with the head

    async def read_capped(self, cap: int) -> tuple[bytes, bool]:
        """At most `cap` decoded bytes, and whether there was more."""
        inflater = Inflater.for_encoding(self.headers.get("content-encoding", ""))
        if inflater is None and self._ready is not None:  # the usual answer
            data, self._ready = self._ready, None
            return (data[:cap], True) if len(data) > cap else (data, False)
        chunks: list[bytes] = []
        size = 0
        while (raw := await self._next()) is not None:
            chunk = inflater.inflate(raw, cap + 1 - size) if inflater is not None else raw
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                return b"".join(chunks)[:cap], True
        return b"".join(chunks), False

    async def text_capped(self, cap: int) -> tuple[str, bool]:
        """The capped body decoded with the response's charset (UTF-8 when none or unknown)."""
        data, truncated = await self.read_capped(cap)
        try:
            return data.decode(_charset(self.headers.get("content-type", "")), "replace"), truncated
        except LookupError:  # a codec that is not a text encoding (`hex`, `rot13`, `zlib`)
            return data.decode("utf-8", "replace"), truncated

    async def prefetch(self) -> None:
        """A body of known length up to READ_SIZE read now, under the head's deadline (the
        usual answer: one deadline for the whole exchange instead of two)."""
        length = self.headers.get("content-length")
        if length is not None and "transfer-encoding" not in self.headers:
            if length.isdigit() and 0 < int(length) <= READ_SIZE:
                self._ready = await self._connection.body(READ_SIZE)

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives, content codings left as they came, each piece within the
        read deadline (for a caller that decodes the body itself: the MCP SDK's client)."""
        while (piece := await self._next()) is not None:
            yield piece

    async def _next(self) -> bytes | None:
        """The body's next piece (None at its end), each within the read deadline."""
        if self._ready is not None:
            ready, self._ready = self._ready, None
            return ready
        async with asyncio.timeout(self._read_s):
            return await self._connection.piece()


def _charset(content_type: str) -> str:
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"') or "utf-8"
            try:
                codecs.lookup(charset)
            except LookupError:
                return "utf-8"
            return charset
    return "utf-8"


class OutboundClient:
    """Kept-alive connections per origin under one policy, at most `max_connections` in use at
    once; closed by `aclose` (or `async with`)."""

    def __init__(
        self,
        policy: OutboundPolicy,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        resolver: Resolver = system_resolver,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.policy = policy
        self._read_s = timeout_s
        self._connect_s = connect_timeout_s
        self._connector = guarded_connector(policy, resolver)
        self._max_connections = max_connections
        self._slots: asyncio.Semaphore | None = None  # made on the running loop
        self._pools: dict[str, WirePool] = {}
        self._in_use: dict[str, int] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    def _pool(self, origin: str) -> WirePool:
        pool = self._pools.get(origin)
        if pool is None:
            https = origin.startswith("https:")
            pool = WirePool(
                origin,
                connect=self._connector,
                ssl_context=self.policy.ssl_context() if https else None,
                max_idle=self._max_connections,
            )
            self._pools[origin] = pool
        return pool

    @asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        resend_dropped: bool = False,
    ) -> AsyncIterator[OutboundResponse]:
        """Send one request (never following a redirect) and give its response to read; every
        failure, while sending or while reading, comes out as an `OutboundError`.
        `resend_dropped`: a request of any method that met a pooled connection the server had
        closed before any byte of its answer is sent once more on a fresh one (an idempotent
        method always is)."""
        read_s = self._read_s if timeout_s is None else timeout_s
        exchange = await self._begin(method, url, query, body, headers)
        exchange.resend_dropped = resend_dropped or method in _IDEMPOTENT
        try:
            response = await exchange.head(read_s)
            yield response
        except _FAILURES as exc:
            raise outbound_error(exc) from None
        finally:
            exchange.end(self)

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        cap: int,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        read_deadline: bool = True,
    ) -> Fetched:
        """`request` with the answer read whole (`OutboundResponse.text_capped`): what an
        external tool's call needs, in one step. `read_deadline=False` leaves the answer's
        deadline to the caller, which must bound the call itself (the invoker's tool timeout,
        never longer than this client's); the connect deadline stays."""
        exchange = await self._begin(method, url, (), body, headers)
        try:
            response = await exchange.head(self._read_s, deadline=read_deadline)
            text, truncated = await response.text_capped(cap)
            return Fetched(response.status, response.headers, text, truncated)
        except _FAILURES as exc:
            raise outbound_error(exc) from None
        finally:
            exchange.end(self)

    async def _begin(
        self,
        method: str,
        url: str,
        query: Sequence[tuple[str, str]],
        body: bytes | None,
        headers: dict[str, str] | None,
    ) -> _Exchange:
        """The request checked and a connection slot taken (the caller then sends it and ends
        it, which frees the slot)."""
        if self._closed:
            raise OutboundUnreachableError("ClientClosed")
        origin, target = _target(url, query)
        sent = _headers(headers, body)
        if body is None and method in _WITH_BODY:
            body = b""  # sent with a Content-Length of 0
        await self._take_slot()
        pool = self._pool(origin)  # after the wait: the sweep may have dropped it meanwhile
        self._in_use[origin] = self._in_use.get(origin, 0) + 1
        return _Exchange(pool, origin, method, target, body, sent, self._connect_s)

    async def _take_slot(self) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max_connections)
        if self._slots.locked():  # all busy: waiting for one is part of the connect
            try:
                async with asyncio.timeout(self._connect_s):
                    await self._slots.acquire()
            except TimeoutError:
                raise OutboundTimeoutError("no free connection in time") from None
        else:
            await self._slots.acquire()

    def _done(self, origin: str) -> None:
        assert self._slots is not None
        self._slots.release()
        self._in_use[origin] -= 1
        if self._sweep is None and not self._closed:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(KEEPALIVE_S, self._expire)

    def _expire(self) -> None:
        """Close connections idle for KEEPALIVE_S, and forget origins with none left."""
        self._sweep = None
        idle_since = time.monotonic() - KEEPALIVE_S
        for origin, pool in list(self._pools.items()):
            if pool.expire(idle_since) == 0 and not self._in_use.get(origin):
                del self._pools[origin]
                self._in_use.pop(origin, None)
        if self._pools:
            self._sweep = asyncio.get_running_loop().call_later(KEEPALIVE_S, self._expire)

    async def aclose(self) -> None:
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for pool in self._pools.values():
            await pool.close()
        self._pools.clear()

    async def __aenter__(self) -> OutboundClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@dataclass(slots=True)
class Fetched:
    """A whole answer (`OutboundClient.fetch`): the body decoded, capped at the caller's cap."""

    status: int
    headers: dict[str, str]  # lower-case names
    text: str
    truncated: bool  # the body was longer than the cap


class _Exchange:
    """One request from its slot to its end: sent on a pooled connection, its response, and the
    connection handed back (reused only if the answer was read to its end)."""

    __slots__ = (
        "body",
        "connect_s",
        "connection",
        "headers",
        "method",
        "origin",
        "pool",
        "resend_dropped",
        "response",
        "target",
    )

    def __init__(
        self,
        pool: WirePool,
        origin: str,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        connect_s: float,
    ) -> None:
        self.pool, self.origin = pool, origin
        self.method, self.target, self.body, self.headers = method, target, body, headers
        self.connect_s = connect_s
        self.connection: Connection | None = None
        self.resend_dropped = method in _IDEMPOTENT  # sent again on a dropped kept-alive

    async def head(self, read_s: float, *, deadline: bool = True) -> OutboundResponse:
        """`send` within `read_s` (from sending to the head, and a small body); without the
        `deadline`, the caller bounds it."""
        if not deadline:
            return await self.send(read_s)
        async with asyncio.timeout(read_s):
            return await self.send(read_s)

    async def send(self, read_s: float) -> OutboundResponse:
        """Send it and read the answer's head (and a small body), unbounded here."""
        self.connection, head = await self.pool.exchange(
            self.method,
            self.target,
            self.body,
            self.headers,
            retry_dropped=self.resend_dropped,
            connect_timeout_s=self.connect_s,
        )
        response = OutboundResponse(head, self.connection, read_s=read_s)
        await response.prefetch()
        return response

    def end(self, client: OutboundClient) -> None:
        """The connection back to its pool: kept only if its answer was read to the end."""
        if self.connection is not None:
            self.pool.release(self.connection, not client._closed)
        client._done(self.origin)


# What an exchange may raise that `outbound_error` turns into an `OutboundError`.
_FAILURES = (TimeoutError, zlib.error, WireError, OSError)


def outbound_error(exc: BaseException) -> OutboundError:
    """The `OutboundError` for a failure of an exchange (one of `_FAILURES`)."""
    if isinstance(exc, TimeoutError):  # an OSError too: first
        return OutboundTimeoutError("no answer in time")
    if isinstance(exc, zlib.error):
        return OutboundUnreachableError("DecodingError")
    if isinstance(exc, WireError):
        return OutboundUnreachableError(_reason(exc))
    return OutboundUnreachableError(type(exc).__name__)  # the lookup failed (UnresolvableError)


def _reason(exc: WireError) -> str:
    """A failure's kind for the caller: the connection's own error where there is one."""
    cause = exc.__cause__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return "CertificateVerificationError"
    if isinstance(cause, OSError):
        return type(cause).__name__
    if isinstance(exc, ConnectionClosedError):
        return "ServerDisconnectedError"
    return "MalformedResponseError"


def _headers(given: dict[str, str] | None, body: bytes | None) -> dict[str, str]:
    """The request's headers: the client's defaults, replaced by the caller's of the same
    name (in any case), and a Content-Type for a body. The head is built and every header
    checked where it is written (`app.http.wire.request_head`)."""
    sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"}
    if body is not None:
        sent["Content-Type"] = "application/json"
    for name, value in (given or {}).items():
        lower = name.lower()
        for default in [key for key in sent if key.lower() == lower]:
            del sent[default]
        sent[name] = value
    return sent


def request_url(url: str, query: Sequence[tuple[str, str]] = ()) -> str:
    """`url` as sent: normalized as httpx writes it (IDNA host, percent-encoded path and query,
    percent escapes such as `%2E` kept as they are), without its fragment, with the pairs of
    `query` appended to its own query."""
    origin, target = _target(url, query)
    return origin + target


def _target(url: str, query: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(origin, target) of `url`, the pairs of `query` appended to its own query."""
    origin, target = _split(url)
    if query:
        target += ("&" if "?" in target else "?") + urlencode(query)
    return origin, target


def _split(url: str) -> tuple[str, str]:
    """(origin, target): `scheme://host[:port]` and the path with its query, normalized as
    httpx normalizes them. The part before the query is normalized once per distinct value
    (a tool's URL; its query changes with the arguments), and a query already in normal form
    (printable ASCII but space, `"`, `#`, `<` and `>`: what httpx leaves as it is) is kept
    as it is (docs/performance.md, "External tools on the lean client")."""
    base, mark, query = url.partition("?")
    if mark and "#" not in url and not query.rstrip(_QUERY_KEPT):
        origin, path = _parts(base)
        return origin, f"{path}?{query}"
    return _parts(url)


@functools.lru_cache(maxsize=4096)
def _parts(url: str) -> tuple[str, str]:
    try:
        normalized = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise OutboundInvalidURLError(str(exc)) from None
    if normalized.scheme not in ("http", "https") or not normalized.host:
        raise OutboundInvalidURLError("not an absolute http or https URL")
    if normalized.port is not None and not 0 < normalized.port < 65536:
        raise OutboundInvalidURLError(f"not a port: {normalized.port}")
    if normalized.userinfo:  # a written URL may not hold them; one a model wrote is not sent
        raise OutboundInvalidURLError("credentials in the URL (user:password@) are never sent")
    origin = f"{normalized.scheme}://{normalized.netloc.decode('ascii')}"
    return origin, normalized.raw_path.decode("ascii")


# What httpx leaves as it is in a query (its QUERY_SAFE with the unreserved characters).
_QUERY_KEPT = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>')


class Inflater:
    """gzip or deflate, inflated at most `limit` bytes per call (zlib's `max_length`)."""

    def __init__(self, wbits: int, *, raw_fallback: bool) -> None:
        self._inflate = zlib.decompressobj(wbits)
        self._raw_fallback = raw_fallback  # `deflate` is sent with or without zlib's header
        self._started = False

    @classmethod
    def for_encoding(cls, encoding: str) -> Inflater | None:
        encoding = encoding.strip().lower()
        if encoding in ("gzip", "x-gzip"):
            return cls(16 + zlib.MAX_WBITS, raw_fallback=False)
        if encoding == "deflate":
            return cls(zlib.MAX_WBITS, raw_fallback=True)
        return None  # identity, or a coding not asked for: passed on as it came

    def inflate(self, data: bytes, limit: int) -> bytes:
        try:
            out = self._inflate.decompress(data, max(limit, 1))
        except zlib.error:
            if not self._raw_fallback or self._started:
                raise
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            self._raw_fallback = False
            out = self._inflate.decompress(data, max(limit, 1))
        self._started = True
        return out
