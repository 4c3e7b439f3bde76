"""The tool-calling loop: call the model, run the tools it asks for, feed results back, repeat.

A failing tool is a tool result the model can read and correct; only model failures and the
chat deadline end the loop with an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from app.chat.model import (
    ModelClient,
    ModelTimeoutError,
    ModelToolCall,
    ModelTurn,
    Usage,
    malformed_answer,
)
from app.mcp.hub import ChatSessions
from app.metrics import Metrics
from app.tools.arguments import argument_problems, merge_context
from app.tools.executors import ToolOutcome, ToolRunner, unset_secret
from app.tools.schema import PreparedTool

REDACTED = "[redacted]"
# Shorter context values are not scrubbed from tool output: they would match ordinary text.
MIN_REDACTED_LENGTH = 4

StopReason = Literal["completed", "max_iterations", "token_budget"]


@dataclass(frozen=True)
class LoopLimits:
    tool_timeout_s: float
    tool_output_max_chars: int
    deadline_s: float
    token_budget: int = 0  # total tokens the model may report per chat; 0: no budget


@dataclass
class ToolCallRecord:
    id: str
    name: str
    arguments: Any
    status: Literal["ok", "error"]
    error: str | None
    duration_ms: float


@dataclass
class ChatResult:
    message: dict[str, Any]
    messages: list[dict[str, Any]]
    stop_reason: StopReason
    iterations: int
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class ChatRun:
    """One chat's inputs, already authorised and resolved to tool documents."""

    messages: list[dict[str, Any]]
    tools: list[PreparedTool]
    context: dict[str, Any]
    model: str
    max_iterations: int
    parallel_tool_calls: bool
    mcp: ChatSessions | None = None  # the chat's MCP sessions, opened on first use
    # The tenant secrets the chat's tools refer to; None for one that is unset or unreadable.
    secrets: dict[str, str | None] = field(default_factory=dict)


EventSink = Callable[[str, dict[str, Any]], Awaitable[None]]
PREVIEW_CHARS = 200


@dataclass
class _Run:
    """One chat's working state, shared by the steps of the loop."""

    chat: ChatRun
    by_name: dict[str, dict[str, Any]]
    scrub: _Scrubber
    emit: EventSink | None


