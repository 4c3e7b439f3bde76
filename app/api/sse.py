"""Server-sent events: chat events framed for `text/event-stream`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import orjson
from fastapi.responses import StreamingResponse

from app.services.chat import ChatEvent

KEEPALIVE = b": keep-alive\n\n"
EVENT_NAMES = (
    "mcp_server_skipped",
    "iteration",
    "message.delta",
    "tool_call",
    "tool_progress",
    "tool_result",
    "approval_required",
    "done",
    "error",
)

# The OpenAPI description of the stream: one server-sent event whose `data` is JSON.
STREAM_DOC = {
    "description": "With `stream: true` or `Accept: text/event-stream`: server-sent events "
    "`mcp_server_skipped` (first, one per MCP server that could not be reached), `iteration`, "
    "`message.delta`, `tool_call`, `tool_progress` (a long tool's report: id, message, "
    "fraction), `tool_result`, `approval_required` (the calls waiting for "
    "a person), then `done` (the same body as without "
    "streaming) or `error` (the same problem body).",
    "content": {
        "text/event-stream": {
            "schema": {
                "type": "object",
                "properties": {
                    "event": {"type": "string", "enum": list(EVENT_NAMES)},
                    "data": {"type": "string", "contentMediaType": "application/json"},
                },
                "required": ["event", "data"],
            }
        }
    },
}


def frame(event: ChatEvent) -> bytes:
    """One event as it goes on the wire; None is a keep-alive comment."""
    if event is None:
        return KEEPALIVE
    name, data = event
    return b"event: %b\ndata: %b\n\n" % (name.encode(), orjson.dumps(data))


async def framed(events: AsyncGenerator[ChatEvent, None]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield frame(event)
    finally:
        # Closing the source cancels the run when the client leaves mid-stream.
        await events.aclose()


def event_stream(events: AsyncGenerator[ChatEvent, None], *, run_id: str) -> StreamingResponse:
    return StreamingResponse(
        framed(events),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Run-ID": run_id},
    )


INVOKE_STREAM_DOC = {
    "description": "With `Accept: text/event-stream`: server-sent events `tool_progress` "
    "(`message`, `fraction` from 0 to 1 or null) as a long tool reports, then `done` (the same "
    "body as without streaming) or `error` (a problem body).",
    "content": {"text/event-stream": STREAM_DOC["content"]["text/event-stream"]},  # type: ignore[index]
}
