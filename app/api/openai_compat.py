"""`/v1/chat/completions`, `/v1/responses`, `/v1/models`: OpenAI's API over the tenant's tool
loop, so an OpenAI SDK app changes only `base_url` and `api_key` (a tenant key or client token).

Thin over `ChatService` (`app/services/openai_compat.py`, `openai_responses.py` translate);
errors on these routes only are in OpenAI's shape (`{"error": {message, type, param, code}}`),
and a server error says `x-should-retry: false` (an SDK's retry would run the tools again).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException

from app.api.problems import json_path
from app.api.routing import StrictJSONRoute
from app.api.sse import KEEPALIVE
from app.deps import CallerDep, TenantContext
from app.errors import AppError
from app.schemas.openai import (
    CHAT_COMPLETION_EXAMPLES,
    RESPONSES_EXAMPLES,
    ChatCompletionRequest,
    OpenAIError,
    OpenAIRequest,
    ResponsesRequest,
)
from app.services.chat import StartedChat
from app.services.openai_compat import (
    Chunk,
    chat_messages,
    completion,
    completion_chunks,
    model_list,
    openai_error,
    start_chat,
)
from app.services.openai_responses import (
    ResponseEvent,
    response_events,
    response_messages,
    response_object,
)

logger = logging.getLogger(__name__)
_JSON = "application/json"
_ERROR_STATUSES = (400, 401, 403, 404, 408, 413, 422, 429, 502, 503, 504)
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": OpenAIError, "description": "OpenAI's error shape."}
    for status in _ERROR_STATUSES
}


class OpenAIRoute(StrictJSONRoute):
    """A route whose every error, its credential's and its body's included, is answered in
    OpenAI's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def openai_errors(request: Request) -> Response:
            try:
                return await handler(request)
            except AppError as exc:
                errors = exc.errors or []
                param = errors[0].get("path", "").removeprefix("$.") if errors else None
                return _error(exc.status_code, exc.message, param or None, exc.headers)
            except RequestValidationError as exc:
                return _error(400, *_invalid(exc))
            except HTTPException as exc:  # the body's limits (413, 408)
                return _error(exc.status_code, str(exc.detail), None, exc.headers)
            except Exception:
                logger.exception("unexpected error on %s", request.url.path)
                return _error(500, "An unexpected error occurred.")

        return openai_errors


def _error(
    status: int,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    sent = dict(headers or {})
    if status >= 500:
        sent["x-should-retry"] = "false"
    body = orjson.dumps(openai_error(status, message, param))
    return Response(body, status_code=status, media_type=_JSON, headers=sent)


def _invalid(exc: RequestValidationError) -> tuple[str, str | None]:
    """The message and `param` of a body that does not match: of its errors, the one deepest
    in the body (a union's members each report one; the deepest is where it went wrong)."""
    errors = [
        (error, [p for p in error.get("loc", ()) if p != "body" and not _union_tag(p)])
        for error in exc.errors()
    ]
    if not errors:
        return "Invalid request.", None
    first, loc = max(errors, key=lambda found: len(found[1]))
    if first.get("type") == "json_invalid":
        return "The request body is not valid JSON.", None
    where = json_path(loc).removeprefix("$.") if loc else None
    message = f"{first.get('msg', 'Invalid request')}" + (f" (at {where})" if where else "")
    return message, where


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})
_TAG_PREFIXES = ("constrained-", "function-", "lax-or-strict", "json-or-python")


def _union_tag(part: Any) -> bool:
    """A part pydantic adds to a location to say which member of a union failed (`str`,
    `list[...]`): not a field of the request."""
    return isinstance(part, str) and (
        part in _TYPE_NAMES or "[" in part or part.startswith(_TAG_PREFIXES)
    )


router = APIRouter(tags=["openai"], route_class=OpenAIRoute, prefix="/v1")


def _headers(started: StartedChat, body: OpenAIRequest) -> dict[str, str]:
    headers = {"X-Run-ID": started.run_id}
    ignored = body.ignored()
    if ignored:  # accepted, not applied: said, not dropped silently
        headers["X-Toolgate-Ignored"] = ",".join(ignored)
    return headers


def _stream(frames: AsyncIterator[bytes], headers: dict[str, str]) -> StreamingResponse:
    headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(frames, media_type="text/event-stream", headers=headers)


