"""OpenAI's Responses API as a `ModelAPI`: the loop's chat messages become input items.

- assistant tool calls -> `function_call` items; tool messages -> `function_call_output` items
  (matched by `call_id`); system and developer messages stay messages of that role.
- Stateless by default: the whole conversation is sent each turn, since the caller's messages
  are the conversation. `chain=True` sends `previous_response_id` and only the items after it.
- Reasoning items a turn returns are sent back before that turn's function calls, as the API
  requires; they are remembered (bounded), since chat messages cannot hold them, under the digest
  of the whole conversation before that turn and the turn's calls (ids, names, arguments). One
  client serves every tenant of the operator's endpoint, and call ids need not be unique (a
  server may number them): a turn is found again only by a conversation that holds it, the same
  to the byte up to and including its calls.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from app.chat.model import (
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
    upstream_status,
)
from app.tools.providers import shaped

logger = logging.getLogger(__name__)

MAX_REMEMBERED_TURNS = 10_000
_MALFORMED = (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError)


def conversation_digests(messages: Sequence[dict[str, Any]]) -> list[bytes]:
    """The digest of the conversation before each message, and after the last (one more)."""
    digests = [b""]
    for message in messages:
        canonical = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
        digests.append(hashlib.blake2b(digests[-1] + canonical, digest_size=16).digest())
    return digests


def turn_key(before: bytes, calls: Sequence[tuple[str, str, str]]) -> bytes:
    """One assistant turn: the conversation before it and its calls (id, name, arguments)."""
    return hashlib.blake2b(before + orjson.dumps(calls), digest_size=16).digest()


class _TurnMemory:
    """What a turn returned that chat messages cannot carry, by `turn_key`."""

    def __init__(self) -> None:
        # Reasoning items as dicts, or as JSON fragments (`orjson.Fragment`) read in a worker.
        self._turns: OrderedDict[bytes, tuple[str, list[Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._turns)

    def remember(self, key: bytes, response_id: str, reasoning: list[Any]) -> None:
        self._turns[key] = (response_id, reasoning)
        while len(self._turns) > MAX_REMEMBERED_TURNS:
            self._turns.popitem(last=False)

    def get(
        self, before: bytes, calls: list[dict[str, Any]] | None
    ) -> tuple[str, list[Any]] | None:
        if not calls or not self._turns:
            return None
        made = [
            (str(c.get("id")), str(c["function"]["name"]), str(c["function"]["arguments"]))
            for c in calls
        ]
        return self._turns.get(turn_key(before, made))


class ResponseReading(NamedTuple):
    """What a `response` object says (`response_reading`), before the API remembers anything."""

    turn: ModelTurn
    response_id: str
    reasoning: list[Any]  # its reasoning items: dicts, or their JSON (read in a worker)
    failed: str | None  # the response failed: why


def read_response(raw: bytes) -> ResponseReading:
    """A Responses answer -> what it says (`ResponsesAPI.reader`); reasoning items as their
    JSON, which the next request embeds as it is. Raises on anything malformed."""
    return response_reading(orjson.loads(raw), encoded=True)


def response_reading(response: dict[str, Any], *, encoded: bool = False) -> ResponseReading:
    if response.get("status") == "failed" or isinstance(response.get("error"), dict):
        error = response.get("error") or {}
        failed = str(error.get("message") or "the response failed")
        return ResponseReading(ModelTurn(None), "", [], failed)
    texts: list[str] = []
    finish: str | None = None
    calls: list[ModelToolCall] = []
    reasoning: list[Any] = []
    for item in response["output"]:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    texts.append(part["text"])
                elif part.get("type") == "refusal":  # shown as the answer, and said so
                    texts.append(str(part.get("refusal") or ""))
                    finish = "refusal"
        elif kind == "function_call":
            calls.append(
                ModelToolCall(
                    id=str(item.get("call_id") or item.get("id") or f"call_{len(calls)}"),
                    name=str(item.get("name") or ""),
                    arguments=_arguments_text(item.get("arguments")),
                )
            )
        elif kind == "tool_search_call":  # a client-executed search: the loop runs it
            calls.append(
                ModelToolCall(
                    id=str(item.get("call_id") or item.get("id") or f"call_{len(calls)}"),
                    name=SEARCH_CALL,
                    arguments=_arguments_text(item.get("arguments")),
                )
            )
        elif kind == "reasoning":
            reasoning.append(orjson.dumps(item) if encoded else item)
    if response.get("status") == "incomplete":
        finish = finished((response.get("incomplete_details") or {}).get("reason"))
    elif finish is None:
        finish = "tool_calls" if calls else "stop"
    turn = ModelTurn("".join(texts) or None, calls, _usage(response.get("usage")), finish)
    return ResponseReading(turn, str(response.get("id") or ""), reasoning, None)


class ResponsesAPI:
    name = "responses"
    path = "/responses"
    default_base_url = "https://api.openai.com/v1"

    @staticmethod
    def reader(raw: bytes, /) -> ResponseReading:
        return read_response(raw)

    def __init__(self, *, chain: bool = False, max_output_tokens: int | None = None) -> None:
        self._chain = chain
        self._max_output_tokens = max_output_tokens
        self._memory = _TurnMemory()
        self._tools = ConvertedTools(lambda tools: [responses_tool(tool) for tool in tools])

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

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
        previous, items = self._input(messages, native)
        payload: dict[str, Any] = {"model": model, "input": items}
        if previous:
            payload["previous_response_id"] = previous
        if self._max_output_tokens:
            payload["max_output_tokens"] = self._max_output_tokens
        if tools and native is not None:
            payload["tools"] = _native_tools(tools, native)
            payload["tool_choice"] = "auto"
            if not parallel_tool_calls:
                payload["parallel_tool_calls"] = False
        elif tools:
            payload["tools"] = self._tools(tools)
            payload["tool_choice"] = tool_choice
            if not parallel_tool_calls and tool_choice == "auto":
                payload["parallel_tool_calls"] = False
        if stream:
            payload["stream"] = True
        return orjson.dumps(payload)

    def _input(
        self, messages: list[dict[str, Any]], native: NativeSearch | None = None
    ) -> tuple[str | None, list[dict[str, Any]]]:
        start, previous = 0, None
        # Digests only where a remembered turn could be found: a conversation without calls
        # (every chat's first model call) has none to look up.
        looked_up = self._memory and any(m.get("tool_calls") for m in messages)
        digests = conversation_digests(messages) if looked_up else None
        if self._chain and digests:  # the items after the last turn the API already holds
            for index in range(len(messages) - 1, -1, -1):
                remembered = self._memory.get(digests[index], messages[index].get("tool_calls"))
                if remembered:
                    start, previous = index + 1, remembered[0]
                    break
        items: list[dict[str, Any]] = []
        for index in range(start, len(messages)):
            before = digests[index] if digests else b""
            items += self._items(messages[index], before, native)
        return previous, items

    def _items(
        self, message: dict[str, Any], before: bytes, native: NativeSearch | None = None
    ) -> list[dict[str, Any]]:
        role, content = message["role"], message.get("content")
        if role == "tool":
            call_id = message["tool_call_id"]
            if native is not None and call_id in native.revealed:  # the tools a search found
                found = [responses_tool(schema) for schema in native.revealed[call_id]]
                return [
                    {
                        "type": "tool_search_output",
                        "call_id": call_id,
                        "execution": "client",
                        "tools": found,
                    }
                ]
            return [{"type": "function_call_output", "call_id": call_id, "output": _text(content)}]
        if role != "assistant":
            return [{"role": role, "content": _input_content(content)}]
        items: list[dict[str, Any]] = []
        calls = message.get("tool_calls") or []
        remembered = self._memory.get(before, calls)
        if remembered:
            items += remembered[1]
        if content:
            items.append({"role": "assistant", "content": _text(content)})
        items += [_call_item(call, native) for call in calls]
        return items

    def parse(self, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return read_answer(self, raw, asked)

    def turn_of(self, response: dict[str, Any], asked: Sequence[dict[str, Any]]) -> ModelTurn:
        """A `response` object -> ModelTurn (see `finish`)."""
        return self.finish(response_reading(response), asked)

    def finish(self, reading: ResponseReading, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        """The turn read; its reasoning items (and, chained, its id) remembered for the next
        turn of the conversation `asked` (the messages the request sent)."""
        if reading.failed is not None:
            raise upstream_status(500, reading.failed)
        turn = reading.turn
        if turn.tool_calls and (reading.reasoning or self._chain):
            made = [(call.id, call.name, call.arguments) for call in turn.tool_calls]
            key = turn_key(conversation_digests(asked)[-1], made)
            reasoning = [
                orjson.Fragment(item) if isinstance(item, bytes) else item
                for item in reading.reasoning
            ]
            self._memory.remember(key, reading.response_id, reasoning)
        return turn

    def assembler(self, asked: Sequence[dict[str, Any]] = ()) -> StreamAssembler:
        return ResponsesAssembler(self, asked)


class ResponsesAssembler:
    """Builds a ModelTurn from Responses streaming events: text deltas as they come, the whole
    turn from `response.completed` (or, if a server leaves that out, from the items it sent)."""

    def __init__(self, api: ResponsesAPI, asked: Sequence[dict[str, Any]]) -> None:
        self._api, self._asked = api, asked
        self._items: dict[int, dict[str, Any]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._response: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            return delta if isinstance(delta, str) else ""
        index = event.get("output_index")
        if kind in ("response.output_item.added", "response.output_item.done"):
            if isinstance(index, int) and isinstance(event.get("item"), dict):
                self._items[index] = event["item"]
        elif kind == "response.function_call_arguments.delta" and isinstance(index, int):
            self._arguments.setdefault(index, []).append(str(event.get("delta") or ""))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._response = event.get("response")
        elif kind == "error":
            raise upstream_status(500, str(event.get("message") or "error"))
        return ""

    def turn(self) -> ModelTurn:
        try:
            return self._turn()
        except _MALFORMED as exc:
            logger.warning("malformed model answer: %s", type(exc).__name__)
            raise malformed_answer() from None

    def _turn(self) -> ModelTurn:
        if isinstance(self._response, dict) and self._response.get("output"):
            return self._api.turn_of(self._response, self._asked)
        output = []
        for index, item in sorted(self._items.items()):
            if item.get("type") == "function_call" and not item.get("arguments"):
                item = {**item, "arguments": "".join(self._arguments.get(index, []))}
            output.append(item)
        usage = (self._response or {}).get("usage")
        whole = {"output": output, "usage": usage, "status": "completed"}
        return self._api.turn_of(whole, self._asked)


# A `tool_search_call` is read as a call of the chat's search function, whatever its name:
# the loop runs it (`search_tools`, app/services/tool_search.py, is the only search).
SEARCH_CALL = "search_tools"


def _call_item(call: dict[str, Any], native: NativeSearch | None) -> dict[str, Any]:
    """An assistant's tool call as an input item: a search in the native form, or a function
    call."""
    function = call["function"]
    if native is not None and function["name"] == native.name:
        try:
            arguments = orjson.loads(function["arguments"] or "{}")
        except orjson.JSONDecodeError:
            arguments = {}
        return {
            "type": "tool_search_call",
            "call_id": call["id"],
            "execution": "client",
            "arguments": arguments if isinstance(arguments, dict) else {},
        }
    return {
        "type": "function_call",
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"],
    }


def _native_tools(tools: list[dict[str, Any]], native: NativeSearch) -> list[dict[str, Any]]:
    """The tools a request declares when the search is native: the tools offered from the
    start and the client-executed `tool_search`; what a search found rides in its
    `tool_search_output` item instead."""
    revealed = native.revealed_names | {native.name}
    declared = [responses_tool(t) for t in tools if t["function"]["name"] not in revealed]
    search = {
        "type": "tool_search",
        "execution": "client",
        "description": native.description,
        "parameters": native.parameters,
    }
    return [*declared, search]


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions tool -> a Responses function tool (strict only when asked: the
    Responses API would otherwise default to strict schemas, unlike chat completions)."""
    function = tool["function"]
    declaration = shaped(
        "openai-responses",
        function["name"],
        function.get("description", ""),
        function.get("parameters") or {"type": "object", "properties": {}},
    )
    declaration["strict"] = bool(function.get("strict", False))
    return declaration


def _input_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content if content is not None else ""
    return [_input_part(part) for part in content]


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return {"type": "input_image", "image_url": url}
    return part


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt = int(usage.get("input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    return Usage(prompt, completion, int(usage.get("total_tokens") or prompt + completion))
