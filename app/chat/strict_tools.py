"""A model provider's `strict_tools`: tools sent in OpenAI's strict form (`strict: true`).

Wraps an API (chat completions or responses) without changing it: each tool whose parameters
convert (`app/tools/providers.py` `strict_schema`: objects closed, every member required,
optional members nullable, `oneOf` as `anyOf`) is sent strict, the others as they are (their
`incompatible_providers["openai-strict"]` says why). A strict model sends `null` for a
top-level parameter it leaves out; such a `null` for a parameter that was optional and does
not take `null` is read as absent before the tool's own check runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from app.chat.model import (
    ConvertedTools,
    ModelAPI,
    ModelToolCall,
    ModelTurn,
    PreparedTools,
    StreamAssembler,
    ToolChoice,
)
from app.tools.providers import strict_schema

MAX_REMEMBERED = 10_000  # tool names whose nullable-only-when-strict parameters are known


class StrictToolsAPI:
    """`inner` with its tools sent in strict form where they convert."""

    def __init__(self, inner: ModelAPI) -> None:
        self._inner = inner
        self.name = inner.name
        self.path = inner.path
        self.default_base_url = inner.default_base_url
        self._absent_when_null: OrderedDict[str, frozenset[str]] = OrderedDict()
        # Converted once per list: the loop sends the same list every turn of a chat.
        self._strict_lists = ConvertedTools(self._strict_list)

    def headers(self, api_key: str) -> dict[str, str]:
        return self._inner.headers(api_key)

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
        strict = self._strict_lists(tools) if tools else tools
        return self._inner.body(
            model=model,
            messages=messages,
            tools=strict,
            parallel_tool_calls=parallel_tool_calls,
            stream=stream,
            tool_choice=tool_choice,
        )

    def parse(self, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return self._read(self._inner.parse(raw, asked))

    @property
    def reader(self) -> Callable[[bytes], Any]:
        """The inner API's reader (a module-level function: a worker process may run it)."""
        return self._inner.reader

    def finish(self, reading: Any, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return self._read(self._inner.finish(reading, asked))

    def assembler(self, asked: Sequence[dict[str, Any]] = ()) -> StreamAssembler:
        return _Assembler(self._inner.assembler(asked), self._read)

    def _strict_list(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The list in strict form, keeping a chat's prepared search (a native form)."""
        strict = [self._strict(tool) for tool in tools]
        if isinstance(tools, PreparedTools):
            return PreparedTools.of((), strict, tools.native)
        return strict

    def _strict(self, tool: dict[str, Any]) -> dict[str, Any]:
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("parameters"), dict):
            return tool
        parameters = function["parameters"]
        converted, problems = strict_schema(parameters)
        if problems:
            return tool
        self._remember(function["name"], parameters)
        return {**tool, "function": {**function, "parameters": converted, "strict": True}}

    def _remember(self, name: str, parameters: dict[str, Any]) -> None:
        required = set(parameters.get("required") or [])
        properties = parameters.get("properties") or {}
        self._absent_when_null[name] = frozenset(
            member
            for member, schema in properties.items()
            if member not in required and not _takes_null(schema)
        )
        self._absent_when_null.move_to_end(name)
        while len(self._absent_when_null) > MAX_REMEMBERED:
            self._absent_when_null.popitem(last=False)

    def _read(self, turn: ModelTurn) -> ModelTurn:
        if not turn.tool_calls:
            return turn
        return replace(turn, tool_calls=[self._call(call) for call in turn.tool_calls])

    def _call(self, call: ModelToolCall) -> ModelToolCall:
        absent = self._absent_when_null.get(call.name)
        if not absent:
            return call
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            return call  # the tool's own check says what is wrong
        if not isinstance(arguments, dict):
            return call
        kept = {k: v for k, v in arguments.items() if not (v is None and k in absent)}
        if len(kept) == len(arguments):
            return call
        return replace(call, arguments=orjson.dumps(kept).decode())


class _Assembler:
    def __init__(self, inner: StreamAssembler, read: Any) -> None:
        self._inner = inner
        self._read = read

    def feed(self, event: dict[str, Any]) -> str:
        return self._inner.feed(event)

    def turn(self) -> ModelTurn:
        turn: ModelTurn = self._read(self._inner.turn())
        return turn


def _takes_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    types = schema.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return True
    choices = [*(schema.get("anyOf") or []), *(schema.get("oneOf") or [])]
    return any(_takes_null(choice) for choice in choices if isinstance(choice, dict)) or (
        types is None and not choices and "enum" not in schema and "const" not in schema
    )
