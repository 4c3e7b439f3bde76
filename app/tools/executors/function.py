"""Function tools: a Python callable of the server's function dictionary."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import orjson
from pydantic import ValidationError

from app.http.client import OutboundClient
from app.http.netguard import OutboundBlockedError
from app.tools.calls import CURRENT, FunctionContext
from app.tools.executors import CallScope
from app.tools.executors.stepping import run_generator
from app.tools.outcome import ToolFailure, ToolOutcome
from app.tools.registry import FunctionRegistry, RegisteredFunction, ToolRequest
from app.tools.typed import FunctionTool
from app.tools.web import WebAccess


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

    def __init__(
        self,
        *,
        registry: FunctionRegistry,
        threads: ThreadPoolExecutor,
        http: OutboundClient | None = None,
        web: WebAccess | None = None,
    ) -> None:
        self._registry = registry
        self._threads = threads
        self._http = http  # the shared guarded client, for calls without a tenant client
        self._web = web

    def inline(self, tool: FunctionTool) -> bool:
        entry = self._registry.get(tool.name)
        return (
            entry is not None
            and not entry.blocking
            and not entry.is_async
            and not entry.is_generator  # it awaits its watcher: it may wait
        )

    async def run(
        self, tool: FunctionTool, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome:
        entry = self._registry.get(tool.name)
        if entry is None:
            return ToolOutcome.error(
                f"the server no longer has a function called '{tool.name}'", "unknown_tool"
            )
        try:
            arguments = entry.typed_arguments(arguments)  # nested models as the function's types
        except ValidationError as exc:
            shown = "; ".join(f"{e['loc']}: {e['msg']}" for e in exc.errors()[:5])
            return ToolOutcome.error(f"invalid arguments: {shown}"[:500], "invalid_arguments")
        request = ToolRequest(tool.tool_id, tool.name, arguments)
        # What the function may reach: read by `function_context()` (the web built-ins).
        reset = CURRENT.set(FunctionContext(call.http or self._http, self._web))
        try:
            if entry.is_generator:  # progress reports, then the result
                steps = entry.func(**arguments)
                outcome = await run_generator(
                    steps, sink=call.progress, threads=self._threads, blocking=entry.blocking
                )
                result = _post(entry, request, outcome)
            elif entry.is_async:
                result = _post(entry, request, await entry.func(**arguments))
            elif not entry.blocking:  # registered as quick and non-blocking: no thread hop
                result = _called(entry, request)
            else:
                # A plain function runs in a worker thread so it never blocks the event loop,
                # in the caller's context: its log lines keep the request id, tenant and the
                # call's hidden values (run_in_executor alone would drop them).
                loop = asyncio.get_running_loop()
                run = partial(contextvars.copy_context().run, _called, entry, request)
                result = await loop.run_in_executor(self._threads, run)
        except PostProcessorError as exc:
            return ToolOutcome.error(str(exc), "exception")
        except ToolFailure as exc:
            return ToolOutcome.error(str(exc), exc.kind)
        except OutboundBlockedError as exc:  # the tenant's client refused: as for external tools
            return ToolOutcome.error(f"blocked: {exc}", "blocked")
        except Exception as exc:
            return ToolOutcome.error(f"{type(exc).__name__}: {exc}", "exception")
        finally:
            CURRENT.reset(reset)
        return ToolOutcome("ok", as_text(result))


class PostProcessorError(Exception):
    """The operator's post-processor failed (its message names it, not the tool)."""


def _called(entry: RegisteredFunction, request: ToolRequest) -> Any:
    return _post(entry, request, entry.func(**request.arguments))


def _post(entry: RegisteredFunction, request: ToolRequest, result: Any) -> Any:
    """The result through the function's post-processor, if it registered one."""
    if entry.postprocess is None:
        return result
    try:
        return entry.postprocess(request, result)
    except Exception as exc:
        raise PostProcessorError(f"the post-processor failed: {type(exc).__name__}: {exc}") from exc
