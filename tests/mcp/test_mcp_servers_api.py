"""/mcp-servers: tenant registration (HTTP only, URL checks, masked secrets), operator entries,
and listing a server's tools."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.repositories.mcp_servers import McpServerRepository
from tests.support import fake_model as script
from tests.support.apps import ADMIN, TenantCredentials, create_tenant
from tests.support.chat_clients import McpChat
from tests.support.mcp_demo import McpDemoServer

TOKEN = "Bearer tok-canary-91c2e07d55aa"


def server(name: str = "docs", **overrides: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": "streamable-http",
        "url": "https://mcp.example.com/mcp",
        "headers": {"Authorization": TOKEN, "X-Short": "abc"},
        "description": "Product docs",
        "context": {"user_id": {"argument": "user"}},
        **overrides,
    }


@pytest.mark.all_stores
async def test_create_get_list_delete_never_show_header_values(
    client: httpx.AsyncClient, acme: TenantCredentials, globex: TenantCredentials
) -> None:
    created = await client.post("/mcp-servers", json=server(), headers=acme.headers)
    assert created.status_code == 201, created.text
    shown = created.json()
    assert shown["headers"] == {"Authorization": "****55aa", "X-Short": "****"}
    assert shown["source"] == "tenant" and shown["url"] == "https://mcp.example.com/mcp"
    assert shown["context"] == {"user_id": {"argument": "user"}}
    one = await client.get("/mcp-servers/docs", headers=acme.headers)
    listed = await client.get("/mcp-servers", headers=acme.headers)
    assert one.json() == shown and listed.json() == [shown]
    for response in (created, one, listed):
        assert "tok-canary" not in response.text
    # another tenant sees nothing of it
    assert (await client.get("/mcp-servers", headers=globex.headers)).json() == []
    assert (await client.get("/mcp-servers/docs", headers=globex.headers)).status_code == 404
    assert (await client.delete("/mcp-servers/docs", headers=globex.headers)).status_code == 404
    again = await client.post("/mcp-servers", json=server(), headers=acme.headers)
    assert again.status_code == 409
    assert (await client.delete("/mcp-servers/docs", headers=acme.headers)).status_code == 204
    assert (await client.get("/mcp-servers/docs", headers=acme.headers)).status_code == 404
    assert (await client.delete("/mcp-servers/docs", headers=acme.headers)).status_code == 404
    # the same name again is a new entry
    assert (
        await client.post("/mcp-servers", json=server(), headers=acme.headers)
    ).status_code == 201


@pytest.mark.all_stores
async def test_deleting_a_tenant_deletes_its_servers(client: httpx.AsyncClient) -> None:
    first = await create_tenant(client, "short-lived")
    assert (
        await client.post("/mcp-servers", json=server(), headers=first.headers)
    ).status_code == 201
    assert (await client.delete("/tenants/short-lived", headers=ADMIN)).status_code == 204
    second = await create_tenant(client, "short-lived")
    assert (await client.get("/mcp-servers", headers=second.headers)).json() == []


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (server(type="stdio"), "type"),
        (server(type="stdio", command="rm"), "command"),
        (server(url="http://localhost:8080/mcp"), "$.url"),
        (server(url="http://169.254.169.254/latest"), "$.url"),
        (server(url="http://10.0.0.7/mcp"), "$.url"),
        (server(url="http://[::ffff:127.0.0.1]/mcp"), "$.url"),
        (server(url="https://user:pw@mcp.example.com/mcp"), "$.url"),
        (server(url="file:///etc/passwd"), "url"),
        (server(name="a__b"), "name"),
        (server(name="x" * 33), "name"),
        (server(headers={"Host": "evil"}), "headers"),
        (server(headers={"X-Bad": "a\r\nInjected: 1"}), "headers"),
        (server(context={"user_id": {"argument": "u", "header": "X-U"}}), "context"),
        (server(context={"user_id": {"header": "Mcp-Session-Id"}}), "context"),
    ],
)
async def test_bad_registrations_are_422_naming_the_field(
    client: httpx.AsyncClient, acme: TenantCredentials, body: dict[str, Any], path: str
) -> None:
    response = await client.post("/mcp-servers", json=body, headers=acme.headers)
    assert response.status_code == 422, response.text
    assert any(path in error["path"] for error in response.json()["errors"]), response.json()


async def test_routes_need_a_tenant_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/mcp-servers")).status_code == 401
    assert (await client.get("/mcp-servers", headers=ADMIN)).status_code == 403
    assert (await client.post("/mcp-servers", json=server(), headers=ADMIN)).status_code == 403


async def test_operator_servers_are_listed_without_their_secrets(mcp_chat: McpChat) -> None:
    listed = await mcp_chat.http.get("/mcp-servers", headers=mcp_chat.tenant.headers)
    names = [s["name"] for s in listed.json()]
    assert names == ["demo", "demo-http", "demo-sse", "time"]  # not 'globex-only'
    for entry in listed.json():
        assert entry["source"] == "operator"
        assert entry.get("url") is None and entry.get("headers") == {}
    assert "mcp_demo" not in listed.text and "127.0.0.1" not in listed.text  # command, urls


async def test_operator_servers_cannot_be_deleted_or_shadowed(mcp_chat: McpChat) -> None:
    headers = mcp_chat.tenant.headers
    assert (await mcp_chat.http.delete("/mcp-servers/time", headers=headers)).status_code == 403
    taken = await mcp_chat.http.post("/mcp-servers", json=server("time"), headers=headers)
    assert taken.status_code == 409
    # a server reserved for another tenant is simply not there for this one
    assert (await mcp_chat.http.get("/mcp-servers/globex-only", headers=headers)).status_code == 404
    hidden = await mcp_chat.http.get("/mcp-servers/globex-only/tools", headers=headers)
    assert hidden.status_code == 404


@pytest.mark.slow
async def test_reference_time_server_tools_over_stdio(mcp_chat: McpChat) -> None:
    response = await mcp_chat.http.get("/mcp-servers/time/tools", headers=mcp_chat.tenant.headers)
    assert response.status_code == 200, response.text
    tools = {t["tool_id"]: t for t in response.json()}
    assert set(tools) == {"time__get_current_time", "time__convert_time"}
    current = tools["time__get_current_time"]
    assert current["type"] == "mcp" and current["mcp_tool"] == "get_current_time"
    assert current["function"]["parameters"]["required"] == ["timezone"]
    assert current["incompatible_providers"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo-http", "demo-sse", "demo"])
async def test_context_mapped_arguments_are_hidden_in_tool_documents(
    mcp_chat: McpChat, name: str
) -> None:
    response = await mcp_chat.http.get(
        f"/mcp-servers/{name}/tools", headers=mcp_chat.tenant.headers
    )
    assert response.status_code == 200, response.text
    whoami = next(t for t in response.json() if t["mcp_tool"] == "whoami")
    assert whoami["tool_id"] == f"{name}__whoami"
    assert "user_id" not in whoami["function"]["parameters"]["properties"]
    assert "required" not in whoami["function"]["parameters"]
    assert whoami["context_parameters"] == [
        {"name": "user_id", "argument": "user_id", "required": True}
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("provider", "keys"),
    [
        ("openai", {"type", "function"}),
        ("openai-responses", {"type", "name", "description", "parameters"}),
        ("anthropic", {"name", "description", "input_schema"}),
        ("gemini", {"name", "description", "parameters"}),
    ],
)
async def test_tools_in_provider_formats(mcp_chat: McpChat, provider: str, keys: set[str]) -> None:
    response = await mcp_chat.http.get(
        f"/mcp-servers/time/tools?format={provider}", headers=mcp_chat.tenant.headers
    )
    assert response.status_code == 200, response.text
    first = response.json()[0]
    assert set(first) == keys
    if provider == "gemini":
        assert first["parameters"]["type"] == "OBJECT"
        assert first["parameters"]["properties"]["timezone"]["type"] == "STRING"


async def test_a_tenant_server_is_listed_and_called_through_the_guard(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    """127.0.0.1 is allowed in this app (OUTBOUND_ALLOW), as a public host would be."""
    headers = mcp_chat.tenant.headers
    body = server("mine", url=demo_http.url, context={})
    assert (await mcp_chat.http.post("/mcp-servers", json=body, headers=headers)).status_code == 201
    response = await mcp_chat.http.get("/mcp-servers/mine/tools", headers=headers)
    assert response.status_code == 200, response.text
    assert "mine__add" in [t["tool_id"] for t in response.json()]


@pytest.mark.settings(outbound_allow=[])
async def test_a_stored_server_pointing_inside_is_blocked_at_connect_time(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    """Written before the policy (or by a replica with another one): connecting is refused."""
    repo = McpServerRepository(mcp_chat.app.state.services.database)
    doc = {
        "name": "inside",
        "type": "streamable-http",
        "url": demo_http.url,
        "headers": {},
        "description": "",
        "context": {},
        "revision": "r1",
    }
    await repo.insert(doc, tenant_id=mcp_chat.tenant.tenant_id)
    response = await mcp_chat.http.get("/mcp-servers/inside/tools", headers=mcp_chat.tenant.headers)
    assert response.status_code == 502
    assert "blocked" in response.json()["detail"] and "non-public" in response.json()["detail"]
    tested = await mcp_chat.http.post("/mcp-servers/inside/test", headers=mcp_chat.tenant.headers)
    assert tested.json()["ok"] is False and "blocked" in tested.json()["error"]  # the same guard


async def test_an_unreachable_server_is_502(mcp_chat: McpChat) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    body = server("gone", url=f"http://127.0.0.1:{port}/mcp", headers={}, context={})
    headers = mcp_chat.tenant.headers
    assert (await mcp_chat.http.post("/mcp-servers", json=body, headers=headers)).status_code == 201
    response = await mcp_chat.http.get("/mcp-servers/gone/tools", headers=headers)
    assert response.status_code == 502
    assert response.json()["detail"].startswith("MCP server 'gone' is unavailable")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """Accepts connections and never answers: a hung MCP server."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in accepted:
        conn.close()
    listener.close()


