"""POST /tools/{tool_id}/invoke: one tool run outside a chat, with a chat's limits and a record.

Admin UIs test a tool here before enabling it, so disabled tools run too. The call takes the
same path as a model's (`ToolInvoker`): schema check, context and secrets merged (the server's
value wins), timeout, output cap and redaction, metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.errors import NotFoundError, UnprocessableError
from app.limits import Limits
from app.logs import hiding_forms
from app.mcp.config import SEPARATOR, McpServer
from app.mcp.hub import ChatSessions, mcp_server_tool
from app.repositories.database import utc_now
from app.schemas.invocations import InvokeRequest
from app.services.catalog import ToolCatalog
from app.services.chat import hidden_values, new_run_id
from app.services.mcp_servers import McpServerService
from app.services.outbound import TenantOutbound
from app.services.runs import RunRecorder, run_record
from app.services.secrets import SecretService
from app.services.tools import readable
from app.tools.executors import CallScope
from app.tools.invocation import Invocation, ToolInvoker, visible_arguments
from app.tools.scrub import Scrubber
from app.tools.typed import ExternalTool, TypedTool


class InvocationService:
    def __init__(
        self,
        *,
        catalog: ToolCatalog,
        invoker: ToolInvoker,
        recorder: RunRecorder,
        limits: Limits,
        secrets: SecretService,
        mcp: McpServerService,
        outbound: TenantOutbound,
    ) -> None:
        self._outbound = outbound
        self._catalog = catalog
        self._invoker = invoker
        self._recorder = recorder
        self._limits = limits
        self._secrets = secrets
        self._mcp = mcp

    async def invoke(
        self, tool_id: str, request: InvokeRequest, *, tenant_id: str
    ) -> dict[str, Any]:
        """Run the tool once; 404 for an id the tenant does not have, 429 past its limits."""
        return await self.call(
            tool_id, request.arguments, dict(request.context_arguments), tenant_id=tenant_id
        )

    async def call(
        self,
        tool_id: str,
        arguments: dict[str, Any],
        context: dict[str, Any],
        *,
        tenant_id: str,
        kind: str = "invoke",
        allowed: Callable[[TypedTool], bool] | None = None,
    ) -> dict[str, Any]:
        """One tool run, recorded as a run of `kind`; `allowed` turns other tools into 404s
        (the MCP endpoint: enabled tools, and a client token's selection)."""
        release = await self._limits.admit_run(tenant_id)
        sessions: ChatSessions | None = None
        try:
            tool, server = await self._resolve(tool_id, context, tenant_id=tenant_id)
            if allowed is not None and not allowed(tool):
                raise NotFoundError(f"tool '{tool_id}' does not exist")
            if server is not None:
                sessions = self._mcp.hub.chat_sessions([server], context)
            secrets = (
                await self._secrets.resolve(set(tool.secrets), tenant_id=tenant_id)
                if tool.secrets
                else {}
            )
            scrub = Scrubber(hidden_values(context, secrets, [server] if server else []))
            http = (
                await self._outbound.http_client(tenant_id)
                if isinstance(tool, ExternalTool)
                else None
            )
            call = CallScope(context, secrets, sessions, scrub, http)
            with hiding_forms(scrub.values):
                return await self._run(
                    tool, visible_arguments(tool, arguments), call, tenant_id, kind
                )
        finally:
            if sessions is not None:
                await sessions.aclose()
            await release()  # every replica sees the slot free before the answer

    async def _run(
        self,
        tool: TypedTool,
        arguments: dict[str, Any],
        call: CallScope,
        tenant_id: str,
        kind: str,
    ) -> dict[str, Any]:
        run_id, started = new_run_id(), utc_now()
        result: Invocation | None = None
        try:
            result = await self._invoker.invoke(tool, arguments, call)
        finally:  # a caller that leaves mid-call still gets its run recorded (cancelled)
            record = _invocation_record(run_id, started, tool, arguments, result, kind)
            self._recorder.record(record, tenant_id=tenant_id)
        return {
            "run_id": run_id,
            "tool_id": tool.tool_id,
            "status": result.status,
            "content": result.content if result.status == "ok" else None,
            "error": (
                {"kind": result.kind or "exception", "message": result.content}
                if result.status == "error"
                else None
            ),
            "duration_ms": result.duration_ms,
        }

    async def _resolve(
        self, tool_id: str, context: dict[str, Any], *, tenant_id: str
    ) -> tuple[TypedTool, McpServer | None]:
        """The tenant's stored tool, or else a `{server}__{tool}` of one of its MCP servers
        (with that server)."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        entry = snapshot.by_id.get(tool_id)
        if entry is not None:
            return readable(entry), None
        server_name, separator, _ = tool_id.partition(SEPARATOR)
        if not separator:
            raise NotFoundError(f"tool '{tool_id}' does not exist")
        try:
            [server] = await self._mcp.resolve([server_name], tenant_id=tenant_id, path="tool_id")
        except UnprocessableError:
            raise NotFoundError(f"tool '{tool_id}' does not exist") from None
        for listed in await self._mcp.hub.server_tools(server, context):
            tool = mcp_server_tool(server, listed)
            if tool.tool_id == tool_id:
                return tool, server
        raise NotFoundError(f"tool '{tool_id}' does not exist (MCP server '{server_name}')")


def _invocation_record(
    run_id: str,
    started: datetime,
    tool: TypedTool,
    arguments: dict[str, Any],
    result: Invocation | None,
    kind: str,
) -> dict[str, Any]:
    """A run of kind `invoke` or `mcp`: one tool call, no model; `cancelled` if it never
    finished."""
    if result is None:
        status, error = "cancelled", None
    else:
        status = "completed" if result.status == "ok" else "error"
        error = result.content if result.status == "error" else None
    call = {
        "id": run_id,
        "name": tool.name,
        "tool_id": tool.tool_id,
        "status": result.status if result else "error",
        "duration_ms": result.duration_ms if result else 0.0,
        "arguments": arguments,
    }
    return run_record(
        run_id=run_id, kind=kind, started=started, status=status, error=error, tool_calls=[call]
    )
