"""Scripted steps for the scripted model (`fake_model.FakeModel`) in each model API's format:
chat completions, OpenAI Responses and Anthropic Messages, whole or streamed.

`steps(api)` gives the same four builders for every API, so one test runs on all three.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from tests.support import fake_model as chat_completions
from tests.support.fake_model import Reply, Step

APIS = ["chat_completions", "responses", "anthropic_messages"]
Call = tuple[str, Any]  # (name, arguments): a str is sent as it is, anything else as JSON
_ids = itertools.count(1)


def _json(body: dict[str, Any]) -> Reply:
    return Reply(body=orjson.dumps(body), headers={"content-type": "application/json"})


def _sse(events: list[dict[str, Any]], *, named: bool = False) -> Reply:
    chunks = [
        (f"event: {event['type']}\n".encode() if named else b"")
        + b"data: "
        + orjson.dumps(event)
        + b"\n\n"
        for event in events
    ]
    return Reply(headers={"content-type": "text/event-stream"}, chunks=chunks)


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


# --- OpenAI Responses ---------------------------------------------------------------------


STREAMED_USAGE = (7, 3)  # what fake_model's streamed chat completions report


def _response(output: list[dict[str, Any]], usage: tuple[int, int] = (10, 5)) -> dict[str, Any]:
    return {
        "id": f"resp_{next(_ids)}",
        "object": "response",
        "status": "completed",
        "model": "fake-model",
        "output": output,
        "usage": {
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def _message_item(content: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{next(_ids)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }


def _call_items(calls: tuple[Call, ...]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "id": f"fc_{next(_ids)}",
            "call_id": f"call_{next(_ids)}",
            "name": name,
            "arguments": _arguments(arguments),
            "status": "completed",
        }
        for name, arguments in calls
    ]


def responses_text(content: str) -> Step:
    return lambda request: _json(_response([_message_item(content)]))


def responses_tool_calls(*calls: Call) -> Step:
    return lambda request: _json(_response(_call_items(calls)))


def responses_tool_search(query: str) -> Step:
    """A client-executed `tool_search_call` (the Responses API's own search form)."""
    item = {
        "type": "tool_search_call",
        "id": f"ts_{next(_ids)}",
        "call_id": f"call_{next(_ids)}",
        "execution": "client",
        "arguments": {"query": query},
        "status": "completed",
    }
    return lambda request: _json(_response([item]))


def responses_streamed_text(*pieces: str) -> Step:
    def step(request: dict[str, Any]) -> Reply:
        item = _message_item("".join(pieces))
        events = [{"type": "response.created", "response": {**_response([]), "status": "x"}}]
        events.append({"type": "response.output_item.added", "output_index": 0, "item": item})
        events += [
            {"type": "response.output_text.delta", "output_index": 0, "delta": piece}
            for piece in pieces
        ]
        events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
        events.append({"type": "response.completed", "response": _response([item], STREAMED_USAGE)})
        return _sse(events, named=True)

    return step


def responses_streamed_tool_calls(*calls: Call, piece: int = 3) -> Step:
    def step(request: dict[str, Any]) -> Reply:
        items = _call_items(calls)
        events: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            added = {**item, "arguments": "", "status": "in_progress"}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            text = item["arguments"]
            events += [
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": index,
                    "item_id": item["id"],
                    "delta": text[k : k + piece],
                }
                for k in range(0, len(text), piece)
            ]
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
        events.append({"type": "response.completed", "response": _response(items, STREAMED_USAGE)})
        return _sse(events, named=True)

    return step


# --- Anthropic Messages -------------------------------------------------------------------


