"""`/mcp` `tools/call` with progress: a client that sent a `progressToken` (and accepts
`text/event-stream`, as streamable HTTP clients do) gets the tool's progress reports as
`notifications/progress` messages on an SSE response, then the call's answer on the same stream
(the SDK's own transports do the same when they stream).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from starlette.types import Scope, Send


def streamed_progress_token(params: Any, scope: Scope) -> str | int | None:
    """The call's progress token, when its client can read an SSE answer; else None."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if not isinstance(token, str | int) or isinstance(token, bool):
        return None
    accept = dict(scope["headers"]).get(b"accept", b"")
    return token if b"text/event-stream" in accept.lower() else None


def progress_params(token: str | int, count: int, step: Any) -> dict[str, Any]:
    """`notifications/progress` params for a tool's `count`-th report (`step`: an
    `app/tools/progress.Progress`, read by attribute): the fraction with `total` 1 when the
    tool gives one, else the report's number."""
    params: dict[str, Any] = {"progressToken": token, "progress": count}
    if step.fraction is not None:
        params |= {"progress": step.fraction, "total": 1.0}
    if step.message:
        params["message"] = step.message
    return params


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"


class ProgressStream:
    """One request's SSE answer: its notifications as they come (the first starts the
    stream), then its answer, which ends it. Nothing is sent after the answer."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.finished = False

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        if self.finished:  # a server's notification that arrives after its answer: too late
            return
        await self._start()
        notification: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            notification["params"] = params
        body = _event(notification)
        await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def finish(self, answer: dict[str, Any]) -> None:
        self.finished = True
        await self._start()
        with contextlib.suppress(OSError):  # a client that already left
            await self._send({"type": "http.response.body", "body": _event(answer)})

    async def _start(self) -> None:
        if not self.started:
            self.started = True
            headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
            await self._send({"type": "http.response.start", "status": 200, "headers": headers})
