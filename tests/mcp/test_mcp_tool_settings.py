"""An MCP server's tool takes the settings a stored tool has, stored by its `server__tool` id
(`PUT /tools/demo-http__add`): category, timeout, output shaping, approval, presets. Each tenant
keeps its own; bad settings are a 4xx naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import fake_model as script
from tests.support.apps import ADMIN, create_tenant
from tests.support.chat_clients import McpChat

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
ADD = "/tools/demo-http__add"


async def _put(
    mcp_chat: McpChat, path: str, body: Any, headers: dict[str, str] | None = None
) -> Any:
    return await mcp_chat.http.put(path, json=body, headers=headers or mcp_chat.tenant.headers)


async def _invoke(mcp_chat: McpChat, tool_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    invoked = await mcp_chat.http.post(
        f"/tools/{tool_id}/invoke", json={"arguments": arguments}, headers=mcp_chat.tenant.headers
    )
    assert invoked.status_code == 200, invoked.text
    return dict(invoked.json())


async def _served(mcp_chat: McpChat) -> dict[str, dict[str, Any]]:
    listed = await mcp_chat.http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**mcp_chat.tenant.headers, **MCP_HEADERS},
    )
    assert listed.status_code == 200, listed.text
    return {t["name"]: t for t in listed.json()["result"]["tools"]}


async def test_an_mcp_tool_takes_stored_settings_by_its_id(mcp_chat: McpChat) -> None:
    """Issue 43: `PUT /tools/up__wipe` was refused; MCP tools could carry none of the settings
    stored tools have."""
    made = await mcp_chat.http.post(
        "/categories", json={"name": "math"}, headers=mcp_chat.tenant.headers
    )
    assert made.status_code == 201, made.text
    settings = {
        "type": "mcp",
        "category": "math",
        "approval": "always",
        "output": {"max_chars": 1},
        "presets": {"b": 2},
    }
    put = await _put(mcp_chat, ADD, settings)
    assert put.status_code == 200, put.text
    shown = put.json()
    assert (shown["tool_id"], shown["server"], shown["mcp_tool"]) == (
        "demo-http__add",
        "demo-http",
        "add",
    )
    assert (await mcp_chat.http.get(ADD, headers=mcp_chat.tenant.headers)).json() == shown

    # The preset fills `b` (the model no longer sees it), the output is cut at one character.
    result = await _invoke(mcp_chat, "demo-http__add", {"a": 40})
    assert result["status"] == "ok" and result["content"].startswith("4"), result
    assert "42" not in result["content"]
    served = (await _served(mcp_chat))["demo-http__add"]
    assert set(served["inputSchema"]["properties"]) == {"a"}
    assert served["annotations"]["destructiveHint"] is True  # a chat would stop for it

    # A chat stops for approval before calling it.
    mcp_chat.fake.reset(script.tool_calls(("demo-http__add", {"a": 1})), repeat=script.text("ok"))
    chat = await mcp_chat.chat(mcp_servers=["demo-http"], tool_ids=[])
    assert chat.status_code == 200, chat.text
    assert chat.json()["stop_reason"] == "approval_required"

    # Its category, disabled, takes it out of chats and /mcp; invoke still runs it (an admin).
    toggled = await mcp_chat.http.patch(
        "/categories", json={"enabled": {"math": False}}, headers=mcp_chat.tenant.headers
    )
    assert toggled.status_code == 200, toggled.text
    assert "demo-http__add" not in await _served(mcp_chat)
    assert (await _invoke(mcp_chat, "demo-http__add", {"a": 1}))["status"] == "ok"

    # Deleted, the tool is as its server lists it again.
    deleted = await mcp_chat.http.delete(ADD, headers=mcp_chat.tenant.headers)
    assert deleted.status_code == 204, deleted.text
    assert (await mcp_chat.http.get(ADD, headers=mcp_chat.tenant.headers)).status_code == 404
    assert set((await _served(mcp_chat))["demo-http__add"]["inputSchema"]["properties"]) == {
        "a",
        "b",
    }


async def test_a_timeout_of_its_own(mcp_chat: McpChat) -> None:
    put = await _put(mcp_chat, "/tools/demo-http__sleep", {"type": "mcp", "timeout_s": 0.2})
    assert put.status_code == 200, put.text
    result = await _invoke(mcp_chat, "demo-http__sleep", {"seconds": 10})
    assert (result["status"], result["error"]["kind"]) == ("error", "timeout"), result


async def test_each_tenant_keeps_its_own_settings(mcp_chat: McpChat) -> None:
    put = await _put(mcp_chat, ADD, {"type": "mcp", "presets": {"b": 2}})
    assert put.status_code == 200, put.text
    globex = await create_tenant(mcp_chat.http, "globex")
    assert (await mcp_chat.http.get(ADD, headers=globex.headers)).status_code == 404
    assert (await mcp_chat.http.delete(ADD, headers=globex.headers)).status_code == 404
    other = await _put(mcp_chat, ADD, {"type": "mcp", "presets": {"b": 100}}, globex.headers)
    assert other.status_code == 200, other.text
    assert (await _invoke(mcp_chat, "demo-http__add", {"a": 1}))["content"] == "3"
    invoked = await mcp_chat.http.post(
        "/tools/demo-http__add/invoke", json={"arguments": {"a": 1}}, headers=globex.headers
    )
    assert invoked.json()["content"] == "101", invoked.text
    # A tenant deleted and made again starts without them.
    assert (await mcp_chat.http.delete("/tenants/globex", headers=ADMIN)).status_code == 204
    again = await create_tenant(mcp_chat.http, "globex")
    assert (await mcp_chat.http.get(ADD, headers=again.headers)).status_code == 404


@pytest.mark.parametrize(
    ("path", "body", "status", "where"),
    [
        ("/tools/nowhere__add", {"type": "mcp"}, 404, None),  # no such server for the tenant
        ("/tools/demo-http__ghost", {"type": "mcp"}, 404, None),  # the server has no such tool
        (ADD, {"type": "mcp", "presets": {"c": 1}}, 422, "$.presets.c"),
        (ADD, {"type": "mcp", "presets": {"b": {"nested": 1}}}, 422, None),
        (ADD, {"type": "mcp", "category": "nope"}, 422, "$.category"),
        (ADD, {"type": "mcp", "timeout_s": 1e9}, 422, None),
        (ADD, {"type": "mcp", "timeout_s": "5"}, 422, None),
        (ADD, {"type": "mcp", "approval": "sometimes"}, 422, None),
        (ADD, {"type": "mcp", "surprise": True}, 422, None),
        (ADD, {"type": "mcp", "presets": {f"p{i}": 1 for i in range(100)}}, 422, None),
        (ADD, [1, 2], 422, None),
    ],
)
async def test_bad_settings_are_4xx_and_store_nothing(
    mcp_chat: McpChat, path: str, body: Any, status: int, where: str | None
) -> None:
    response = await _put(mcp_chat, path, body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    if where is not None:
        assert where in [e["path"] for e in response.json()["errors"]], response.text
    assert (await mcp_chat.http.get(ADD, headers=mcp_chat.tenant.headers)).status_code == 404
