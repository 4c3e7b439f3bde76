"""The invoker (app/tools/invocation.py), below the HTTP layer: what every kind of tool gets
(argument checks, timeout, cap, scrub), and an executor's failures as error results. Each
executor alone: tests/tools/executors/."""

from __future__ import annotations

import asyncio
from typing import Any

from app.observe.metrics import Metrics
from app.tools.executors import CallScope
from app.tools.invocation import InvocationLimits, ToolInvoker
from app.tools.outcome import ToolOutcome
from app.tools.scrub import Scrubber
from app.tools.typed import ContextSlot, FunctionTool


def _function(**extra: Any) -> FunctionTool:
    return FunctionTool(
        tool_id="f",
        name="f",
        description="",
        parameters={"properties": {"x": {"type": "integer"}}, "required": []},
        json_parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
        **extra,
    )


class Raising:
    """An executor with a bug: it lets an exception through."""

    def inline(self, tool: Any) -> bool:
        return False

    async def run(self, tool: Any, arguments: dict[str, Any], call: CallScope) -> ToolOutcome:
        raise KeyError("a bug")


class Sleeping:
    def inline(self, tool: Any) -> bool:
        return False

    async def run(self, tool: Any, arguments: dict[str, Any], call: CallScope) -> ToolOutcome:
        await asyncio.sleep(5)
        return ToolOutcome("ok", "late")


class Echoing:
    def inline(self, tool: Any) -> bool:
        return False

    async def run(self, tool: Any, arguments: dict[str, Any], call: CallScope) -> ToolOutcome:
        return ToolOutcome("ok", repr(sorted(arguments.items())))


class Answering:
    def __init__(self, text: str) -> None:
        self.text = text

    def inline(self, tool: Any) -> bool:
        return False

    async def run(self, tool: Any, arguments: dict[str, Any], call: CallScope) -> ToolOutcome:
        return ToolOutcome("ok", self.text)


def _invoker(executor: Any, metrics: Metrics | None = None) -> ToolInvoker:
    return ToolInvoker(
        executors={"function": executor, "external": executor, "mcp": executor},
        limits=InvocationLimits(timeout_s=0.2, output_max_chars=50),
        metrics=metrics or Metrics(),
    )


async def test_an_exception_an_executor_lets_through_is_an_error_result() -> None:
    metrics = Metrics()
    result = await _invoker(Raising(), metrics).invoke(_function(), {}, CallScope())
    assert (result.status, result.kind) == ("error", "exception")
    assert result.content == "the tool failed unexpectedly (KeyError)"
    assert b'toolgate_tool_errors_total{kind="exception",type="function"} 1.0' in (
        metrics.exposition()
    )


async def test_timeout_cap_and_scrub_apply_to_every_kind() -> None:
    timed_out = await _invoker(Sleeping()).invoke(_function(), {}, CallScope())
    assert (timed_out.kind, timed_out.content) == (
        "timeout",
        "the tool did not finish within 0.2 s",
    )
    tool = _function(context=(ContextSlot("user", "user", required=True),))
    scope = CallScope(context={"user": "hidden-user-value"}, scrub=Scrubber(["hidden-user-value"]))
    result = await _invoker(Echoing()).invoke(tool, {"x": 1}, scope)
    # The context value reached the executor, and came back redacted and capped at 50.
    assert result.content.startswith("[('user', '[redacted]'), ('x', 1)]"[:50])
    assert "hidden-user-value" not in result.content


async def test_an_escaped_echo_across_the_cut_is_redacted_whole() -> None:
    """Only what the cut keeps is scrubbed (the work is bounded by the cap), and an echo that
    starts before the cut is still found whole."""
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    text = "x" * 45 + "wJalrXUtnFEMI/K7MDENG\\u002BbPxRfiCYEXAMPLEKEY" + "y" * 1000
    scope = CallScope(scrub=Scrubber([secret]))
    result = await _invoker(Answering(text)).invoke(_function(), {}, scope)
    more = len(text) - 50
    assert result.content == "x" * 45 + "[reda" + f"\n[truncated: {more} more characters]"


async def test_arguments_are_checked_before_any_executor_runs() -> None:
    result = await _invoker(Raising()).invoke(_function(), {"x": "one"}, CallScope())
    assert (result.kind, result.content) == (
        "invalid_arguments",
        "invalid arguments: 'x' must be an integer",
    )
