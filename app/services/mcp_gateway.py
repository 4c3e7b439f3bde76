"""What `/mcp` serves a caller: its toolset as MCP tools, and calls to them by name.

The caller's tools come from the toolbox like every other entry point's (`tools/list`: every
tool it may use, the tenant's MCP servers' tools included; a server that cannot be reached is
left out); a call goes through the one invocation path, recorded as a run of kind `mcp`. An MCP
client is an LLM client: with a client token, the token's bound values are the context; with the
tenant key there is none (`app/services/toolbox.py`, the context contract).
"""

from __future__ import annotations

from typing import Any

import mcp_types

from app.errors import AppError
from app.mcp.config import server_of
from app.mcp.tools import served_tool
from app.services.client_tokens import ClientToken
from app.services.invocations import InvocationService, McpToolRun
from app.services.toolbox import Selection, Toolbox
from app.tools.approval import ApprovalPolicy
from app.tools.progress import ProgressSink


class McpGatewayService:
    def __init__(
        self,
        *,
        toolbox: Toolbox,
        invocations: InvocationService,
        approvals: ApprovalPolicy | None = None,
    ) -> None:
        self._toolbox = toolbox
        self._invocations = invocations
        self._approvals = approvals or ApprovalPolicy()

    async def list_tools(
        self, *, tenant_id: str, token: ClientToken | None
    ) -> list[mcp_types.Tool]:
        """The caller's tools as MCP clients see them; 422 (`NameClashError`) for a name that
        two of them would share."""
        selection = Selection(every_server=True)
        async with await self._toolbox.open(tenant_id, selection, token=token) as toolset:
            categories = toolset.category_approvals
            return [
                served_tool(tool, waits=self._approvals.requires(tool, categories))
                for tool in toolset.tools
            ]

    async def input_schema(
        self, name: str, *, tenant_id: str, token: ClientToken | None
    ) -> dict[str, Any] | None:
        """The input schema of the tool offered as `name`, as `list_tools` shows it, when it can
        carry `x-mcp-header` annotations (the `Mcp-Param-*` check's only use of it); None when
        the caller has none by that name (the call then answers why) or it cannot carry them.
        Only an MCP server's tool can (its names are `{server}__{tool}`): a stored tool's schema
        takes no such keyword (`app/tools/schema.py`, KEYWORDS), and looking it up opened the
        caller's toolbox a second time per call."""
        if server_of(name) is None:
            return None
        selection = Selection(tool_ids=[name], by_name=True, strict=True)
        try:
            async with await self._toolbox.open(tenant_id, selection, token=token) as toolset:
                return served_tool(toolset.only()).input_schema
        except AppError:
            return None

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        tenant_id: str,
        token: ClientToken | None,
        progress: ProgressSink | None = None,
    ) -> McpToolRun:
        """Run the tool offered as `name` (its progress reports to `progress`); 404 when the
        caller has none by that name. An MCP server's result keeps its own parts
        (`McpToolRun.mcp`: structured content, images, audio, resources, links), scrubbed of the
        run's hidden values."""
        run = await self._invocations.call_by_name(
            name, arguments, tenant_id=tenant_id, token=token, progress=progress
        )
        assert isinstance(run, McpToolRun)
        return run