def _message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _tool_uses(calls: tuple[Call, ...]) -> list[dict[str, Any]]:
    blocks = []
    for name, arguments in calls:
        try:
            parsed = orjson.loads(_arguments(arguments))
        except orjson.JSONDecodeError:
            parsed = _arguments(arguments)  # malformed: kept as text (no real server does this)
        blocks.append(
            {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": parsed}
        )
    return blocks


def anthropic_text(content: str) -> Step:
    return lambda request: _json(_message([{"type": "text", "text": content}], "end_turn"))


def anthropic_tool_calls(*calls: Call) -> Step:
    return lambda request: _json(_message(_tool_uses(calls), "tool_use"))


def anthropic_streamed(
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]], stop: str
) -> Reply:
    start = _message([], "")
    start["usage"] = {"input_tokens": STREAMED_USAGE[0], "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, (block, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "ping"})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop},
            "usage": {"output_tokens": STREAMED_USAGE[1]},
        }
    )
    events.append({"type": "message_stop"})
    return _sse(events, named=True)


def anthropic_streamed_text(*pieces: str) -> Step:
    deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
    return lambda request: anthropic_streamed([({"type": "text", "text": ""}, deltas)], "end_turn")


def anthropic_streamed_tool_calls(*calls: Call, piece: int = 3) -> Step:
    def step(request: dict[str, Any]) -> Reply:
        blocks = []
        for name, arguments in calls:
            text = _arguments(arguments)
            block = {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": text[k : k + piece]}
                for k in range(0, len(text), piece)
            ]
            blocks.append((block, deltas))
        return anthropic_streamed(blocks, "tool_use")

    return step


# --- the same builders for each API ---------------------------------------------------------


def _streamed_chat_calls(*calls: Call, piece: int = 3) -> Step:
    encoded = tuple((f"call_{next(_ids)}", name, _arguments(args)) for name, args in calls)
    return chat_completions.streamed_tool_calls(*encoded, piece=piece)


@dataclass(frozen=True)
class Steps:
    text: Callable[[str], Step]
    tool_calls: Callable[..., Step]
    streamed_text: Callable[..., Step]
    streamed_tool_calls: Callable[..., Step]


def steps(api: str) -> Steps:
    if api == "responses":
        return Steps(
            responses_text,
            responses_tool_calls,
            responses_streamed_text,
            responses_streamed_tool_calls,
        )
    if api == "anthropic_messages":
        return Steps(
            anthropic_text,
            anthropic_tool_calls,
            anthropic_streamed_text,
            anthropic_streamed_tool_calls,
        )
    return Steps(
        chat_completions.text,
        chat_completions.tool_calls,
        chat_completions.streamed_text,
        _streamed_chat_calls,
    )


def error(
    api: str, code: int, kind: str = "api_error", headers: dict[str, str] | None = None
) -> Step:
    """An error answer in the API's own shape."""
    body: dict[str, Any] = {"error": {"message": f"fake error {code}", "type": kind}}
    if api == "anthropic_messages":
        body = {"type": "error", **body}
    return lambda request: Reply(
        code, orjson.dumps(body), {"content-type": "application/json", **(headers or {})}
    )


def cut_short(api: str, content: str) -> Step:
    """A text answer the model's output limit cut short, in the API's own words."""

    def step(request: dict[str, Any]) -> Reply:
        if api == "responses":
            body = _response([_message_item(content)])
            body["status"] = "incomplete"
            body["incomplete_details"] = {"reason": "max_output_tokens"}
            return _json(body)
        if api == "anthropic_messages":
            return _json(_message([{"type": "text", "text": content}], "max_tokens"))
        reply = chat_completions.text(content)(request)
        body = orjson.loads(reply.body)
        body["choices"][0]["finish_reason"] = "length"
        return _json(body)

    return step


def tools_forbidden(api: str, request: dict[str, Any]) -> bool:
    """The request offers tools but forbids calling them (`tool_choice` none, in the API's
    words): a model that obeys answers in text."""
    choice = request.get("tool_choice")
    if api == "anthropic_messages":
        return isinstance(choice, dict) and choice.get("type") == "none"
    return choice == "none"


def calls_until_told(api: str, *calls: Call, answer: str) -> Step:
    """A model that calls tools while it may, and answers `answer` once a request forbids it."""
    builders = steps(api)

    def step(request: dict[str, Any]) -> Reply:
        if tools_forbidden(api, request):
            return builders.text(answer)(request)
        return builders.tool_calls(*calls)(request)

    return step
