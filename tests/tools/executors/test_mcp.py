"""The MCP executor (app/tools/executors/mcp.py): a call goes through the run's MCP sessions. Calls
over real MCP servers on every transport live in tests/mcp/."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

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
        self.read_only: list[bool] = []

    async def call(
        self,
        server_name: str,
        tool: str,
        arguments: dict[str, Any],
        progress: Any = None,
        *,
        read_only: bool = False,
    ) -> ToolOutcome:
        self.calls.append((server_name, tool, arguments))
        self.read_only.append(read_only)
        return ToolOutcome("ok", "42")


async def test_an_mcp_tool_without_a_session_is_an_error_result() -> None:
    outcome = await McpExecutor().run(_tool(), {}, CallScope())
    assert outcome.status == "error" and outcome.kind == "unreachable"


async def test_a_call_goes_to_its_server_under_the_server_side_tool_name() -> None:
    sessions = Sessions()
    outcome = await McpExecutor().run(_tool(), {"a": 1}, CallScope(mcp=sessions))
    assert outcome == ToolOutcome("ok", "42")
    assert sessions.calls == [("s", "t", {"a": 1})]


@pytest.mark.parametrize(
    ("annotations", "read_only"),
    [
        (None, False),
        ({"read_only_hint": True}, True),
        ({"idempotent_hint": True}, True),
        ({"read_only_hint": False, "destructive_hint": True}, False),
    ],
)
async def test_a_call_is_marked_safe_to_send_again_by_the_servers_hints(
    annotations: dict[str, bool] | None, read_only: bool
) -> None:
    """What a lost session may send again (`McpSessions.call`): read-only or idempotent tools."""
    sessions = Sessions()
    tool = dataclasses.replace(_tool(), annotations=annotations)
    await McpExecutor().run(tool, {}, CallScope(mcp=sessions))
    assert sessions.read_only == [read_only]
