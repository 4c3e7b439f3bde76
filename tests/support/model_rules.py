"""What each model API refuses, as its reference documents it, so the scripted model
(`fake_model.FakeModel`) answers a request our clients should never send with the API's own 400.

- Anthropic Messages: a history holding `tool_use`/`tool_result` blocks in a request that
  defines no `tools`; a `tool_choice` without `tools` or of an unknown type; tool-use ids outside
  `[a-zA-Z0-9_-]`; a `tool_result` whose id no `tool_use` of the turn before has, and a
  `tool_use` the next turn leaves unanswered; `max_tokens` missing.
- OpenAI chat completions: `tool_choice` or `parallel_tool_calls` without `tools`; a tool call
  id over 40 characters; a tool message that answers no call of the assistant turn before it,
  and an assistant turn whose calls are not each answered.
- OpenAI Responses: a `function_call_output` whose `call_id` no `function_call` sent with it
  (or kept by `previous_response_id`) has; a `tool_choice` of an unknown kind.
"""

from __future__ import annotations

import re
from typing import Any

_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
_ANTHROPIC_CHOICES = {"auto", "any", "tool", "none"}
OPENAI_MAX_CALL_ID = 40


def problems(path: str, request: dict[str, Any]) -> list[str]:
    """What the API at `path` refuses in `request` (empty: nothing)."""
    if path.endswith("/messages"):
        return anthropic_problems(request)
    if path.endswith("/responses"):
        return responses_problems(request)
    if path.endswith("/chat/completions"):
        return chat_completions_problems(request)
    return []


def anthropic_problems(request: dict[str, Any]) -> list[str]:
    found: list[str] = []
    if "max_tokens" not in request:
        found.append("max_tokens: Field required")
    tools = request.get("tools")
    choice = request.get("tool_choice")
    if choice is not None and not tools:
        found.append("tool_choice: tool_choice may only be specified while providing tools")
    if choice is not None and choice.get("type") not in _ANTHROPIC_CHOICES:
        found.append(f"tool_choice.type: unknown type {choice.get('type')!r}")
    if choice is not None and choice.get("type") == "none" and len(choice) > 1:
        found.append("tool_choice: `none` takes no other field")
    messages = request.get("messages") or []
    blocks = [_blocks(message) for message in messages]
    holds_tools = any(b["type"] in ("tool_use", "tool_result") for bs in blocks for b in bs)
    if holds_tools and not tools:
        found.append(
            "messages: Requests which include `tool_use` or `tool_result` blocks must define tools."
        )
    for index, message_blocks in enumerate(blocks):
        for position, block in enumerate(message_blocks):
            key = {"tool_use": "id", "tool_result": "tool_use_id"}.get(block["type"])
            if key and not _ANTHROPIC_ID.fullmatch(str(block.get(key, ""))):
                found.append(
                    f"messages.{index}.content.{position}.{block['type']}.{key}: String should "
                    "match pattern '^[a-zA-Z0-9_-]+$'"
                )
    found += _anthropic_pairs(blocks)
    return found


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _anthropic_pairs(blocks: list[list[dict[str, Any]]]) -> list[str]:
    found = []
    for index, message_blocks in enumerate(blocks):
        uses = {b.get("id") for b in message_blocks if b["type"] == "tool_use"}
        following = blocks[index + 1] if index + 1 < len(blocks) else []
        answered = {b.get("tool_use_id") for b in following if b["type"] == "tool_result"}
        before = blocks[index - 1] if index > 0 else []
        results = {b.get("tool_use_id") for b in message_blocks if b["type"] == "tool_result"}
        offered = {b.get("id") for b in before if b["type"] == "tool_use"}
        if uses - answered and index + 1 < len(blocks):
            found.append(
                f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(map(str, uses - answered)))}"
            )
        if results - offered:
            found.append(
                f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(map(str, results - offered)))}. Each `tool_result` block "
                "must have a corresponding `tool_use` block in the previous message."
            )
    return found


def chat_completions_problems(request: dict[str, Any]) -> list[str]:
    found: list[str] = []
    tools = request.get("tools")
    for field in ("tool_choice", "parallel_tool_calls"):
        if field in request and not tools:
            found.append(
                f"Invalid value for '{field}': '{field}' is only allowed when 'tools' are "
                "specified."
            )
    messages = request.get("messages") or []
    waiting: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in waiting:
                found.append(
                    f"Invalid parameter: messages[{index}] with role 'tool' must be a response "
                    "to a preceeding message with 'tool_calls'."
                )
            waiting.discard(message.get("tool_call_id"))
            continue
        if waiting:
            found.append(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(waiting))}"
            )
            waiting = set()
        for position, call in enumerate(message.get("tool_calls") or []):
            call_id = str(call.get("id", ""))
            if len(call_id) > OPENAI_MAX_CALL_ID:
                found.append(
                    f"Invalid 'messages[{index}].tool_calls[{position}].id': string too long. "
                    f"Expected a string with maximum length {OPENAI_MAX_CALL_ID}, but got a "
                    f"string with length {len(call_id)} instead."
                )
            waiting.add(call_id)
    if waiting:
        found.append(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            f"to each 'tool_call_id'. The following tool_call_ids did not have response "
            f"messages: {', '.join(sorted(waiting))}"
        )
    return found


def responses_problems(request: dict[str, Any]) -> list[str]:
    found: list[str] = []
    choice = request.get("tool_choice")
    if isinstance(choice, str) and choice not in ("none", "auto", "required"):
        found.append(f"Invalid value for 'tool_choice': {choice!r}.")
    items = request.get("input")
    if not isinstance(items, list) or request.get("previous_response_id"):
        return found
    calls = {i.get("call_id") for i in items if i.get("type") == "function_call"}
    for item in items:
        if item.get("type") == "function_call_output" and item.get("call_id") not in calls:
            found.append(
                f"No tool call found for function call output with call_id {item.get('call_id')}."
            )
    return found


def refusal(path: str, messages: list[str]) -> dict[str, Any]:
    """The API's own error body for a refused request."""
    error = {"type": "invalid_request_error", "message": "; ".join(messages)}
    if path.endswith("/messages"):
        return {"type": "error", "error": error}
    return {"error": {**error, "param": None, "code": None}}
