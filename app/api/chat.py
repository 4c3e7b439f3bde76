"""POST /chat: the tool-calling loop for a tenant's conversation, answered whole or streamed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from app.api.problems import app_error_body, problem_body
from app.api.routing import StrictJSONRoute
from app.deps import TenantDep
from app.errors import AppError
from app.schemas.chat import ChatRequest, ChatResponse
from app.schemas.problems import problem_responses
from app.services.chat import new_run_id

logger = logging.getLogger(__name__)
router = APIRouter(tags=["chat"], route_class=StrictJSONRoute)

_STREAM_DOC = {
    "description": "With `stream: true` or `Accept: text/event-stream`: server-sent events "
    "`iteration`, `message.delta`, `tool_call`, `tool_result`, then `done` (the same body as "
    "without streaming) or `error` (the same problem body).",
    "content": {
        "text/event-stream": {
            "schema": {  # one server-sent event; `data` is JSON
                "type": "object",
                "properties": {
                    "event": {
                        "type": "string",
                        "enum": [
                            "iteration",
                            "message.delta",
                            "tool_call",
                            "tool_result",
                            "done",
                            "error",
                        ],
                    },
                    "data": {"type": "string", "contentMediaType": "application/json"},
                },
                "required": ["event", "data"],
            }
        }
    },
}


@router.post(
    "/chat",
    response_model=ChatResponse,
    responses={
        **problem_responses(400, 401, 403, 413, 422, 429, 502, 503, 504),
        200: _STREAM_DOC,
    },
)
async def chat(body: ChatRequest, tenant: TenantDep, request: Request, response: Response) -> Any:
    """Run the model with the tenant's tools until it answers; returns every step taken."""
    services = tenant.services
    services.limits.chats.check(tenant.id)  # 429 before any work
    release = services.limits.concurrent_chats.acquire(tenant.id)
    streaming = False  # once a stream owns the slot, the stream releases it
    try:
        service = services.chat
        prepared = await service.prepare(body, tenant_id=tenant.id)  # 4xx/503 before any stream
        run_id = new_run_id()
        if body.stream or "text/event-stream" in request.headers.get("accept", ""):
            run = functools.partial(service.run, prepared, tenant_id=tenant.id, run_id=run_id)
            events = chat_events(
                run, keepalive_s=services.settings.chat_stream_keepalive_s, release=release
            )
            # The stream releases the slot when it ends; if the server drops the response before
            # it ever starts (the client left at once), collecting the generator releases it.
            weakref.finalize(events, release)
            streaming = True
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={
                    "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no",
                    "X-Run-ID": run_id,
                },
            )
        response.headers["X-Run-ID"] = run_id
        # A dict: FastAPI validates it against ChatResponse once while serializing.
        return await service.run(prepared, tenant_id=tenant.id, run_id=run_id)
    finally:
        if not streaming:
            release()


def _event(name: str, data: Any) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (name.encode(), orjson.dumps(data))


async def chat_events(
    run_chat: Callable[..., Awaitable[dict[str, Any]]],
    *,
    keepalive_s: float,
    release: Callable[[], None] = lambda: None,
) -> AsyncIterator[bytes]:
    """The run as server-sent events. If the client goes away, the run is cancelled.
    `release` frees the tenant's chat slot once the run has ended, however it ended."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def emit(name: str, data: dict[str, Any]) -> None:
        await queue.put(_event(name, data))

    async def run() -> None:
        try:
            result = await run_chat(events=emit)
            done = ChatResponse.model_validate(result).model_dump(mode="json")
            await queue.put(_event("done", done))
        except AppError as exc:
            await queue.put(_event("error", app_error_body(exc)))
        except Exception:
            logger.exception("chat stream failed")
            await queue.put(_event("error", problem_body(500, "An unexpected error occurred.")))
        finally:
            await queue.put(None)

    task = asyncio.create_task(run())
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), keepalive_s)
            except TimeoutError:
                yield b": keep-alive\n\n"  # so proxies do not cut a stream waiting on a tool
                continue
            if item is None:
                return
            yield item
    finally:
        try:
            if not task.done():  # the client disconnected: cancel the model call and tools
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            release()
