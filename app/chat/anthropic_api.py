"""Anthropic's Messages API as a `ModelAPI`: the loop's chat messages become content blocks.

- system and developer messages -> the `system` field; assistant tool calls -> `tool_use`
  blocks; tool messages -> `tool_result` blocks (with `is_error`) in one user turn.
- Tools -> `input_schema`, the last one marked for prompt caching; `max_tokens` is required;
  `parallel_tool_calls: false` -> `disable_parallel_tool_use`; a turn that may call no tool
  keeps them (a history of tool use without `tools` is refused) with `tool_choice` `none`.
- Tool-use ids from the conversation (another model's) outside `[a-zA-Z0-9_-]` are sent as
  stand-ins (`ANTHROPIC_IDS`), the same for a call and its result.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson

from app.chat.model import (
    TOOL_ERROR_PREFIX,
    CallIds,
    ConvertedTools,
    ModelToolCall,
    ModelTurn,
    NativeSearch,
    StreamAssembler,
    ToolChoice,
    Usage,
    finished,
    malformed_answer,
    native_search,
    read_answer,
)
from app.tools.providers import shaped

logger = logging.getLogger(__name__)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_MALFORMED = (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError)
# The Messages API's tool-use ids: `^[a-zA-Z0-9_-]+$` (its own are about 30 characters long).
ANTHROPIC_IDS = CallIds("a-zA-Z0-9_-", 64)


def read_message(raw: bytes) -> ModelTurn:
    """A Messages answer -> ModelTurn (`AnthropicMessagesAPI.reader`); raises on anything
    malformed."""
    data = orjson.loads(raw)
    if data.get("type") == "error":
        raise KeyError("error")
    return _turn(data["content"], data.get("usage"), data.get("stop_reason"))


class AnthropicMessagesAPI:
    name = "anthropic_messages"
    path = "/messages"
    default_base_url = "https://api.anthropic.com/v1"

    @staticmethod
    def reader(raw: bytes, /) -> ModelTurn:
        return read_message(raw)

    def __init__(self, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self._max_tokens = max_tokens
        self._tools = ConvertedTools(anthropic_tools)

    def headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}

    def body(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        stream: bool,
        tool_choice: ToolChoice = "auto",
    ) -> bytes:
        native = native_search(tools)
        system, turns = anthropic_messages(messages, native)
        payload: dict[str, Any] = {"model": model, "max_tokens": self._max_tokens}
        if system:
            payload["system"] = system
        payload["messages"] = turns
        if tools:
            payload["tools"] = self._tools(tools) if native is None else _deferring(tools, native)
            choice: dict[str, Any] = {"type": tool_choice}
            if not parallel_tool_calls and tool_choice == "auto":
                choice["disable_parallel_tool_use"] = True
            payload["tool_choice"] = choice
        if stream:
            payload["stream"] = True
        return orjson.dumps(payload)

    def parse(self, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return read_answer(self, raw, asked)

    def finish(self, reading: ModelTurn, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return reading

    def assembler(self, asked: Sequence[dict[str, Any]] = ()) -> StreamAssembler:
        return AnthropicAssembler()


class AnthropicAssembler:
    """Builds a ModelTurn from Messages streaming events: blocks by index, text and tool input
    in deltas, input tokens in `message_start` and output tokens in `message_delta`."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._parts: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop: object = None

    def feed(self, event: dict[str, Any]) -> str:
        kind, index = event.get("type"), event.get("index")
        if kind == "message_start":
            self._usage.update((event.get("message") or {}).get("usage") or {})
        elif kind == "message_delta":
            self._usage.update(event.get("usage") or {})
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
        elif kind == "content_block_start" and isinstance(index, int):
            self._blocks[index] = dict(event.get("content_block") or {})
            self._parts[index] = []
        elif kind == "content_block_delta" and isinstance(index, int):
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                text = str(delta.get("text") or "")
                self._parts.setdefault(index, []).append(text)
                return text
            if delta.get("type") == "input_json_delta":
                self._parts.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        return ""

    def turn(self) -> ModelTurn:
        blocks = []
        for index, block in sorted(self._blocks.items()):
            joined = "".join(self._parts.get(index, []))
            if block.get("type") == "text":
                blocks.append({**block, "text": str(block.get("text") or "") + joined})
            elif block.get("type") == "tool_use":
                blocks.append({**block, "input": joined or block.get("input") or {}})
        try:
            return _turn(blocks, self._usage, self._stop)
        except _MALFORMED as exc:
            logger.warning("malformed model answer: %s", type(exc).__name__)
            raise malformed_answer() from None


def anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions tools -> Messages tools, the last marked as the end of the prompt prefix
    to cache (tool definitions come first in Anthropic's prompt)."""
    converted = [anthropic_tool(tool) for tool in tools]
    converted[-1] = {**converted[-1], "cache_control": {"type": "ephemeral"}}
    return converted


def anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return shaped("anthropic", function["name"], function.get("description", ""), parameters)


def _deferring(tools: list[dict[str, Any]], native: NativeSearch) -> list[dict[str, Any]]:
    """The tools of a request when the search is native: those offered from the start (the
    last marked for prompt caching), then those searches found, with `defer_loading` (kept
    out of the prompt until a search result's `tool_reference` names them)."""
    found = native.revealed_names
    offered = anthropic_tools([t for t in tools if t["function"]["name"] not in found])
    deferred = [
        {**anthropic_tool(t), "defer_loading": True}
        for t in tools
        if t["function"]["name"] in found
    ]
    return [*offered, *deferred]


def anthropic_messages(
    messages: list[dict[str, Any]], native: NativeSearch | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """Chat messages -> (the system text, user and assistant turns of content blocks); turns of
    the same role in a row are merged, as the tool results of one turn must be. With a native
    search, a search's result is the `tool_reference` blocks of the tools it found."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
            continue
        blocks = _blocks(message, native)
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        elif blocks:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(text for text in system if text), turns


def _blocks(message: dict[str, Any], native: NativeSearch | None = None) -> list[dict[str, Any]]:
    content = message.get("content")
    if message["role"] == "tool":
        text = _text(content)
        call_id = ANTHROPIC_IDS(str(message["tool_call_id"]))
        found = native.revealed.get(message["tool_call_id"]) if native is not None else None
        if found:  # a search's result: references to the tools it found
            references = [
                {"type": "tool_reference", "tool_name": schema["function"]["name"]}
                for schema in found
            ]
            return [{"type": "tool_result", "tool_use_id": call_id, "content": references}]
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if text.startswith(TOOL_ERROR_PREFIX):
            block["is_error"] = True
        return [block]
    if isinstance(content, list):
        blocks = [_part(part) for part in content if isinstance(part, dict)]
    else:
        blocks = [{"type": "text", "text": content}] if content else []
    for call in message.get("tool_calls") or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": ANTHROPIC_IDS(str(call["id"])),
                "name": function["name"],
                "input": _input(function.get("arguments")),
            }
        )
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    # tool_use input must be an object: malformed arguments (already answered with an error
    # result the model reads) are sent as an empty one.
    try:
        value = orjson.loads(arguments or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        url = str(image.get("url") if isinstance(image, dict) else image)
        if url.startswith("data:") and ";base64," in url:
            media_type, _, data = url[5:].partition(";base64,")
            source = {"type": "base64", "media_type": media_type, "data": data}
            return {"type": "image", "source": source}
        return {"type": "image", "source": {"type": "url", "url": url}}
    return part


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _turn(blocks: list[dict[str, Any]], usage: Any, stop: object) -> ModelTurn:
    texts = [str(block["text"]) for block in blocks if block.get("type") == "text"]
    calls = [
        ModelToolCall(
            id=str(block.get("id") or f"call_{index}"),
            name=str(block.get("name") or ""),
            arguments=block["input"]
            if isinstance(block.get("input"), str)
            else orjson.dumps(block.get("input") or {}).decode(),
        )
        for index, block in enumerate(blocks)
        if block.get("type") == "tool_use"
    ]
    return ModelTurn("".join(texts) or None, calls, _usage(usage), finished(stop))


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt = sum(
        int(usage.get(key) or 0)
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    completion = int(usage.get("output_tokens") or 0)
    return Usage(prompt, completion, prompt + completion)