async def _chunk_frames(chunks: AsyncIterator[Chunk]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        if chunk is None:
            yield KEEPALIVE
        elif "error" in chunk:  # the stream ends on an error, without [DONE]
            yield b"data: %b\n\n" % orjson.dumps(chunk)
            return
        else:
            yield b"data: %b\n\n" % orjson.dumps(chunk)
    yield b"data: [DONE]\n\n"


async def _event_frames(events: AsyncIterator[ResponseEvent]) -> AsyncIterator[bytes]:
    async for event in events:
        if event is None:
            yield KEEPALIVE
        else:
            name, data = event
            yield b"event: %b\ndata: %b\n\n" % (name.encode(), orjson.dumps(data))


# One server-sent event: its `data` is JSON (or `[DONE]`), its `event` a Responses event's name.
_EVENT_SCHEMA = {
    "type": "object",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
    "required": ["data"],
}


def _answers(what: str, stream: str) -> dict[int | str, dict[str, Any]]:
    """The routes' documented answers: the JSON one, the stream, OpenAI's errors."""
    content = {"application/json": {}, "text/event-stream": {"schema": _EVENT_SCHEMA}}
    return {
        200: {"description": f"{what}; with `stream: true`, {stream}.", "content": content},
        **ERRORS,
    }


@router.post(
    "/chat/completions",
    responses=_answers(
        "A `ChatCompletion`", "server-sent `chat.completion.chunk`s ending in `data: [DONE]`"
    ),
)
async def chat_completions(
    body: Annotated[ChatCompletionRequest, Body(openapi_examples=CHAT_COMPLETION_EXAMPLES)],
    caller: CallerDep,
) -> Response:
    """OpenAI chat completions: toolgate runs the tenant's tools until the model answers."""
    services = caller.services
    messages = chat_messages(body)
    started = await _start(caller, body, messages)
    headers, model, steps = _headers(started, body), body.model or "default", body.toolgate.steps
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        events = started.events(keepalive_s=services.settings.chat_stream_keepalive_s)
        chunks = completion_chunks(
            events, run_id=started.run_id, model=model, include_usage=include_usage, steps=steps
        )
        return _stream(_chunk_frames(chunks), headers)
    answer = (await started.result()).model_dump(mode="json")
    payload = orjson.dumps(completion(answer, model=model, steps=steps))
    return Response(payload, media_type=_JSON, headers=headers)


@router.post(
    "/responses",
    responses=_answers(
        "A `Response`", "the Responses API's events, ending in `response.completed`"
    ),
)
async def responses(
    body: Annotated[ResponsesRequest, Body(openapi_examples=RESPONSES_EXAMPLES)],
    caller: CallerDep,
) -> Response:
    """OpenAI Responses: `input` and `instructions` (and a kept `previous_response_id`)."""
    services = caller.services
    messages = await response_messages(services.runs, body, tenant_id=caller.id, token=caller.token)
    started = await _start(caller, body, messages)
    headers, model, steps = _headers(started, body), body.model or "default", body.toolgate.steps
    if body.stream:
        events = started.events(keepalive_s=services.settings.chat_stream_keepalive_s)
        shown = response_events(events, body, run_id=started.run_id, model=model, steps=steps)
        return _stream(_event_frames(shown), headers)
    answer = (await started.result()).model_dump(mode="json")
    shown_answer = response_object(
        body, run_id=started.run_id, model=model, status="completed", answer=answer, steps=steps
    )
    return Response(orjson.dumps(shown_answer), media_type=_JSON, headers=headers)


async def _start(
    caller: TenantContext, body: OpenAIRequest, messages: list[dict[str, Any]]
) -> StartedChat:
    services = caller.services
    return await start_chat(
        services.chat,
        services.model_providers,
        body,
        messages,
        tenant_id=caller.id,
        token=caller.token,
    )


@router.get("/models", responses=ERRORS)
async def list_models(caller: CallerDep) -> Response:
    """What `model` may name for this caller: `provider/model`, and the default's models."""
    found = await model_list(
        caller.services.model_providers, tenant_id=caller.id, token=caller.token
    )
    return Response(orjson.dumps(found), media_type=_JSON)


@router.get("/models/{model:path}", responses=ERRORS)
async def get_model(model: str, caller: CallerDep) -> Response:
    """One model of `GET /v1/models`; 404 for a name the caller may not use."""
    found = await model_list(
        caller.services.model_providers, tenant_id=caller.id, token=caller.token
    )
    for item in found["data"]:
        if item["id"] == model:
            return Response(orjson.dumps(item), media_type=_JSON)
    return _error(404, f"The model '{model[:200]}' does not exist or is not available to you.")
