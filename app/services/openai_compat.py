"""OpenAI's chat-completions API over `ChatService`: a request becomes a `ChatRequest` (the same
selection, client-token filters, context contract, approvals, limits and run record as
`POST /chat`), and the chat's answer or events become a `ChatCompletion` or its chunks.

What toolgate answers that OpenAI has no word for (the run, its tool steps, calls waiting for a
person's approval) is in a `toolgate` object: always when the chat stopped for an approval (the
caller needs the pending calls and the conversation to continue), otherwise only when asked
(`toolgate.steps`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from pydantic import ValidationError

from app.errors import BadRequestError, ForbiddenError, UnprocessableError, field_error
from app.schemas.chat import ChatRequest
from app.schemas.openai import ChatCompletionRequest, OpenAIRequest
from app.services.chat import ChatEvent, ChatService, StartedChat
from app.services.client_tokens import ClientToken
from app.services.model_providers import ModelProviderService

# OpenAI's error `type` (and `code`) for each status a route answers with.
_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("not_found_error", None),
    408: ("invalid_request_error", "timeout"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}
STEP_EVENTS = frozenset(
    {"mcp_server_skipped", "tool_call", "tool_progress", "tool_result", "approval_required"}
)
# One streamed chunk, or None for a keep-alive comment.
Chunk = dict[str, Any] | None


def openai_error(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error body for an answer of `status`."""
    kind, code = _ERROR_TYPES.get(status, ("server_error" if status >= 500 else "api_error", None))
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def problem_as_openai(problem: dict[str, Any]) -> dict[str, Any]:
    """A problem body (RFC 9457, as a stream's `error` event carries) as OpenAI's error."""
    errors = problem.get("errors") or []
    param = errors[0].get("path", "").removeprefix("$.") if errors else None
    detail = str(problem.get("detail", "error"))
    if errors:
        detail += " " + "; ".join(f"{e.get('path')}: {e.get('message')}" for e in errors)
    return openai_error(int(problem.get("status", 500)), detail, param or None)


def _refuse_client_tools(body: OpenAIRequest) -> None:
    if body.tools:
        raise BadRequestError(
            "toolgate runs the tenant's tools itself: client-side `tools` are not accepted "
            "(select the tenant's with `toolgate.tool_ids`, `toolgate.tags` or `metadata`).",
            errors=[field_error("$.tools", "must be absent or empty")],
        )


def _listed(value: str | None) -> list[str] | None:
    return [item.strip() for item in value.split(",") if item.strip()] if value else None


