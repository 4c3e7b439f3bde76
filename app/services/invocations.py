"""One tool run outside a chat, with a chat's limits and a record: `POST /tools/{tool_id}/invoke`
(by id; disabled tools run too, so admin UIs can test a tool before enabling it) and MCP
`tools/call` (by the name the client was shown).

The call takes the same path as a model's: the toolbox assembles the tool with its context,
secrets and sessions (`app/services/toolbox.py`), and `ToolInvoker` runs it (schema check,
context merged with the server's value winning, timeout, output cap and redaction, metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import AppError, NotFoundError, UnprocessableError, field_error, problem_body
from app.limits.local import Limits, Release
from app.observe.logs import hiding_forms
from app.schemas.fields import arguments_problem
from app.schemas.runs import RunKind
from app.services.client_tokens import ClientToken
from app.services.runs import RunRecorder, RunRecording, new_run_id, recording
from app.services.toolbox import Selection, Toolbox, Toolset, UnavailableToolsError
from app.tools.invocation import Invocation, ToolInvoker, visible_arguments
from app.tools.outcome import ErrorKind
from app.tools.progress import Progress, ProgressSink
from app.tools.typed import TypedTool

logger = logging.getLogger(__name__)
# One server-sent event (name, data), or None for a keep-alive comment.
RunEvent = tuple[str, dict[str, Any]] | None


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
        prepared = await self.prepare_invoke(
            tool_id, arguments, context, tenant_id=tenant_id, token=token
        )
        return await prepared.run()

    async def prepare_invoke(
        self,
        tool_id: str,
        arguments: dict[str, Any],
        context: Mapping[str, Any],
        *,
        tenant_id: str,
        token: ClientToken | None = None,
    ) -> PreparedRun:
        """`invoke`, every 4xx raised here and the run left to `PreparedRun.run` (a streamed
        invoke answers its errors before the stream starts). The tenant key runs any readable
        tool, disabled ones too; an end user (`token`) only the enabled tools it may use."""
        selection = Selection(tool_ids=[tool_id], admin=token is None, strict=True)
        return await self._prepare(selection, arguments, context, tenant_id, token, "invoke")

    async def call_by_name(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        tenant_id: str,
        token: ClientToken | None = None,
        progress: ProgressSink | None = None,
    ) -> ToolRun:
        """MCP `tools/call`: the enabled tool (or MCP server tool) offered under `name`."""
        selection = Selection(tool_ids=[name], by_name=True, strict=True)
        prepared = await self._prepare(selection, arguments, {}, tenant_id, token, "mcp")
        return await prepared.run(progress)

    async def _prepare(
        self,
        selection: Selection,
        arguments: dict[str, Any],
        context: Mapping[str, Any],
        tenant_id: str,
        token: ClientToken | None,
        kind: RunKind,
    ) -> PreparedRun:
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
        except BaseException:
            await release()
            raise
        return PreparedRun(
            self, toolset, arguments, tenant_id=tenant_id, kind=kind, release=release
        )


class PreparedRun:
    """One tool run, checked, holding a run slot and its toolset until `run()` ends (or the
    object is dropped unrun: collecting it frees the slot)."""

    def __init__(
        self,
        service: InvocationService,
        toolset: Toolset,
        arguments: dict[str, Any],
        *,
        tenant_id: str,
        kind: RunKind,
        release: Release,
    ) -> None:
        self._service = service
        self._toolset = toolset
        self._arguments = arguments
        self._tenant_id = tenant_id
        self._kind: RunKind = kind
        self._release = release
        self.run_id = new_run_id()

    def __del__(self) -> None:
        release = getattr(self, "_release", None)  # None: built only in part
        if release is not None:
            release()  # dropped unrun: the slot is freed (a run freed it already: no-op)

    async def run(self, progress: ProgressSink | None = None) -> ToolRun:
        """Run the tool (its progress reports to `progress`) and record the run."""
        service, toolset = self._service, self._toolset
        try:
            async with toolset:
                tool = toolset.only()
                visible = visible_arguments(tool, self._arguments)
                with (
                    hiding_forms(toolset.call.scrub.values),
                    recording(
                        service._recorder,
                        tenant_id=self._tenant_id,
                        kind=self._kind,
                        run_id=self.run_id,
                    ) as run,
                ):
                    result: Invocation | None = None
                    try:
                        result = await service._invoker.invoke(
                            tool, visible, toolset.call, progress=progress
                        )
                    finally:  # without a result (a caller that left): cancelled
                        _fill_record(run, tool, visible, result)
                    return _tool_run(run.run_id, tool, result, native=self._kind == "mcp")
        finally:
            await self._release()  # every replica sees the slot free before the answer

    async def events(self, *, keepalive_s: float) -> AsyncGenerator[RunEvent, None]:
        """The run as server-sent events: `tool_progress` (message, fraction) as the tool
        reports, then `done` (the `ToolRun`) or `error` (a problem body); None while nothing
        happens for `keepalive_s`. A consumer that stops early cancels the run."""
        queue: asyncio.Queue[RunEvent | StopAsyncIteration] = asyncio.Queue()

        async def report(step: Progress) -> None:
            await queue.put(("tool_progress", {"message": step.message, "fraction": step.fraction}))

        async def work() -> None:
            try:
                await queue.put(("done", dataclasses.asdict(await self.run(report))))
            except AppError as exc:
                await queue.put(("error", exc.body()))
            except Exception:
                logger.exception("invoke stream failed")
                await queue.put(("error", problem_body(500, "An unexpected error occurred.")))
            finally:
                await queue.put(StopAsyncIteration())

        task = asyncio.create_task(work())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), keepalive_s)
                except TimeoutError:
                    yield None
                    continue
                if isinstance(item, StopAsyncIteration):
                    return
                yield item
        finally:
            if not task.done():  # the client left: the tool stops, the run is `cancelled`
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._release()


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
            "started_ms": 0.0,  # the record starts as the call does
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
