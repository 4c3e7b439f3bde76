"""The one path every tool call takes, from a chat, POST /tools/{id}/invoke or an MCP client.

Check the arguments against the schema, merge context values and secrets (the server's value
wins), run the kind's executor under the tool timeout, turn anything it lets through into an
error result, cap and scrub the output, and count it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.metrics import Metrics
from app.tools.arguments import argument_problems, merge_context
from app.tools.executors import CallScope, ToolExecutor
from app.tools.outcome import ErrorKind, ToolOutcome
from app.tools.typed import ToolKind, TypedTool

logger = logging.getLogger(__name__)
# Outputs longer than this are scrubbed and cut on a worker thread: the scrubber decodes
# escapes, and 100 KB of echoed encodings held the event loop about 0.25 s.
OFF_LOOP_CHARS = 32_768


@dataclass(frozen=True)
class InvocationLimits:
    timeout_s: float
    output_max_chars: int


@dataclass(frozen=True, slots=True)
class Invocation:
    """A finished call: `content` is capped and scrubbed, ready for a model or a caller."""

    status: Literal["ok", "error"]
    content: str
    kind: ErrorKind | None
    duration_ms: float


def visible_arguments(tool: TypedTool | None, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments without any named like a context parameter: a caller (or its model) never
    sets those, and nothing named like one is shown or recorded."""
    if tool is None or not tool.hidden_names:
        return arguments
    return {k: v for k, v in arguments.items() if k not in tool.hidden_names}


class ToolInvoker:
    """The one place a tool call runs, whatever the caller (a chat, `POST /tools/{id}/invoke`,
    MCP `tools/call`) and whatever the tool's kind.

    It checks the arguments against the tool's schema, merges the server's context values and
    secrets over them, picks the executor of `tool.kind` and runs it under the tool timeout
    (unless the executor says the call never waits), turns anything the executor lets through
    into an error outcome, then scrubs hidden values out of the result, caps it and counts it.
    Callers never branch on the kind: a new kind is a new executor in `executors`.
    """

    def __init__(
        self,
        *,
        executors: Mapping[ToolKind, ToolExecutor[Any]],
        limits: InvocationLimits,
        metrics: Metrics,
    ) -> None:
        self._executors = executors
        self._limits = limits
        self._metrics = metrics

    async def invoke(
        self, tool: TypedTool, arguments: dict[str, Any], call: CallScope
    ) -> Invocation:
        """Run one call; `arguments` are the caller's, already without hidden names."""
        started = time.perf_counter()
        outcome = await self._checked_run(tool, arguments, call)
        elapsed = time.perf_counter() - started
        self._metrics.tool_done(tool.kind, elapsed, outcome.kind)
        if len(outcome.content) > OFF_LOOP_CHARS:  # decoding a large echo is CPU: off the loop
            content = await asyncio.to_thread(self._capped, outcome.content, call)
        else:
            content = self._capped(outcome.content, call)
        return Invocation(outcome.status, content, outcome.kind, round(elapsed * 1000, 3))

    def refused(
        self, message: str, kind: ErrorKind, call: CallScope, tool: TypedTool | None = None
    ) -> Invocation:
        """A call that never reached a tool (unknown name, unreadable arguments), counted."""
        self._metrics.tool_done(tool.kind if tool else "unknown", 0.0, kind)
        return Invocation("error", self._capped(message, call), kind, 0.0)

    async def _checked_run(
        self, tool: TypedTool, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome:
        if tool.validator is not None:  # None: the tool's own server checks (MCP)
            problems = argument_problems(arguments, tool.validator)
            if problems:
                return ToolOutcome.error(
                    "invalid arguments: " + "; ".join(problems), "invalid_arguments"
                )
        merged, problems = merge_context(arguments, tool.context, call.context, call.secrets)
        if problems:
            return ToolOutcome.error("; ".join(problems), "missing_context")
        executor = self._executors[tool.kind]
        try:
            if executor.inline(tool):
                return await executor.run(tool, merged, call)
            async with asyncio.timeout(self._limits.timeout_s):
                return await executor.run(tool, merged, call)
        except TimeoutError:  # asyncio.timeout's, or a tool's own: both are "did not finish"
            return ToolOutcome.error(
                f"the tool did not finish within {self._limits.timeout_s:g} s", "timeout"
            )
        except Exception as exc:  # an executor's bug or an unforeseen library error
            logger.warning("tool %s failed unexpectedly", tool.tool_id, exc_info=True)
            return ToolOutcome.error(
                f"the tool failed unexpectedly ({type(exc).__name__})", "exception"
            )

    def _capped(self, text: str, call: CallScope) -> str:
        """Scrubbed, then cut at the limit. Scrubbed before it is cut (a cut could leave half
        a hidden value nothing would match), but only as far as the cut keeps: the scrubber's
        work is bounded by the limit, not by the upstream's answer."""
        limit = self._limits.output_max_chars
        shown = call.scrub.head(text, limit) if call.scrub else text
        if len(text) <= limit and len(shown) <= limit:
            return shown
        more = max(len(text), len(shown)) - limit
        return f"{shown[:limit]}\n[truncated: {more} more characters]"