async def start_chat(
    chat: ChatService,
    providers: ModelProviderService,
    body: OpenAIRequest,
    messages: list[dict[str, Any]],
    *,
    tenant_id: str,
    token: ClientToken | None,
) -> StartedChat:
    """The chat an OpenAI request asks for, started (every 4xx raised here, as on `/chat`)."""
    _refuse_client_tools(body)
    options, metadata = body.toolgate, body.metadata or {}
    provider, model = None, None
    if body.model is not None:
        provider, model = await providers.split_model_name(body.model, tenant_id=tenant_id)
    none = body.tool_choice == "none"
    request: dict[str, Any] = {
        "messages": messages,
        "context_arguments": options.context_arguments,
        "tool_ids": [] if none else options.tool_ids or _listed(metadata.get("tool_ids")),
        "tags": None if none else options.tags or _listed(metadata.get("tags")),
        "mcp_servers": None if none else options.mcp_servers,
        "provider": provider,
        "model": model,
        "max_iterations": options.max_iterations,
        "category_hints": options.category_hints,
        "approvals": [decision.model_dump(exclude_none=True) for decision in options.approvals],
    }
    if body.parallel_tool_calls is not None:
        request["parallel_tool_calls"] = body.parallel_tool_calls
    try:
        checked = ChatRequest.model_validate({k: v for k, v in request.items() if v is not None})
    except ValidationError as exc:  # what only /chat's own rules refuse (a model name's length)
        problems = [
            field_error("$." + ".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()
        ]
        raise UnprocessableError("The request cannot be run as given.", errors=problems) from None
    return await chat.start(checked, tenant_id=tenant_id, token=token)


def chat_messages(body: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The request's messages as `/chat` takes them (OpenAI's own extras left out)."""
    kept = {"role", "content", "name", "tool_calls", "tool_call_id"}
    return [m.model_dump(include=kept, exclude_none=True) for m in body.messages]


def finish_reason(answer: dict[str, Any]) -> str:
    """OpenAI's finish reason for a chat's answer (`/chat`'s `ChatResponse`, as JSON)."""
    if answer.get("stop_reason") == "token_budget":
        return "length"
    finish = answer.get("finish_reason") or "stop"
    return {
        "length": "length",
        "content_filter": "content_filter",
        "refusal": "content_filter",
    }.get(finish, "stop")


def extension(answer: dict[str, Any], *, steps: bool) -> dict[str, Any]:
    """The `toolgate` object of an answer: the run and, with `steps`, what it did."""
    shown: dict[str, Any] = {"run_id": answer["run_id"], "stop_reason": answer["stop_reason"]}
    if answer["stop_reason"] == "approval_required":  # what the caller must send back
        shown["pending_approvals"] = answer["pending_approvals"]
        shown["messages"] = answer["messages"]
    if steps:
        for key in ("iterations", "tool_calls", "messages", "skipped_mcp_servers", "usage"):
            shown[key] = answer[key]
    return shown


def usage(answer: dict[str, Any]) -> dict[str, Any]:
    used = answer["usage"]
    return {
        "prompt_tokens": used["prompt_tokens"],
        "completion_tokens": used["completion_tokens"],
        "total_tokens": used["total_tokens"],
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def completion_id(run_id: str) -> str:
    return f"chatcmpl-{run_id}"


def completion(answer: dict[str, Any], *, model: str, steps: bool) -> dict[str, Any]:
    """A `ChatCompletion` of the chat's answer; `toolgate` as `extension` says."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": answer["message"].get("content") or "",
        "refusal": None,
        "annotations": [],
    }
    body = {
        "id": completion_id(answer["run_id"]),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(answer),
            }
        ],
        "usage": usage(answer),
        "system_fingerprint": None,
        "service_tier": "default",
    }
    if steps or answer["stop_reason"] == "approval_required":
        body["toolgate"] = extension(answer, steps=steps)
    return body


def _chunk_head(run_id: str, model: str, include_usage: bool) -> dict[str, Any]:
    """What every chunk of one stream says first."""
    head: dict[str, Any] = {"id": completion_id(run_id), "object": "chat.completion.chunk"}
    head |= {"created": int(time.time()), "model": model, "system_fingerprint": None}
    return {**head, "usage": None} if include_usage else head


async def completion_chunks(
    events: AsyncGenerator[ChatEvent, None],
    *,
    run_id: str,
    model: str,
    include_usage: bool,
    steps: bool,
) -> AsyncIterator[Chunk]:
    """The chat's events as `chat.completion.chunk`s: the content as it streams (a blank line
    between turns), a last chunk with the finish reason, the usage chunk if asked; an error
    ends the stream with OpenAI's error object. Tool steps: chunks without choices whose
    `toolgate` names the event, with `steps` only."""
    head = _chunk_head(run_id, model, include_usage)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice]}

    yield chunk({"role": "assistant", "content": ""})
    written, turn_break = False, False
    try:
        async for event in events:
            if event is None:
                yield None
                continue
            name, data = event
            if name == "iteration":
                turn_break = written
            elif name == "message.delta" and data.get("content"):
                text = ("\n\n" if turn_break else "") + data["content"]
                written, turn_break = True, False
                yield chunk({"content": text})
            elif name == "done":
                last = chunk({}, finish_reason(data))
                if steps or data["stop_reason"] == "approval_required":
                    last["toolgate"] = extension(data, steps=steps)
                yield last
                if include_usage:
                    yield {**head, "choices": [], "usage": usage(data)}
                return
            elif name == "error":
                yield problem_as_openai(data)
                return
            elif steps and name in STEP_EVENTS:
                yield {**head, "choices": [], "toolgate": {"event": name, "data": data}}
    finally:
        await events.aclose()  # a client that left cancels the run


async def model_list(
    providers: ModelProviderService, *, tenant_id: str, token: ClientToken | None
) -> dict[str, Any]:
    """`GET /v1/models`: what `model` may name, for this caller (a client token's limits)."""
    named = await providers.model_names(tenant_id=tenant_id)
    data = []
    seen: set[str] = set()
    for provider, model, name in named:
        if name in seen or (token is not None and token.refuses_model(provider, model)):
            continue
        seen.add(name)
        data.append(
            {"id": name, "object": "model", "created": 0, "owned_by": provider or "toolgate"}
        )
    return {"object": "list", "data": data}


def refuse_for_token(token: ClientToken | None, what: str) -> None:
    if token is not None:
        raise ForbiddenError(f"{what} is not available with a client token; use the tenant key.")
