"""The HTTP protocol `python -m app serve` runs uvicorn with: uvicorn's httptools protocol plus
a deadline for every request head and a cap on open connections.

uvicorn closes an idle keep-alive connection, but it arms that timer only after a response and
drops it on the first byte received: a connection that sends nothing, or one header line every
few seconds, was held for ever (1,000 such connections held a process's sockets). Here a request
head must be complete within HEADER_TIMEOUT_S of the connection opening, or of the first byte
after a response; and a process keeps at most MAX_CONNECTIONS connections open, answering 503 to
one more at once instead of reading it.

uvicorn builds the protocol itself (in each worker process), so the values come from the
settings, read from the environment like the app's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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
        idle = self.cycle is None or self.cycle.response_complete
        if (self._in_head or idle) and not self.transport.is_closing():
            self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

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
