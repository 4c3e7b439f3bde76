"""A tenant MCP server's header values (tokens, keys) are secrets: a server that echoes its
request headers never gets them to the model or the caller."""

from __future__ import annotations

import json
from typing import Any

from tests.support import fake_model as script
from tests.support.chat_clients import McpChat
from tests.support.echoes import leaks
from tests.support.mcp_demo import McpDemoServer


async def test_an_mcp_servers_header_values_are_hidden(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    token = "zq4-mcp-token/+=&"
    created = await mcp_chat.http.post(
        "/mcp-servers",
        json={
            "name": "echoer",
            "type": "streamable-http",
            "url": demo_http.url,
            "headers": {"Authorization": f"Bearer {token}"},
        },
        headers=mcp_chat.tenant.headers,
    )
    assert created.status_code == 201, created.text
    mcp_chat.fake.reset(script.tool_calls(("echoer__echo_headers", {})), script.text("done"))
    response = await mcp_chat.chat(mcp_servers=["echoer"], tool_ids=[])
    assert response.status_code == 200, response.text
    echoed: dict[str, Any] = json.loads(response.json()["messages"][2]["content"])
    assert echoed["authorization"] == "[redacted]"  # the server did echo it (whole value)
    for text in (response.text, b"\n".join(mcp_chat.fake.raw_requests).decode()):
        assert not leaks(token, text)
