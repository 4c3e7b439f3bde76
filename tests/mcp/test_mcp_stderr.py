"""A stdio server's stderr goes through the service's redacting log formatter, labelled."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import fake_model as script
from tests.support.chat_clients import McpChat
from tests.support.logs import JsonLines
from tests.support.waiting import within

NOISE = "connected with Authorization: Bearer sk-live-0123456789abcdef and more"


@pytest.mark.slow
async def test_stderr_lines_are_logged_redacted_and_labelled(
    mcp_chat: McpChat, json_logs: JsonLines
) -> None:
    await mcp_chat.call(
        script.tool_calls(("demo__complain", {"message": NOISE})),
        script.text("done"),
        mcp_servers=["demo"],
        tool_ids=[],
    )

    def stderr_lines() -> list[dict[str, Any]]:
        return [e for e in json_logs.entries() if e["logger"] == "app.mcp.stderr"]

    # the line is read from the pipe as the server writes it
    await within(lambda: any("connected with" in e["message"] for e in stderr_lines()), 5)
    lines = stderr_lines()
    [line] = [e for e in lines if "connected with" in e["message"]]
    assert line["mcp_server"] == "demo" and line["message"].startswith("MCP server 'demo': ")
    assert "Bearer [redacted]" in line["message"]
    assert "sk-live-0123456789abcdef" not in "\n".join(json_logs.lines)
