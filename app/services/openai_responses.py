"""OpenAI's Responses API over `ChatService`: `input` and `instructions` become the chat's
messages (after the conversation a previous response kept, with `previous_response_id`), and
the chat's answer or events become a `Response` or its streaming events, as the API names them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from app.errors import BadRequestError, UnprocessableError, field_error
from app.schemas.openai import InputMessage, InputText, ResponsesRequest
from app.services.chat import ChatEvent
from app.services.client_tokens import ClientToken
from app.services.openai_compat import STEP_EVENTS, extension, problem_as_openai, refuse_for_token
from app.services.runs import RunService

RESPONSE_PREFIX = "resp_"
# One server-sent event (name, data), or None for a keep-alive comment.
ResponseEvent = tuple[str, dict[str, Any]] | None


def response_id(run_id: str) -> str:
    return f"{RESPONSE_PREFIX}{run_id}"


async def response_messages(
    runs: RunService, body: ResponsesRequest, *, tenant_id: str, token: ClientToken | None
) -> list[dict[str, Any]]:
    """The chat's messages: the instructions, a previous response's conversation, the input."""
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if body.previous_response_id is not None:
        messages += await _previous(runs, body.previous_response_id, tenant_id, token)
    if isinstance(body.input, str):
        messages.append({"role": "user", "content": body.input})
    else:
        messages += [_message(item) for item in body.input]
    return messages


async def _previous(
    runs: RunService, previous: str, tenant_id: str, token: ClientToken | None
) -> list[dict[str, Any]]:
    refuse_for_token(token, "previous_response_id")
    if not previous.startswith(RESPONSE_PREFIX):
        raise BadRequestError(
            "previous_response_id names a response of toolgate (resp_...).",
            errors=[field_error("$.previous_response_id", "must start with 'resp_'")],
        )
    kept = await runs.kept_messages(previous.removeprefix(RESPONSE_PREFIX), tenant_id=tenant_id)
    if kept is None:
        raise UnprocessableError(
            "That response's conversation was not kept: previous_response_id needs "
            "RUN_STORE_MESSAGES=true (else send the whole conversation as `input`).",
            errors=[field_error("$.previous_response_id", "its conversation was not kept")],
        )
    return [m for m in kept if m.get("role") != "system"]  # instructions are not carried over


def _message(item: InputMessage) -> dict[str, Any]:
    """One input message item as a chat-completions message."""
    if isinstance(item.content, str):
        return {"role": item.role, "content": item.content}
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": part.text}
        if isinstance(part, InputText)
        else {"type": "image_url", "image_url": {"url": part.image_url}}
        for part in item.content
    ]
    if item.role == "assistant" or all(part["type"] == "text" for part in parts):
        return {"role": item.role, "content": "".join(p.get("text", "") for p in parts)}
    return {"role": item.role, "content": parts}


def _item(run_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": f"msg_{run_id}",
        "status": status,
        "role": "assistant",
        "content": [part] if status == "completed" else [],
    }


def response_object(
    body: ResponsesRequest,
    *,
    run_id: str,
    model: str,
    status: str,
    text: str | None = None,
    answer: dict[str, Any] | None = None,
    steps: bool = False,
) -> dict[str, Any]:
    """A `Response`: in progress (no output yet), or completed with the chat's answer."""
    shown: dict[str, Any] = {
        "id": response_id(run_id),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "metadata": body.metadata or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "store": body.store is not False,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": None,
    }
    if answer is not None:
        content = answer["message"].get("content") or ""
        shown["output"] = [_item(run_id, content if text is None else text, "completed")]
        shown["usage"] = _usage(answer["usage"])
        if answer["stop_reason"] == "token_budget" or answer.get("finish_reason") == "length":
            shown["status"] = "incomplete"
            shown["incomplete_details"] = {"reason": "max_output_tokens"}
        if steps or answer["stop_reason"] == "approval_required":
            shown["toolgate"] = extension(answer, steps=steps)
    return shown


def _usage(used: dict[str, int]) -> dict[str, Any]:
    return {
        "input_tokens": used["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": used["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": used["total_tokens"],
    }


class _Translation:
    """One chat's events as the Responses API's, with the state that needs: the sequence
    numbers, whether the message item was opened, the text streamed so far."""

    def __init__(self, body: ResponsesRequest, *, run_id: str, model: str, steps: bool) -> None:
        self.body, self.run_id, self.model, self.steps = body, run_id, model, steps
        self.next = 0
        self.where = {"item_id": f"msg_{run_id}", "output_index": 0, "content_index": 0}
        self.written: list[str] = []
        self.opened, self.turn_break, self.ended = False, False, False

    def event(self, name: str, **data: Any) -> tuple[str, dict[str, Any]]:
        self.next += 1
        return name, {"type": name, "sequence_number": self.next - 1, **data}

    def response(self, status: str, **shown: Any) -> dict[str, Any]:
        return response_object(
            self.body, run_id=self.run_id, model=self.model, status=status, **shown
        )

    def started(self) -> list[tuple[str, dict[str, Any]]]:
        shown = self.response("in_progress")
        return [
            self.event("response.created", response=shown),
            self.event("response.in_progress", response=shown),
        ]

    def of(self, name: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """What one chat event becomes (`ended` once the response is complete or failed)."""
        found = []
        if name == "iteration":
            self.turn_break = bool(self.written)
        elif name in ("message.delta", "done") and not self.opened:
            self.opened = True
            found += self._opened()
        if name == "message.delta" and data.get("content"):
            delta = ("\n\n" if self.turn_break else "") + data["content"]
            self.written.append(delta)
            self.turn_break = False
            found.append(
                self.event("response.output_text.delta", **self.where, delta=delta, logprobs=[])
            )
        elif name == "done":
            found += self._completed(data)
        elif name == "error":
            failed = self.response("failed")
            failed["error"] = problem_as_openai(data)["error"]
            found.append(self.event("response.failed", response=failed))
            self.ended = True
        elif self.steps and name in STEP_EVENTS:
            found.append(self.event(f"toolgate.{name}", data=data))
        return found

    def _opened(self) -> list[tuple[str, dict[str, Any]]]:
        part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
        part["logprobs"] = []
        item = _item(self.run_id, "", "in_progress")
        return [
            self.event("response.output_item.added", output_index=0, item=item),
            self.event("response.content_part.added", **self.where, part=part),
        ]

    def _completed(self, answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        text = "".join(self.written) or answer["message"].get("content") or ""
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        part["logprobs"] = []
        item = _item(self.run_id, text, "completed")
        final = self.response("completed", text=text, answer=answer, steps=self.steps)
        self.ended = True
        return [
            self.event("response.output_text.done", **self.where, text=text, logprobs=[]),
            self.event("response.content_part.done", **self.where, part=part),
            self.event("response.output_item.done", output_index=0, item=item),
            self.event("response.completed", response=final),
        ]


async def response_events(
    events: AsyncGenerator[ChatEvent, None],
    body: ResponsesRequest,
    *,
    run_id: str,
    model: str,
    steps: bool,
) -> AsyncIterator[ResponseEvent]:
    """The chat's events as the Responses API streams: `response.created`, the message item's
    text as `response.output_text.delta`s (a blank line between turns), its `.done` events, then
    `response.completed` (or `response.failed` with OpenAI's error)."""
    translation = _Translation(body, run_id=run_id, model=model, steps=steps)
    for started in translation.started():
        yield started
    try:
        async for event in events:
            if event is None:
                yield None
                continue
            for shown in translation.of(*event):
                yield shown
            if translation.ended:
                return
    finally:
        await events.aclose()  # a client that left cancels the run
