"""One tool run outside a chat, with a chat's limits and a record: `POST /tools/{tool_id}/invoke`
(by id; disabled tools run too, so admin UIs can test a tool before enabling it) and MCP
`tools/call` (by the name the client was shown).

The call takes the same path as a model's: the toolbox assembles the tool with its context,
secrets and sessions (`app/services/toolbox.py`), and `ToolInvoker` runs it (schema check,
context merged with the server's value winning, timeout, output cap and redaction, metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import NotFoundError, UnprocessableError, field_error
from app.limits import Limits
from app.logs import hiding_forms
from app.schemas.fields import arguments_problem
from app.schemas.runs import RunKind
from app.services.client_tokens import ClientToken
from app.services.runs import RunRecorder, RunRecording, recording
from app.services.toolbox import Selection, Toolbox, UnavailableToolsError
from app.tools.invocation import Invocation, ToolInvoker, visible_arguments
from app.tools.outcome import ErrorKind
from app.tools.typed import TypedTool


@dataclass(frozen=True, slots=True)
class ToolRunError:
    kind: ErrorKind
    message: str  # what a model would read, hidden values redacted


@dataclass(frozen=True, slots=True)
class ToolRun:
    """A finished run of one tool (the `InvokeResult` shape; orjson serializes it as it is)."""

    run_id: str
    tool_id: str
    status: Literal["ok", "error"]
    content: str | None  # None on errors
    error: ToolRunError | None
    duration_ms: float
    note: str | None = None  # why the tool's `output.select` did not apply


@dataclass(frozen=True, slots=True)
class McpToolRun(ToolRun):
    """A run for `/mcp` (`call_by_name`): with an MCP tool's result as its server sent it
    (scrubbed), passed on to the client in place of the text."""

    mcp: dict[str, Any] | None = None


class InvocationService:
    """Runs one tool for a caller: a run slot, the caller's toolset of that one tool, the
    invoker, a record of kind `invoke` or `mcp`."""

    def __init__(
        self,
        *,
        toolbox: Toolbox,
        invoker: ToolInvoker,
        recorder: RunRecorder,
        limits: Limits,
    ) -> None:
        self._toolbox = toolbox
        self._invoker = invoker
        self._recorder = recorder
        self._limits = limits

    async def invoke(
        self,
        tool_id: str,
        arguments: dict[str, Any],
        context: Mapping[str, Any],
        *,
        tenant_id: str,
        token: ClientToken | None = None,
    ) -> ToolRun:
        """`POST /tools/{tool_id}/invoke`: 404 for an id the tenant does not have (or an MCP
        tool its server does not list), 429 past its limits."""
        selection = Selection(tool_ids=[tool_id], admin=True, strict=True)
        return await self._call(selection, arguments, context, tenant_id, token, "invoke")

    async def call_by_name(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        tenant_id: str,
        token: ClientToken | None = None,
    ) -> ToolRun:
        """MCP `tools/call`: the enabled tool (or MCP server tool) offered under `name`."""
        selection = Selection(tool_ids=[name], by_name=True, strict=True)
        return await self._call(selection, arguments, {}, tenant_id, token, "mcp")

    async def _call(
        self,
        selection: Selection,
        arguments: dict[str, Any],
        context: Mapping[str, Any],
        tenant_id: str,
        token: ClientToken | None,
        kind: RunKind,
    ) -> ToolRun:
        problem = arguments_problem(arguments)  # before anything runs or is recorded
        if problem is not None:
            raise UnprocessableError(
                "The tool's arguments are not acceptable.",
                errors=[field_error("$.arguments", problem)],
            )
        release = await self._limits.admit_run(tenant_id)
        try:
            try:
                toolset = await self._toolbox.open(
                    tenant_id, selection, token=token, context=context
                )
            except UnavailableToolsError:
                [wanted] = selection.tool_ids or ["?"]
                raise NotFoundError(f"tool '{wanted}' does not exist") from None
            async with toolset:
                tool = toolset.only()
                visible = visible_arguments(tool, arguments)
                with hiding_forms(toolset.call.scrub.values):
                    with recording(self._recorder, tenant_id=tenant_id, kind=kind) as run:
                        _fill_record(run, tool, visible, None)  # a caller that leaves: cancelled
                        result = await self._invoker.invoke(tool, visible, toolset.call)
                        _fill_record(run, tool, visible, result)
                        return _tool_run(run.run_id, tool, result, native=kind == "mcp")
        finally:
            await release()  # every replica sees the slot free before the answer


def _fill_record(
    run: RunRecording, tool: TypedTool, arguments: dict[str, Any], result: Invocation | None
) -> None:
    """A run of one tool call, no model; without a result yet, it was cancelled."""
    if result is not None:
        run.status = "completed" if result.status == "ok" else "error"
        run.error = result.content if result.status == "error" else None
    run.tool_calls = [
        {
            "id": run.run_id,
            "name": tool.name,
            "tool_id": tool.tool_id,
            "status": result.status if result else "error",
            "duration_ms": result.duration_ms if result else 0.0,
            "arguments": arguments,
            **({"note": result.note} if result and result.note else {}),
        }
    ]


def _tool_run(run_id: str, tool: TypedTool, result: Invocation, *, native: bool) -> ToolRun:
    failed = result.status == "error"
    fields: dict[str, Any] = {
        "run_id": run_id,
        "tool_id": tool.tool_id,
        "status": result.status,
        "content": None if failed else result.content,
        "error": ToolRunError(result.kind or "exception", result.content) if failed else None,
        "duration_ms": result.duration_ms,
        "note": result.note,
    }
    return McpToolRun(**fields, mcp=result.mcp) if native else ToolRun(**fields)
