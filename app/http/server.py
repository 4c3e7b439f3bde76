"""The HTTP protocol `python -m app serve` runs uvicorn with: uvicorn's httptools protocol (named
by uvicorn's `http` option, its hook for a protocol class) plus a deadline for every request
head and a fair connection cap.

uvicorn closes an idle keep-alive connection, but it arms that timer only after a response and
drops it on the first byte received: a connection that sends nothing, or one header line every
few seconds, was held for ever (1,000 such connections held a process's sockets). Here a request
head must be complete within HEADER_TIMEOUT_S of the connection opening, or of the first byte
after a response.

The cap: a process keeps at most MAX_CONNECTIONS connections, and one client address at most
MAX_CONNECTIONS_PER_CLIENT. A new connection past either cap first closes an idle keep-alive
connection (the oldest idle: of that address for its own cap, of any for the total), so clients
that hold connections idle cannot lock others out (1,000 idle connections held every other
client at 503 for the 75 s keep-alive). Only when every connection is busy is one more refused
with a 503, at once, unread; up to PROBE_CONNECTIONS more are still let in for one request each,
answered only for /healthz and /readyz, so an orchestrator's probes keep their answers.

uvicorn builds the protocol itself (in each worker process), so the values come from the
settings, read from the environment like the app's own.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import Counter
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.config import get_settings

logger = logging.getLogger("app.http")

PROBE_CONNECTIONS = 16  # past MAX_CONNECTIONS, for health probes only
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 29\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    b"Too many connections; retry.\n"
)


class _Connections:
    """One server's connections as the cap sees them: which are idle between requests, oldest
    first (a dict keeps the order they became idle in), in all and by client address, and how
    many each address holds."""

    def __init__(self) -> None:
        self.idle: dict[GuardedHttpProtocol, None] = {}
        self.idle_by_client: dict[str, dict[GuardedHttpProtocol, None]] = {}
        self.per_client: Counter[str] = Counter()
        self.closing = 0  # closed here, still in the server's set until their loss is seen

    def now_idle(self, protocol: GuardedHttpProtocol) -> None:
        self.idle[protocol] = None
        self.idle_by_client.setdefault(protocol.client_host or "", {})[protocol] = None

    def busy(self, protocol: GuardedHttpProtocol) -> None:
        if self.idle.pop(protocol, False) is None:
            client = protocol.client_host or ""
            mine = self.idle_by_client[client]
            del mine[protocol]
            if not mine:
                del self.idle_by_client[client]

    def oldest_idle(self, client: str | None = None) -> GuardedHttpProtocol | None:
        idle = self.idle if client is None else self.idle_by_client.get(client, {})
        return next(iter(idle), None)


_SERVERS: weakref.WeakKeyDictionary[ServerState, _Connections] = weakref.WeakKeyDictionary()


def _connections_of(state: ServerState) -> _Connections:
    connections = _SERVERS.get(state)
    if connections is None:
        connections = _SERVERS[state] = _Connections()
    return connections


class GuardedHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a request-head deadline and a fair connection cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.head_timeout_s = settings.header_timeout_s
        self.max_connections = settings.max_connections
        self.max_per_client = settings.max_connections_per_client
        self.client_host: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_head = False
        self._seen = _connections_of(self.server_state)
        self._closed_here = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client_host = self.client[0] if self.client else None
        seen = self._seen
        seen.per_client[self.client_host or ""] += 1
        if not self._admitted(seen):
            transport.write(_BUSY)
            self.close_here()
            return
        self._arm_head_timer()  # the first request's head is due too

    def _admitted(self, seen: _Connections) -> bool:
        """Room for this connection: an idle one closed for it where a cap is reached."""
        client = self.client_host or ""
        if client and seen.per_client[client] > self.max_per_client:
            if not _close_idle(seen.oldest_idle(client)):
                logger.warning(
                    "Refused a connection: MAX_CONNECTIONS_PER_CLIENT (%d) from one address, "
                    "none of them idle",
                    self.max_per_client,
                )
                return False
        if len(self.connections) - seen.closing > self.max_connections:
            if not _close_idle(seen.oldest_idle()):
                if len(self.connections) > self.max_connections + PROBE_CONNECTIONS:
                    logger.warning(
                        "Refused a connection: MAX_CONNECTIONS (%d), none of them idle",
                        self.max_connections,
                    )
                    return False
                self.app = _ProbesOnly(self.app)  # this connection: one probe, then closed
        return True

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
        self._seen.busy(self)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle, kept alive for the next request
            self._seen.now_idle(self)

    def close_here(self) -> None:
        """Close the connection, counted as gone at once (its loss is seen later)."""
        self._seen.busy(self)
        if not self._closed_here:
            self._closed_here = True
            self._seen.closing += 1
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        seen = self._seen
        seen.busy(self)
        if self._closed_here:
            seen.closing -= 1
        client = self.client_host or ""
        seen.per_client[client] -= 1
        if seen.per_client[client] <= 0:
            del seen.per_client[client]
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


def _close_idle(protocol: GuardedHttpProtocol | None) -> bool:
    """Close an idle keep-alive connection (HTTP lets either side close one between requests;
    its client opens another); False when there is none."""
    if protocol is None:
        return False
    protocol.close_here()
    return True


class _ProbesOnly:
    """The app for a connection let in past MAX_CONNECTIONS: /healthz and /readyz answered,
    anything else 503, and the connection closed after its one answer."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"connection", b"close")]
                message = {**message, "headers": headers}
            await send(message)

        if scope["path"] in PROBE_PATHS:
            await self._app(scope, receive, closing)
            return
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"29"),
            (b"retry-after", b"1"),
        ]
        await closing({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": b"Too many connections; retry.\n"})