@pytest.mark.settings(mcp_connect_timeout_s=0.5)
async def test_a_hung_server_is_504_within_the_connect_timeout(
    mcp_chat: McpChat, silent_port: int
) -> None:
    body = server("hung", url=f"http://127.0.0.1:{silent_port}/mcp", headers={}, context={})
    headers = mcp_chat.tenant.headers
    assert (await mcp_chat.http.post("/mcp-servers", json=body, headers=headers)).status_code == 201
    response = await asyncio.wait_for(
        mcp_chat.http.get("/mcp-servers/hung/tools", headers=headers), 10
    )
    assert response.status_code == 504
    assert "did not list its tools within 0.5 s" in response.json()["detail"]
    assert mcp_chat.hub.open_sessions == 0


async def test_include_or_exclude_naming_a_tool_the_server_lacks_is_422(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    headers = mcp_chat.tenant.headers
    entry = {"name": "picked", "type": "streamable-http", "url": demo_http.url}
    bad = {**entry, "include": ["add", "no-such-tool"], "exclude": ["nor-this"]}
    refused = await mcp_chat.http.post("/mcp-servers", json=bad, headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"] == [
        {"path": "$.include", "message": "no tool 'no-such-tool'"},
        {"path": "$.exclude", "message": "no tool 'nor-this'"},
    ]
    assert (await mcp_chat.http.get("/mcp-servers/picked", headers=headers)).status_code == 404
    good = {**entry, "include": ["add"], "exclude": ["fail"]}
    created = await mcp_chat.http.post("/mcp-servers", json=good, headers=headers)
    assert created.status_code == 201 and created.json()["warnings"] is None


@pytest.mark.settings(mcp_list_deadline_s=0.3)
async def test_include_for_an_unreachable_server_is_taken_with_a_warning(
    mcp_chat: McpChat, silent_port: int
) -> None:
    body = server(
        "hung", url=f"http://127.0.0.1:{silent_port}/mcp", headers={}, context={}, include=["x"]
    )
    created = await mcp_chat.http.post("/mcp-servers", json=body, headers=mcp_chat.tenant.headers)
    assert created.status_code == 201, created.text
    assert created.json()["warnings"] == [
        "include/exclude not checked against the server's tools: "
        "MCP server 'hung' did not list its tools within 0.3 s."
    ]


@pytest.mark.settings(mcp_list_deadline_s=0.5)
async def test_a_chat_naming_a_hung_server_waits_the_listing_deadline_once(
    mcp_chat: McpChat, silent_port: int
) -> None:
    body = server("hung", url=f"http://127.0.0.1:{silent_port}/mcp", headers={}, context={})
    headers = mcp_chat.tenant.headers
    assert (await mcp_chat.http.post("/mcp-servers", json=body, headers=headers)).status_code == 201
    await mcp_chat.call(script.text("warm"), mcp_servers=["demo-http"])  # its list is cached
    first = await mcp_chat.call(script.text("hi"), mcp_servers=["hung", "demo-http"])
    # Cut at the listing deadline, not after the 10 s connect timeout (which says otherwise).
    assert first["skipped_mcp_servers"] == [
        {"name": "hung", "reason": "MCP server 'hung' did not list its tools within 0.5 s."}
    ]
    handshakes = mcp_chat.hub.handshakes
    again = await mcp_chat.call(script.text("hi"), mcp_servers=["hung", "demo-http"])
    assert again["skipped_mcp_servers"] == first["skipped_mcp_servers"]  # down: not asked
    assert mcp_chat.hub.handshakes == handshakes