class ChatLoop:
    def __init__(
        self,
        *,
        model: ModelClient,
        runner: ToolRunner,
        limits: LoopLimits,
        metrics: Metrics | None = None,
    ) -> None:
        self._model = model
        self._runner = runner
        self._limits = limits
        self._metrics = metrics or Metrics()

    async def run(
        self,
        chat: ChatRun,
        *,
        events: EventSink | None = None,
        progress: ChatResult | None = None,
    ) -> ChatResult:
        """Run to the model's answer. With `events`, progress is reported as it happens and the
        model is asked to stream (`message.delta` events carry its content as it arrives).
        `progress`, if given, is filled as the run goes, so a failed run still shows its steps."""
        result = progress or ChatResult(
            message={}, messages=[], stop_reason="completed", iterations=0
        )
        try:
            async with asyncio.timeout(self._limits.deadline_s):
                return await self._run(chat, events, result)
        except TimeoutError:
            raise ModelTimeoutError(
                f"The chat did not finish within its deadline of {self._limits.deadline_s:g} s."
            ) from None

    async def _run(self, chat: ChatRun, events: EventSink | None, result: ChatResult) -> ChatResult:
        schemas = [tool.schema for tool in chat.tools] or None
        hidden = [*chat.context.values(), *(v for v in chat.secrets.values() if v)]
        run = _Run(chat, {tool.name: tool.doc for tool in chat.tools}, _Scrubber(hidden), events)
        messages = result.messages
        messages.extend(chat.messages)
        for iteration in range(1, chat.max_iterations + 1):
            last = iteration == chat.max_iterations
            if events:
                await events("iteration", {"n": iteration})
            started = time.perf_counter()
            try:
                turn = await self._call_model(run, messages, None if last else schemas)
            finally:
                self._metrics.model_seconds.observe(time.perf_counter() - started)
            result.iterations, result.usage = iteration, result.usage + turn.usage
            # Tool calls are read from the message, not finish_reason: some gateways say "stop".
            over_budget = 0 < self._limits.token_budget < result.usage.total_tokens
            if last or not turn.tool_calls or over_budget:
                result.message = {"role": "assistant", "content": turn.content or ""}
                if last:
                    result.stop_reason = "max_iterations" if schemas else "completed"
                else:  # the answer, or tool calls the budget no longer pays for
                    result.stop_reason = "token_budget" if turn.tool_calls else "completed"
                messages.append(result.message)
                return result
            messages.append(_assistant_tool_message(turn.content, turn.tool_calls))
            records = await self._run_calls(turn.tool_calls, run)
            for call, (record, content) in zip(turn.tool_calls, records, strict=True):
                result.tool_calls.append(record)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        raise AssertionError("unreachable: the last iteration always returns")

    async def _call_model(
        self, run: _Run, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> ModelTurn:
        model, parallel = run.chat.model, run.chat.parallel_tool_calls
        if run.emit is None:
            return await self._model.complete(
                model=model, messages=messages, tools=tools, parallel_tool_calls=parallel
            )
        turn = None
        stream = self._model.stream(
            model=model, messages=messages, tools=tools, parallel_tool_calls=parallel
        )
        async for item in stream:
            if isinstance(item, str):
                await run.emit("message.delta", {"content": item})
            else:
                turn = item
        if turn is None:
            raise malformed_answer()
        return turn

    async def _run_calls(
        self, calls: list[ModelToolCall], run: _Run
    ) -> list[tuple[ToolCallRecord, str]]:
        if run.chat.parallel_tool_calls and len(calls) > 1:
            return list(await asyncio.gather(*(self._run_call(call, run) for call in calls)))
        return [await self._run_call(call, run) for call in calls]

    async def _run_call(self, call: ModelToolCall, run: _Run) -> tuple[ToolCallRecord, str]:
        started = time.perf_counter()
        tool = run.by_name.get(call.name)
        arguments, shown_arguments, parse_error = _parsed(call, tool)
        if run.emit:
            await run.emit(
                "tool_call", {"id": call.id, "name": call.name, "arguments": shown_arguments}
            )
        if not call.name:
            outcome = ToolOutcome.error("the tool call has no function name", "unknown_tool")
        elif tool is None:
            outcome = ToolOutcome.error(
                f"unknown tool '{call.name}'; "
                f"available: {', '.join(sorted(run.by_name)) or 'none'}",
                "unknown_tool",
            )
        elif parse_error is not None:
            outcome = ToolOutcome.error(parse_error, "invalid_arguments")
        else:
            outcome = await self._check_and_run(tool, arguments, run.chat)
        self._metrics.tool_done(
            tool["type"] if tool else "unknown", time.perf_counter() - started, outcome.kind
        )
        content = run.scrub(self._capped(outcome.content))
        if outcome.status == "error":
            content = f"Error: {content}"
        record = ToolCallRecord(
            id=call.id,
            name=call.name,
            arguments=shown_arguments,
            status=outcome.status,
            error=content if outcome.status == "error" else None,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        if run.emit:
            await run.emit(
                "tool_result",
                {
                    "id": call.id,
                    "status": record.status,
                    "duration_ms": record.duration_ms,
                    "preview": content[:PREVIEW_CHARS],
                },
            )
        return record, content

    async def _check_and_run(
        self, tool: dict[str, Any], arguments: dict[str, Any], chat: ChatRun
    ) -> ToolOutcome:
        if tool["type"] == "mcp":  # its JSON Schema is the MCP server's to enforce
            merged, missing = merge_mcp_context(arguments, tool["context_parameters"], chat.context)
        else:
            problems = argument_problems(arguments, tool["function"].get("parameters", {}))
            if problems:
                return ToolOutcome.error(
                    "invalid arguments: " + "; ".join(problems), "invalid_arguments"
                )
            context, unset = _context_values(tool, chat)
            if unset:
                return ToolOutcome.error("; ".join(unset), "missing_context")
            merged, missing = merge_context(
                arguments,
                tool.get("context_parameters", []),
                context,
                optional=self._runner.optional_context(tool),
            )
        if missing:
            return ToolOutcome.error("; ".join(missing), "missing_context")
        try:
            async with asyncio.timeout(self._limits.tool_timeout_s):
                if tool["type"] == "mcp":
                    assert chat.mcp is not None, "MCP tools come with the chat's sessions"
                    return await chat.mcp.call(tool["server"], tool["mcp_tool"], merged)
                return await self._runner.run(tool, merged, secrets=chat.secrets)
        except TimeoutError:
            return ToolOutcome.error(
                f"the tool did not finish within {self._limits.tool_timeout_s:g} s", "timeout"
            )

    def _capped(self, text: str) -> str:
        limit = self._limits.tool_output_max_chars
        if len(text) <= limit:
            return text
        return f"{text[:limit]}\n[truncated: {len(text) - limit} more characters]"


def _parsed(
    call: ModelToolCall, tool: dict[str, Any] | None
) -> tuple[dict[str, Any], Any, str | None]:
    """The call's arguments, what may be shown of them, and why they are unusable (or None).

    A model-supplied value for a context parameter is dropped: the server's value wins, and
    nothing named like a context parameter is ever shown.
    """
    try:
        arguments = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        return {}, call.arguments, f"the arguments are not valid JSON: {exc}"
    if not isinstance(arguments, dict):
        return {}, call.arguments, "the arguments must be a JSON object"
    context_names = {
        name
        for c in (tool or {}).get("context_parameters", [])
        for name in (c["name"], c.get("argument"))
        if name
    }
    arguments = {k: v for k, v in arguments.items() if k not in context_names}
    return arguments, arguments, None


def _context_values(tool: dict[str, Any], chat: ChatRun) -> tuple[dict[str, Any], list[str]]:
    """The context values this tool sees: a secret-backed parameter never takes the caller's
    value, only its secret's; the problems name unset secrets (never a value)."""
    parameters = tool.get("context_parameters", ())
    from_secrets = {c["name"]: c["secret"] for c in parameters if c.get("secret")}
    if not from_secrets:
        return chat.context, []
    unset = [unset_secret(s) for s in from_secrets.values() if chat.secrets.get(s) is None]
    # Secret values replace whatever the caller sent under those names.
    return {**chat.context, **{n: chat.secrets.get(s) for n, s in from_secrets.items()}}, unset


def merge_mcp_context(
    arguments: dict[str, Any], mappings: list[dict[str, Any]], context: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Context values onto the MCP tool arguments they map to; the server's value wins."""
    merged, missing = dict(arguments), []
    for mapping in mappings:
        if mapping["name"] in context:
            merged[mapping["argument"]] = context[mapping["name"]]
        elif mapping["required"]:
            missing.append(
                f"missing context argument '{mapping['name']}': the caller must supply it "
                "in context_arguments"
            )
    return merged, missing


def _assistant_tool_message(content: str | None, calls: list[ModelToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }


class _Scrubber:
    """Replaces context values in text headed for the model (a tool may echo what it received)."""

    def __init__(self, hidden: list[Any]) -> None:
        values = {str(v) for v in hidden if not isinstance(v, bool | list)}
        values |= {str(i) for v in hidden if isinstance(v, list) for i in v}
        self._values = sorted(
            (v for v in values if len(v) >= MIN_REDACTED_LENGTH), key=len, reverse=True
        )

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text
