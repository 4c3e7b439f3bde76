"""The MCP executor (app/tools/executors/mcp.py): a call goes through the run's MCP sessions. Calls
over real MCP servers on every transport live in tests/mcp/."""

from __future__ import annotations

from typing import Any

from app.tools.executors import CallScope
from app.tools.executors.mcp import McpExecutor
from app.tools.outcome import ToolOutcome
from app.tools.typed import McpServerTool


def _tool() -> McpServerTool:
    return McpServerTool(
        tool_id="s__t",
        name="s__t",
        description="",
        parameters=None,
        json_parameters={"type": "object", "properties": {}},
        server="s",
        mcp_tool="t",
    )


class Sessions:
    """The sessions of one run, as the executor sees them (`McpCaller`)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def call(
        self, server_name: str, tool: str, arguments: dict[str, Any], progress: Any = None
    ) -> ToolOutcome:
        self.calls.append((server_name, tool, arguments))
        return ToolOutcome("ok", "42")


async def test_an_mcp_tool_without_a_session_is_an_error_result() -> None:
    outcome = await McpExecutor().run(_tool(), {}, CallScope())
    assert outcome.status == "error" and outcome.kind == "unreachable"


async def test_a_call_goes_to_its_server_under_the_server_side_tool_name() -> None:
    sessions = Sessions()
    outcome = await McpExecutor().run(_tool(), {"a": 1}, CallScope(mcp=sessions))
    assert outcome == ToolOutcome("ok", "42")
    assert sessions.calls == [("s", "t", {"a": 1})]
