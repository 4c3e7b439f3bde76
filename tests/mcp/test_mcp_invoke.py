"""POST /tools/{server}__{tool}/invoke: an MCP tool run through the invocation path."""

from __future__ import annotations

import pytest

from tests.support import mcp_demo
from tests.support.chat_clients import McpChat
from tests.support.waiting import within


@pytest.mark.slow
async def test_an_mcp_tool_gets_its_mapped_context_and_its_session_is_closed(
    mcp_chat: McpChat,
) -> None:
    context = {"user_id": "user-mcp-4411", "x_user": "header-user-9"}
    for tool_id in ("demo-http__whoami", "demo__whoami"):  # streamable HTTP, then stdio
        response = await mcp_chat.http.post(
            f"/tools/{tool_id}/invoke",
            json={"arguments": {}, "context_arguments": context},
            headers=mcp_chat.tenant.headers,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "ok", body
        # The server got the values; what comes back to the caller has them redacted.
        assert body["content"].startswith("user=[redacted]")
        assert "user-mcp-4411" not in response.text and "header-user-9" not in response.text
    assert mcp_demo.RECEIVED[0] == {"user_id": "user-mcp-4411", "x-user": "header-user-9"}
    # The stdio server's session stays pooled for the tenant's next run (its headers take no
    # context value); the HTTP one's (a header per run) was closed with its invocation.
    assert mcp_chat.hub.open_sessions == len(mcp_chat.hub.pool) == 1
    await mcp_chat.hub.pool.close_idle()
    assert mcp_chat.hub.open_sessions == 0
    await within(lambda: mcp_chat.new_children() == [], 5)  # the process is gone too


async def test_mcp_tool_errors_and_unknown_tools(mcp_chat: McpChat) -> None:
    headers = mcp_chat.tenant.headers
    failed = await mcp_chat.http.post(
        "/tools/demo-http__fail/invoke", json={"arguments": {"reason": "r"}}, headers=headers
    )
    assert failed.json()["error"]["kind"] == "tool_error"
    assert "fail" in failed.json()["error"]["message"]  # the MCP server says how
    unknown = await mcp_chat.http.post("/tools/demo-http__nope/invoke", json={}, headers=headers)
    assert unknown.status_code == 404
    other = await mcp_chat.http.post("/tools/globex-only__add/invoke", json={}, headers=headers)
    assert other.status_code == 404  # an operator server of another tenant
