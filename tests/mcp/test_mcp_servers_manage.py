"""Managing a tenant's MCP servers (the console's MCP servers page): replace one (PUT), disable
and enable it, and test its connection (POST /mcp-servers/{name}/test), with the checks of
registering one, for its tenant only."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from tests.mcp.test_mcp_servers_api import server, silent_port
from tests.support.apps import TenantCredentials
from tests.support.chat_clients import McpChat
from tests.support.mcp_demo import McpDemoServer
from tests.support.waiting import within

__all__ = ["silent_port"]  # a fixture


def fields(body: dict[str, Any]) -> dict[str, Any]:
    """A registration as PUT takes it: everything but the name."""
    return {key: value for key, value in body.items() if key != "name"}


async def register(chat: McpChat, body: dict[str, Any]) -> None:
    created = await chat.http.post("/mcp-servers", json=body, headers=chat.tenant.headers)
    assert created.status_code == 201, created.text


async def whoami(chat: McpChat, tool_id: str = "mine__whoami") -> httpx.Response:
    return await chat.http.post(
        f"/tools/{tool_id}/invoke",
        json={"arguments": {"user_id": "u-1"}},
        headers=chat.tenant.headers,
    )


async def test_put_replaces_all_but_the_name_and_keeps_unsent_headers(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    headers = mcp_chat.tenant.headers
    body = server("mine", url=demo_http.url, context={}, headers={"X-User": "ada-header"})
    await register(mcp_chat, body)
    changed = {**fields(body), "description": "Edited", "exclude": ["fail"]}
    del changed["headers"]  # not shown, so not sent back: kept
    replaced = await mcp_chat.http.put("/mcp-servers/mine", json=changed, headers=headers)
    assert replaced.status_code == 200, replaced.text
    shown = replaced.json()
    assert shown["description"] == "Edited" and shown["exclude"] == ["fail"]
    assert shown["headers"] == {"X-User": "****"} and shown["updated_at"] and shown["enabled"]
    assert (await mcp_chat.http.get("/mcp-servers/mine", headers=headers)).json() == shown
    called = await whoami(mcp_chat)
    assert called.status_code == 200, called.text
    assert "ada-header" not in called.text  # the stored value is hidden in what comes back
    tools = await mcp_chat.http.get("/mcp-servers/mine/tools", headers=headers)
    assert "mine__fail" not in [t["tool_id"] for t in tools.json()]  # the new revision's list

    given = {**changed, "headers": {"X-User": "grace"}}
    assert (
        await mcp_chat.http.put("/mcp-servers/mine", json=given, headers=headers)
    ).status_code == 200
    assert (await mcp_chat.http.get("/mcp-servers/mine", headers=headers)).json()["headers"] == {
        "X-User": "****"
    }


async def test_headers_must_be_given_again_when_the_url_moves_to_another_origin(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    body = server("mine", url=demo_http.url, context={}, headers={"X-User": "ada"})
    await register(mcp_chat, body)
    moved = {**fields(body), "url": "https://mcp.example.com/mcp"}
    del moved["headers"]
    refused = await mcp_chat.http.put(
        "/mcp-servers/mine", json=moved, headers=mcp_chat.tenant.headers
    )
    assert refused.status_code == 422, refused.text
    [error] = refused.json()["errors"]
    assert error["path"] == "$.headers" and "another origin" in error["message"]
    moved["headers"] = {}
    accepted = await mcp_chat.http.put(
        "/mcp-servers/mine", json=moved, headers=mcp_chat.tenant.headers
    )
    assert accepted.status_code == 200 and accepted.json()["headers"] == {}


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"type": "stdio"}, "type"),
        ({"url": "http://169.254.169.254/latest"}, "$.url"),
        ({"url": "file:///etc/passwd"}, "url"),
        ({"headers": {"Host": "evil"}}, "headers"),
        ({"headers": {"X-Bad": "a\r\nInjected: 1"}}, "headers"),
        ({"context": {"user_id": {"header": "Mcp-Session-Id"}}}, "context"),
        ({"name": "renamed"}, "name"),
        ({"enabled": "yes"}, "enabled"),
        ({"include": "add"}, "include"),
        ({"exclude": [{"$gt": ""}]}, "exclude"),
        ({"description": "x" * 100_000}, "description"),
        ({"include": [["add"] * 3] * 300}, "include"),
    ],
)
async def test_a_bad_replacement_is_422_naming_the_field(
    client: httpx.AsyncClient, acme: TenantCredentials, changes: dict[str, Any], path: str
) -> None:
    assert (
        await client.post("/mcp-servers", json=server(), headers=acme.headers)
    ).status_code == 201
    body = {**fields(server()), **changes}
    response = await client.put("/mcp-servers/docs", json=body, headers=acme.headers)
    assert response.status_code == 422, response.text
    assert any(path in error["path"] for error in response.json()["errors"]), response.json()
    assert (await client.get("/mcp-servers/docs", headers=acme.headers)).json()["description"] == (
        "Product docs"
    )


async def test_another_tenant_cannot_replace_or_test_it(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    assert (
        await client.post("/mcp-servers", json=server(), headers=acme.headers)
    ).status_code == 201
    put = await client.put("/mcp-servers/docs", json=fields(server()), headers=globex.headers)
    tested = await client.post("/mcp-servers/docs/test", headers=globex.headers)
    assert (put.status_code, tested.status_code) == (404, 404)
    assert (await client.get("/mcp-servers", headers=globex.headers)).json() == []
    assert (await client.post("/mcp-servers/no-such/test", headers=acme.headers)).status_code == 404
    assert (await client.post("/mcp-servers/a__b/test", headers=acme.headers)).status_code == 422
    too_long = await client.post("/mcp-servers/" + "x" * 5000 + "/test", headers=acme.headers)
    assert too_long.status_code in (404, 422)


async def test_the_operators_servers_cannot_be_replaced(mcp_chat: McpChat) -> None:
    body = fields(server(context={}))
    answer = await mcp_chat.http.put(
        "/mcp-servers/demo-http", json=body, headers=mcp_chat.tenant.headers
    )
    assert answer.status_code == 403


async def test_a_disabled_server_offers_no_tools_until_enabled(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    headers = mcp_chat.tenant.headers
    body = server("mine", url=demo_http.url, context={}, headers={})
    await register(mcp_chat, body)
    assert (await whoami(mcp_chat)).status_code == 200
    off = await mcp_chat.http.put(
        "/mcp-servers/mine", json={**fields(body), "enabled": False}, headers=headers
    )
    assert off.status_code == 200 and off.json()["enabled"] is False
    assert (await whoami(mcp_chat)).status_code == 404
    named = await mcp_chat.chat(messages=[{"role": "user", "content": "hi"}], mcp_servers=["mine"])
    assert named.status_code == 422
    assert named.json()["errors"] == [{"path": "$.mcp_servers", "message": "disabled: mine"}]
    listed = await mcp_chat.http.get("/mcp-servers/mine/tools", headers=headers)
    assert listed.status_code == 200  # its tools can still be looked at (and tested)
    on = await mcp_chat.http.put(
        "/mcp-servers/mine", json={**fields(body), "enabled": True}, headers=headers
    )
    assert on.status_code == 200 and (await whoami(mcp_chat)).status_code == 200


async def test_testing_a_server_lists_its_tools(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    body = server("mine", url=demo_http.url, context={}, headers={}, exclude=["fail"])
    await register(mcp_chat, body)
    tested = await mcp_chat.http.post("/mcp-servers/mine/test", headers=mcp_chat.tenant.headers)
    assert tested.status_code == 200, tested.text
    result = tested.json()
    assert result["ok"] is True and "error" not in result and result["duration_ms"] > 0
    tools = {t["tool_id"]: t for t in result["tools"]}
    assert tools["mine__add"] == {
        "tool_id": "mine__add",
        "name": "add",
        "description": "Add two integers.",
    }
    assert "mine__fail" not in tools  # as a chat is offered them


async def test_a_test_asks_the_server_not_the_cache(mcp_chat: McpChat) -> None:
    """Its tools listed (and cached) while it ran; then the server stops: a test says so."""
    upstream = await asyncio.to_thread(McpDemoServer("streamable-http").start)
    try:
        await register(mcp_chat, server("brief", url=upstream.url, context={}, headers={}))
        headers = mcp_chat.tenant.headers
        assert (
            await mcp_chat.http.get("/mcp-servers/brief/tools", headers=headers)
        ).status_code == 200
    finally:
        await asyncio.to_thread(upstream.stop)  # off the loop: it waits for its thread
    cached = await mcp_chat.http.get("/mcp-servers/brief/tools", headers=headers)
    assert cached.status_code == 200  # the listing route answers from its cache
    tested = (await mcp_chat.http.post("/mcp-servers/brief/test", headers=headers)).json()
    assert tested["ok"] is False and "brief" in tested["error"]


async def test_testing_an_unreachable_server_says_why(mcp_chat: McpChat) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await register(
        mcp_chat, server("gone", url=f"http://127.0.0.1:{port}/mcp", headers={}, context={})
    )
    tested = await mcp_chat.http.post("/mcp-servers/gone/test", headers=mcp_chat.tenant.headers)
    assert tested.status_code == 200, tested.text
    result = tested.json()
    assert (result["ok"], result["tools"]) == (False, [])
    assert result["error"].startswith("MCP server 'gone' is unavailable")


@pytest.mark.settings(mcp_connect_timeout_s=0.5)
async def test_testing_a_hung_server_ends_at_the_connect_timeout(
    mcp_chat: McpChat, silent_port: int
) -> None:
    await register(
        mcp_chat, server("hung", url=f"http://127.0.0.1:{silent_port}/mcp", headers={}, context={})
    )
    tested = await asyncio.wait_for(
        mcp_chat.http.post("/mcp-servers/hung/test", headers=mcp_chat.tenant.headers), 10
    )
    assert tested.json()["error"] == "MCP server 'hung' did not list its tools within 0.5 s."
    assert mcp_chat.hub.open_sessions == 0


@pytest.mark.settings(mcp_connect_timeout_s=0.5)
async def test_a_client_that_leaves_a_test_leaves_nothing_open(
    mcp_chat: McpChat, silent_port: int
) -> None:
    await register(
        mcp_chat, server("hung", url=f"http://127.0.0.1:{silent_port}/mcp", headers={}, context={})
    )
    request = asyncio.ensure_future(
        mcp_chat.http.post("/mcp-servers/hung/test", headers=mcp_chat.tenant.headers)
    )
    await within(lambda: mcp_chat.hub.handshakes > 0 or mcp_chat.hub.open_sessions > 0, 10)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    await within(lambda: mcp_chat.hub.open_sessions == 0, 10)
    # The service goes on answering, the server still listed.
    listed = await mcp_chat.http.get("/mcp-servers/hung", headers=mcp_chat.tenant.headers)
    assert listed.status_code == 200
