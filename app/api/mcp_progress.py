"""`/mcp` `tools/call` with progress: a client that sent a `progressToken` (and accepts
`text/event-stream`, as streamable HTTP clients do) gets the tool's progress reports as
`notifications/progress` messages on an SSE response, then the call's answer on the same stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as mcp_types
import orjson
from starlette.types import Scope, Send

from app.errors import AppError

REQUEST_CANCELLED = -32800
# What a progress report looks like here: app/tools/progress.Progress, read by attribute (the
# api package does not import app/tools).
ProgressReport = Any
Answer = Callable[[Callable[[ProgressReport], Awaitable[None]]], Awaitable[dict[str, Any]]]


def progress_token(params: mcp_types.CallToolRequestParams, scope: Scope) -> str | int | None:
    """The call's progress token, when its client can read an SSE answer; else None."""
    token = (params.meta or {}).get("progress_token")
    if not isinstance(token, str | int) or isinstance(token, bool):
        return None
    accept = dict(scope["headers"]).get(b"accept", b"")
    return token if b"text/event-stream" in accept.lower() else None


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"


async def answer_with_progress(
    send: Send, request_id: str | int, token: str | int, answer: Answer
) -> bool:
    """Run `answer` (which takes a progress callback and gives the JSON-RPC `result` or
    `error` member), streaming each report as `notifications/progress` (`progress`: the
    fraction with `total` 1 when the tool gives one, else the report's number)."""
    started, finished, count = False, False, 0

    async def start() -> None:
        nonlocal started
        if not started:
            started = True
            headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def report(step: ProgressReport) -> None:
        nonlocal count
        if finished:  # a server's notification that arrives after its answer: too late
            return
        count += 1
        params: dict[str, Any] = {"progressToken": token, "progress": count}
        if step.fraction is not None:
            params |= {"progress": step.fraction, "total": 1.0}
        if step.message:
            params["message"] = step.message
        await start()
        notification = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        await send({"type": "http.response.body", "body": _event(notification), "more_body": True})

    try:
        member = await answer(report)
    except asyncio.CancelledError:
        if not started:
            raise  # the endpoint answers a cancelled request itself
        member = {"error": {"code": REQUEST_CANCELLED, "message": "Request cancelled"}}
    except AppError as exc:  # never expected here: the handler turns these into results
        member = {"error": {"code": mcp_types.INTERNAL_ERROR, "message": exc.message}}
    finished = True
    await start()
    final = _event({"jsonrpc": "2.0", "id": request_id, **member})
    with contextlib.suppress(OSError):  # a client that already left
        await send({"type": "http.response.body", "body": final, "more_body": False})
    return True
