"""The one path every tool call takes, from a chat, POST /tools/{id}/invoke or an MCP client.

Check the arguments against the schema, merge context values, presets and secrets (the server's
value wins), run the kind's executor under the tool's timeout (never above the operator's), turn
anything it lets through into an error result, shape the output (`output.select`, `max_chars`),
cap and scrub it (redaction last), and count it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from app.observe.metrics import Metrics
from app.observe.telemetry import tool_finished, tool_span
from app.tools.arguments import argument_problems, merge_context
from app.tools.executors import CallScope, ToolExecutor
from app.tools.outcome import ErrorKind, ToolOutcome
from app.tools.progress import PROGRESS_MAX_CHARS, Progress, ProgressSink
from app.tools.shaping import selected
from app.tools.typed import ToolKind, TypedTool

logger = logging.getLogger(__name__)
# Outputs longer than this are scrubbed and cut on a worker thread: the scrubber decodes
# escapes, and 100 KB of echoed encodings held the event loop about 0.25 s.
OFF_LOOP_CHARS = 32_768
# An MCP result passed on to `/mcp` clients as it is (images, structured content) up to this;
# beyond it they get the text (capped at TOOL_OUTPUT_MAX_CHARS) like a model does.
NATIVE_MAX_BYTES = 4 * 1_048_576
# Progress reports one call passes on; past this they are dropped (a watcher's queue stays
# bounded whatever a tool yields).
PROGRESS_MAX_REPORTS = 1000


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
    mcp: dict[str, Any] | None = None  # an MCP result's own parts, scrubbed (`ToolOutcome.mcp`)
    note: str | None = None  # why the tool's `output.select` did not apply (the run record)


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
        self,
        tool: TypedTool,
        arguments: dict[str, Any],
        call: CallScope,
        *,
        progress: ProgressSink | None = None,
        call_id: str | None = None,
    ) -> Invocation:
        """Run one call; `arguments` are the caller's, already without hidden names. With
        `progress`, the tool's progress reports go there, scrubbed and cut like its output.
        `call_id`: the model's id for the call, if a model made it (the call's span names it)."""
        with tool_span(
            name=tool.name, tool_id=tool.tool_id, kind=tool.kind, call_id=call_id
        ) as span:
            done = await self._invoke(tool, arguments, call, progress)
            tool_finished(span, done, arguments=arguments, scrub=call.scrub)
            return done

    async def _invoke(
        self,
        tool: TypedTool,
        arguments: dict[str, Any],
        call: CallScope,
        progress: ProgressSink | None,
    ) -> Invocation:
        if progress is not None:
            call = replace(call, progress=self._reporting(progress, call))
        started = time.perf_counter()
        outcome = await self._checked_run(tool, arguments, call)
        elapsed = time.perf_counter() - started
        self._metrics.tool_done(tool.kind, elapsed, outcome.kind)
        # Decoding a large echo is CPU, and so is a tenant's JMESPath expression: off the loop.
        if len(outcome.content) > OFF_LOOP_CHARS or tool.output_select is not None:
            content, note = await asyncio.to_thread(self._shaped, tool, outcome, call)
        else:
            content, note = self._shaped(tool, outcome, call)
        native = await _scrubbed_native(outcome.mcp, call) if outcome.mcp is not None else None
        elapsed_ms = round(elapsed * 1000, 3)
        return Invocation(outcome.status, content, outcome.kind, elapsed_ms, mcp=native, note=note)

    def refused(
        self,
        message: str,
        kind: ErrorKind,
        call: CallScope,
        tool: TypedTool | None = None,
        *,
        call_id: str | None = None,
        name: str = "",
    ) -> Invocation:
        """A call that never reached a tool (unknown name `name`, unreadable arguments),
        counted (and traced, as a call that failed)."""
        tool_kind = tool.kind if tool else "unknown"
        self._metrics.tool_done(tool_kind, 0.0, kind)
        done = Invocation("error", self._capped(message, call), kind, 0.0)
        shown = tool.name if tool else name or "unknown"
        tool_id = tool.tool_id if tool else None
        with tool_span(name=shown, tool_id=tool_id, kind=tool_kind, call_id=call_id) as span:
            tool_finished(span, done, arguments=None, scrub=call.scrub)
        return done

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
        timeout_s = min(tool.timeout_s or self._limits.timeout_s, self._limits.timeout_s)
        try:
            if executor.inline(tool):
                return await executor.run(tool, merged, call)
            async with asyncio.timeout(timeout_s):
                return await executor.run(tool, merged, call)
        except TimeoutError:  # asyncio.timeout's, or a tool's own: both are "did not finish"
            return ToolOutcome.error(f"the tool did not finish within {timeout_s:g} s", "timeout")
        except Exception as exc:  # an executor's bug or an unforeseen library error
            logger.warning("tool %s failed unexpectedly", tool.tool_id, exc_info=True)
            return ToolOutcome.error(
                f"the tool failed unexpectedly ({type(exc).__name__})", "exception"
            )

    def _shaped(
        self, tool: TypedTool, outcome: ToolOutcome, call: CallScope
    ) -> tuple[str, str | None]:
        """The tool's own shaping (`output.select`, then its `max_chars` under the operator's
        cap) on a result; redaction runs last, in `_capped`."""
        content, note = outcome.content, None
        if outcome.status == "ok" and tool.output_select is not None:
            content, note = selected(tool.output_select, content)
        limit = min(
            tool.output_max_chars or self._limits.output_max_chars, self._limits.output_max_chars
        )
        return self._capped(content, call, limit), note

    def _reporting(self, sink: ProgressSink, call: CallScope) -> ProgressSink:
        """`sink`, fed only what may leave the call: each message scrubbed and cut, the
        fraction in [0, 1], at most PROGRESS_MAX_REPORTS reports."""
        sent = 0

        async def report(step: Progress) -> None:
            nonlocal sent
            if sent >= PROGRESS_MAX_REPORTS:
                return
            sent += 1
            step = step.bounded()
            message = step.message
            if call.scrub:  # reads no further into the message than the cut needs
                message = call.scrub.head(message, PROGRESS_MAX_CHARS)
            await sink(Progress(message[:PROGRESS_MAX_CHARS], step.fraction))

        return report

    def _capped(self, text: str, call: CallScope, limit: int | None = None) -> str:
        """Scrubbed, then cut at the limit. Scrubbed before it is cut (a cut could leave half
        a hidden value nothing would match), but only as far as the cut keeps: the scrubber's
        work is bounded by the limit, not by the upstream's answer."""
        limit = limit or self._limits.output_max_chars
        shown = call.scrub.head(text, limit) if call.scrub else text
        if len(text) <= limit and len(shown) <= limit:
            return shown
        more = max(len(text), len(shown)) - limit
        return f"{shown[:limit]}\n[truncated: {more} more characters]"


async def _scrubbed_native(native: dict[str, Any], call: CallScope) -> dict[str, Any] | None:
    """An MCP result's own parts with hidden values scrubbed (off the loop: images and
    structured content can be large); None past NATIVE_MAX_BYTES (the text stands for it)."""
    try:
        encoded = orjson.dumps(native)
    except orjson.JSONEncodeError:  # nested past orjson's depth: the text stands for it
        return None
    if len(encoded) > NATIVE_MAX_BYTES:
        return None
    if not call.scrub:
        return native
    if len(encoded) <= OFF_LOOP_CHARS:
        scrubbed: dict[str, Any] = call.scrub.json(native)
    else:
        scrubbed = await asyncio.to_thread(call.scrub.json, native)
    return scrubbed
