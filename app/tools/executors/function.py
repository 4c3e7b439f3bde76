"""Function tools: a Python callable of the server's function dictionary."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import orjson
from pydantic import ValidationError

from app.tools.executors import CallScope
from app.tools.outcome import ToolOutcome
from app.tools.registry import FunctionRegistry
from app.tools.typed import FunctionTool


def as_text(result: Any) -> str:
    """A function's return value as the text a model reads (JSON for anything but a string)."""
    if isinstance(result, str):
        return result
    return orjson.dumps(result, default=str).decode()


class FunctionExecutor:
    """Calls a function of the server's function dictionary by the tool's name: coroutine
    functions and non-blocking plain ones on the loop, other plain ones in the shared thread
    pool (so a slow function never stalls other requests). A raised exception becomes an error
    outcome; the return value is the result (JSON for anything but a string)."""

    def __init__(self, *, registry: FunctionRegistry, threads: ThreadPoolExecutor) -> None:
        self._registry = registry
        self._threads = threads

    def inline(self, tool: FunctionTool) -> bool:
        entry = self._registry.get(tool.name)
        return entry is not None and not entry.blocking and not entry.is_async

    async def run(
        self, tool: FunctionTool, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome:
        entry = self._registry.get(tool.name)
        if entry is None:
            return ToolOutcome.error(
                f"the server no longer has a function called '{tool.name}'", "unknown_tool"
            )
        try:
            arguments = entry.typed_arguments(arguments)
        except ValidationError as exc:
            shown = "; ".join(f"{e['loc']}: {e['msg']}" for e in exc.errors()[:5])
            return ToolOutcome.error(f"invalid arguments: {shown}"[:500], "invalid_arguments")
        try:
            if entry.is_async:
                result = await entry.func(**arguments)
            elif not entry.blocking:  # registered as quick and non-blocking: no thread hop
                result = entry.func(**arguments)
            else:
                # A plain function runs in a worker thread so it never blocks the event loop,
                # in the caller's context: its log lines keep the request id, tenant and the
                # call's hidden values (run_in_executor alone would drop them).
                loop = asyncio.get_running_loop()
                run = partial(contextvars.copy_context().run, entry.func, **arguments)
                result = await loop.run_in_executor(self._threads, run)
        except Exception as exc:
            return ToolOutcome.error(f"{type(exc).__name__}: {exc}", "exception")
        return ToolOutcome("ok", as_text(result))
