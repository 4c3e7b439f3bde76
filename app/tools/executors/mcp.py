"""MCP tools: a call on the chat's (or invocation's) session with the tool's server."""

from __future__ import annotations

from typing import Any

from app.tools.executors import CallScope
from app.tools.outcome import ToolOutcome
from app.tools.typed import McpServerTool


class McpExecutor:
    def inline(self, tool: McpServerTool) -> bool:
        return False

    async def run(
        self, tool: McpServerTool, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome:
        if call.mcp is None:  # a caller that selects MCP tools opens their sessions
            return ToolOutcome.error(
                f"no session with MCP server '{tool.server}' was opened for this call",
                "unreachable",
            )
        hints = tool.annotations or {}
        # Safe to send again on a new session if the first one was lost under it.
        read_only = hints.get("read_only_hint") is True or hints.get("idempotent_hint") is True
        return await call.mcp.call(
            tool.server, tool.mcp_tool, arguments, call.progress, read_only=read_only
        )
