"""`/mcp`'s use of the SDK's kernel: a request served by `ServerRunner` on a born-ready
`Connection`, as the SDK's stateless transports serve each request, with the connection (and its
runner) kept for the next request that brings the same envelope.

Why kept: `Connection.from_envelope` validates the envelope's client data and builds an
`anyio.Event` on every call, a tenth of a `tools/call`'s own work here (docs/performance.md,
"Tenth round"). A `Connection` is made to serve many requests (the SDK's loop transports run
every request of a client on one); the kernel changes it only on `initialize`, which gets a
connection of its own, closed after it. Nothing of this endpoint writes to a connection's
`state` or pushes onto its `exit_stack`, which are closed when the connection leaves the pool or
the endpoint stops.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import anyio
import orjson
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.runner import ServerRunner, modern_error_data
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from starlette.requests import Request

from app.api.mcp_progress import ProgressStream

KEPT_ENVELOPES = 64  # connections kept, one per protocol version and client envelope
_EnvelopeKey = tuple[str, bytes, bytes]


def _envelope_key(version: str, client_info: Any, capabilities: Any) -> _EnvelopeKey | None:
    """The envelope as a key: its values' canonical JSON (None: not one to keep)."""
    try:
        info = orjson.dumps(client_info, option=orjson.OPT_SORT_KEYS)
        caps = orjson.dumps(capabilities, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    if len(info) + len(caps) > 4096:  # a key is held as long as its connection
        return None
    return version, info, caps


class KernelRunners:
    """The SDK's kernel for the endpoint's requests: a `ServerRunner` per envelope (protocol
    version, client info, client capabilities), the least recently used closed past
    `KEPT_ENVELOPES`."""

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._runners: OrderedDict[_EnvelopeKey, ServerRunner[Any]] = OrderedDict()

    async def member(
        self,
        exchange: Exchange,
        method: str,
        params: Mapping[str, Any] | None,
        envelope: tuple[str, Any, Any],
    ) -> dict[str, Any]:
        """The JSON-RPC `result` (or `error`) member of the answer to one request, as
        `serve_one` computes it; `modern_error_data` maps a failure as the SDK's modern
        entries do."""
        key = None if method == "initialize" else _envelope_key(*envelope)
        runner = self._runners.get(key) if key is not None else None
        if runner is None:
            runner = ServerRunner(self._server, Connection.from_envelope(*envelope), {})
            if key is not None:
                await self._keep(key, runner)
        else:
            self._runners.move_to_end(key)  # type: ignore[arg-type]  # key is not None here
        try:
            result = await runner.on_request(exchange, method, params)
        except Exception as exc:  # the SDK's boundary: MCPError as is, the rest INTERNAL_ERROR
            error = modern_error_data(exc)
            return {"error": error.model_dump(by_alias=True, mode="json", exclude_none=True)}
        finally:
            if key is None:  # a connection of its own (`initialize`): closed with the request
                await runner.connection.exit_stack.aclose()
        return {"result": result}

    async def _keep(self, key: _EnvelopeKey, runner: ServerRunner[Any]) -> None:
        self._runners[key] = runner
        while len(self._runners) > KEPT_ENVELOPES:
            _, evicted = self._runners.popitem(last=False)
            await evicted.connection.exit_stack.aclose()

    def __len__(self) -> int:
        return len(self._runners)

    async def close(self) -> None:
        """Close every kept connection (the endpoint stops)."""
        runners, self._runners = list(self._runners.values()), OrderedDict()
        for runner in runners:
            await runner.connection.exit_stack.aclose()


class Exchange:
    """The SDK's `DispatchContext` for one request answered here: no back-channel (a stateless
    endpoint cannot send its client a request), notifications to the request's SSE answer
    when it has one, progress only for the token it carried."""

    __slots__ = ("_cancel", "progress_token", "request", "request_id", "stream")

    can_send_request = False

    def __init__(self, request: Request, request_id: Any) -> None:
        self.request = request
        self.request_id = request_id
        self.progress_token: str | int | None = None
        self.stream: ProgressStream | None = None
        self._cancel: anyio.Event | None = None

    @property
    def transport(self) -> TransportContext:
        headers = self.request.headers
        return TransportContext(kind="streamable-http", can_send_request=False, headers=headers)

    @property
    def message_metadata(self) -> ServerMessageMetadata:
        return ServerMessageMetadata(request_context=self.request)

    @property
    def cancel_requested(self) -> anyio.Event:
        if self._cancel is None:
            self._cancel = anyio.Event()
        return self._cancel

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        if self.stream is not None:
            await self.stream.notify(method, dict(params) if params is not None else None)

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)
