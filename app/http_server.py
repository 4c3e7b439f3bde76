"""The HTTP protocol `python -m app serve` runs uvicorn with: uvicorn's httptools protocol plus
a deadline for every request head, a cap on open connections, and an answer of known length
sent in one write.

uvicorn closes an idle keep-alive connection, but it arms that timer only after a response and
drops it on the first byte received: a connection that sends nothing, or one header line every
few seconds, was held for ever (1,000 such connections held a process's sockets). Here a request
head must be complete within HEADER_TIMEOUT_S of the connection opening, or of the first byte
after a response; and a process keeps at most MAX_CONNECTIONS connections open, answering 503 to
one more at once instead of reading it.

uvicorn writes a response's head as soon as the app starts the response, and its body in a
second write: two sends, and on loopback each costs the receiver's TCP processing too (the
second, 4-5 us of CPU here: 3% of a `/ping`). A head whose body has a known, non-zero length
(every JSON answer) is held until the body's first bytes and goes out with them (`_OneWrite`);
a streamed answer (chunked: server-sent events) and a body-less one are written as uvicorn
writes them.

uvicorn builds the protocol itself (in each worker process), so the values come from the
settings, read from the environment like the app's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.config import get_settings

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 29\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    b"Too many connections; retry.\n"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a request-head deadline and a per-process connection cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.head_timeout_s = settings.header_timeout_s
        self.max_connections = settings.max_connections
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_head = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self.logger.warning("Refused a connection: MAX_CONNECTIONS (%d)", self.max_connections)
            transport.write(_BUSY)
            transport.close()
            return
        self._arm_head_timer()  # the first request's head is due too

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A head begun and not complete in these bytes is due from now (the loop's time of its
        # first byte); one complete in them never needed a timer. Idle between requests, bytes
        # that start no request (blank lines) are due too.
        idle = self.cycle is None or self.cycle.response_complete
        if (self._in_head or idle) and not self.transport.is_closing():
            self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        previous = self.cycle
        super().on_headers_complete()
        if self.cycle is not previous:  # a request to answer (not an upgrade)
            self.cycle.transport = _OneWrite(self.transport, self.cycle)  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        """Start the deadline unless one runs: it counts from the head's first byte (or the
        connection's opening), never from the latest byte."""
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


class _OneWrite:
    """The transport one request's cycle writes its answer to: the response head, when a body of
    known, non-zero length follows (not to a HEAD), held until the body's first write and sent
    with it. Every other write goes through as it comes (a `100 Continue`, a chunked answer's
    head and chunks, a body-less answer's head). A cycle that closes the connection with the
    head still held (the app failed after starting its answer) sends it first, as uvicorn
    would have."""

    __slots__ = ("_cycle", "_head", "_head_seen", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._head_seen = False

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._transport.writelines((head, data))  # one send (uvloop: writev)
            self._head = None
            return
        cycle = self._cycle
        if cycle.response_started and not self._head_seen:  # uvicorn's write of the head
            self._head_seen = True
            if (
                cycle.chunked_encoding is False
                and cycle.expected_content_length > 0
                and cycle.scope["method"] != "HEAD"
            ):
                self._head = data
                return
        self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head)
        self._transport.close()
