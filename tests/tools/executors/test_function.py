"""The function executor (app/tools/executors/function.py): where each kind of function runs,
and its failures as results."""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.tools.executors import CallScope
from app.tools.executors.function import FunctionExecutor
from app.tools.outcome import ToolOutcome
from app.tools.registry import FunctionRegistry
from app.tools.typed import FunctionTool

REQUEST = contextvars.ContextVar("request", default="none")
registry = FunctionRegistry()


@registry.register
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.register(blocking=False)
def quick(x: int) -> dict[str, Any]:
    """Quick and non-blocking."""
    return {"x": x, "thread": threading.current_thread().name}


@registry.register
def blocking() -> str:
    """A plain function: it may block."""
    return f"{threading.current_thread().name} {REQUEST.get()}"


@registry.register
def broken() -> str:
    """Raises."""
    raise ValueError("bad input")


def tool(name: str) -> FunctionTool:
    return FunctionTool(
        tool_id=name,
        name=name,
        description="",
        parameters={"properties": {}, "required": []},
        json_parameters={"type": "object", "properties": {}},
    )


async def test_each_kind_of_function_runs_where_it_should() -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="tools") as threads:
        executor = FunctionExecutor(registry=registry, threads=threads)
        assert await executor.run(tool("add"), {"a": 1, "b": 2}, CallScope()) == ToolOutcome(
            "ok", "3"
        )
        quick_outcome = await executor.run(tool("quick"), {"x": 1}, CallScope())
        assert quick_outcome.content == '{"x":1,"thread":"MainThread"}'  # JSON, on the loop
        REQUEST.set("r-1")
        blocking_outcome = await executor.run(tool("blocking"), {}, CallScope())
        # in the pool, in the caller's context (its log lines keep the request's values)
        assert blocking_outcome.content.startswith("tools") and blocking_outcome.content.endswith(
            " r-1"
        )
        assert [executor.inline(tool(n)) for n in ("add", "quick", "blocking")] == [
            False,
            True,
            False,
        ]


async def test_an_exception_and_a_missing_function_are_error_results() -> None:
    with ThreadPoolExecutor(1) as threads:
        executor = FunctionExecutor(registry=registry, threads=threads)
        assert await executor.run(tool("broken"), {}, CallScope()) == ToolOutcome.error(
            "ValueError: bad input", "exception"
        )
        assert await executor.run(tool("gone"), {}, CallScope()) == ToolOutcome.error(
            "the server no longer has a function called 'gone'", "unknown_tool"
        )
