"""`/mcp` served to a real MCP client (the SDK's `ClientSession` over streamable HTTP), with
client tokens whose bound context reaches the tools and never the client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app.main import create_app
from tests.support import functions
from tests.support import upstream as upstream_api
from tests.support.apps import ADMIN, TenantCredentials, create_tenant, make_settings
from tests.support.documents import external_tool
from tests.support.mcp_demo import McpDemoServer
from tests.support.secantus import free_port
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded, within

CANARY = "cnry-user-7f3a9c"  # the end user's id, bound to the token
TOKEN_CANARY = "cnry-token-51be02"


@dataclass
class Served:
    url: str
    http: httpx.AsyncClient
    app: Any


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    """The service on a real port (the MCP client speaks HTTP), loopback allowed."""
    settings = make_settings(None, outbound_allow=["127.0.0.1"], auth_cache_ttl_s=0)
    app = create_app(settings, registry=functions.registry)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    await within(lambda: server.started or task.done(), 10)
    assert not task.done(), "the service did not start"
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield Served(url, http, app)
    server.should_exit = True
    await task


@dataclass
class Received:
    """Every byte an MCP client got back, to search for canaries."""

    bodies: list[bytes] = field(default_factory=list)

    async def hook(self, response: httpx2.Response) -> None:
        await response.aread()
        self.bodies.append(response.content + json.dumps(dict(response.headers)).encode())

    def text(self) -> str:
        return b"\n".join(self.bodies).decode(errors="replace")


@contextlib.asynccontextmanager
async def mcp_client(
    served: Served, bearer: str, received: Received | None = None
) -> AsyncIterator[ClientSession]:
    hooks = {"response": [received.hook]} if received else {}
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {bearer}"}, event_hooks=hooks, timeout=30
        ) as http,
        streamable_http_client(f"{served.url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def token_for(served: Served, tenant: TenantCredentials, **body: Any) -> dict[str, Any]:
    created = await served.http.post(
        "/client-tokens", json={"name": "alice", **body}, headers=tenant.headers
    )
    assert created.status_code == 201, created.text
    return dict(created.json())


def echo_tool() -> dict[str, Any]:
    """An external tool on the real local API, with the end user's id as a context parameter."""
    return external_tool(
        "echo-api",
        function={
            "name": "echo_api",
            "description": "Echo what it is sent",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "url": "",
            "method": "GET",
        },
        context_parameters=[{"name": "user_id", "type": "string"}],
        tags=["web"],
        title="Echo",
        annotations={"read_only_hint": True, "open_world_hint": True},
    )


@pytest.mark.slow
async def test_a_token_lists_and_calls_function_external_and_upstream_tools(
    served: Served, upstream: ThreadedServer, demo_http: McpDemoServer
) -> None:
    acme = await create_tenant(served.http, "acme")
    tool = echo_tool()
    tool["function"]["url"] = f"{upstream.url}/echo"
    assert (
        await served.http.post("/tools/create", json=tool, headers=acme.headers)
    ).status_code == 201
    server = {
        "name": "demo",
        "type": "streamable-http",
        "url": demo_http.url,
        "context": {"user_id": {"argument": "user_id"}},
    }
    assert (
        await served.http.post("/mcp-servers", json=server, headers=acme.headers)
    ).status_code == 201
    token = await token_for(
        served,
        acme,
        context_arguments={"user_id": CANARY, "api_token": TOKEN_CANARY},
        tool_ids=["profile", "echo-api", "demo__whoami"],
    )
    assert "token" in token and token["context_names"] == ["api_token", "user_id"]
    listed = (await served.http.get("/client-tokens", headers=acme.headers)).json()
    assert [t["token_id"] for t in listed] == [token["token_id"]] and "token" not in listed[0]

    functions.RECEIVED.clear()
    upstream_api.RECEIVED.clear()
    received = Received()
    async with mcp_client(served, token["token"], received) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"get_profile", "echo_api", "demo__whoami"}
        for shown in tools.values():  # the schema a model sees: no context parameter
            assert "user_id" not in json.dumps(shown.input_schema)
            assert "api_token" not in json.dumps(shown.input_schema)
        assert tools["echo_api"].title == "Echo"
        assert tools["echo_api"].annotations is not None
        assert tools["echo_api"].annotations.read_only_hint is True
        assert tools["echo_api"].annotations.open_world_hint is True

        profile = await session.call_tool("get_profile", {"field": "email"})
        assert not profile.is_error, profile
        # A client trying to set a context value is ignored: the token's value wins.
        echoed = await session.call_tool("echo_api", {"q": "hi", "user_id": "mallory"})
        assert not echoed.is_error, echoed
        whoami = await session.call_tool("demo__whoami", {})
        assert not whoami.is_error and "user=[redacted]" in whoami.content[0].text, whoami

    assert functions.RECEIVED == [{"user_id": CANARY, "api_token": TOKEN_CANARY, "field": "email"}]
    assert ("user_id", CANARY) in upstream_api.RECEIVED[-1]["query"]  # type: ignore[operator]
    assert "mallory" not in json.dumps(upstream_api.RECEIVED[-1]["query"])
    everything = received.text()
    assert received.bodies and CANARY not in everything and TOKEN_CANARY not in everything

    runs = await runs_recorded(served.http, acme.headers, 3, "/runs?limit=10")
    assert [r["kind"] for r in runs] == ["mcp", "mcp", "mcp"]
    assert CANARY not in json.dumps(runs)


async def test_revoked_and_expired_tokens_get_401_and_never_open_crud_routes(
    served: Served,
) -> None:
    acme = await create_tenant(served.http, "acme")
    token = await token_for(served, acme, expires_in_s=3600)
    bearer = {"Authorization": f"Bearer {token['token']}"}
    async with mcp_client(served, token["token"]) as session:
        assert (await session.list_tools()).tools
    # Client tokens open /mcp and /chat only.
    assert (await served.http.get("/tools/ids", headers=bearer)).status_code == 403
    assert (await served.http.get("/client-tokens", headers=bearer)).status_code == 403
    assert (await served.http.get("/tenants", headers=bearer)).status_code == 403

    # Expired: the stored expiry is moved into the past (auth_cache_ttl_s=0: read every time).
    tokens = served.app.state.services.database.collection("client_tokens")
    await tokens.update_one(
        {"token_id": token["token_id"]}, {"$set": {"expires_at": datetime(2020, 1, 1, tzinfo=UTC)}}
    )
    expired = await served.http.post("/mcp", json={}, headers=bearer)
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]

    other = await token_for(served, acme)
    revoked = await served.http.delete(f"/client-tokens/{other['token_id']}", headers=acme.headers)
    assert revoked.status_code == 204
    answer = await served.http.post(
        "/mcp", json={}, headers={"Authorization": f"Bearer {other['token']}"}
    )
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == (
        'Bearer realm="toolgate", error="invalid_token", error_description="The token is '
        f'unknown, revoked or expired.", resource_metadata="{served.url}'
        '/.well-known/oauth-protected-resource/mcp"'
    )
    assert (
        await served.http.delete(f"/client-tokens/{other['token_id']}", headers=acme.headers)
    ).status_code == 404
    nobody = await served.http.post("/mcp", json={}, headers={"Authorization": "Bearer tgc_x"})
    assert nobody.status_code == 401


async def test_a_tag_limited_token_lists_and_calls_only_those_tools(served: Served) -> None:
    acme = await create_tenant(served.http, "acme")
    tool = echo_tool()
    tool["function"]["url"] = "https://api.example.com/echo"
    assert (
        await served.http.post("/tools/create", json=tool, headers=acme.headers)
    ).status_code == 201
    token = await token_for(served, acme, tags=["web"])
    async with mcp_client(served, token["token"]) as session:
        assert [t.name for t in (await session.list_tools()).tools] == ["echo_api"]
        with pytest.raises(MCPError, match="Unknown tool: roll_dice"):
            await session.call_tool("roll_dice", {"d": 6})
        with pytest.raises(MCPError, match="Unknown tool"):
            await session.call_tool("nothing_here", {})


async def test_tenant_keys_see_their_own_tools_only(served: Served) -> None:
    acme, globex = (
        await create_tenant(served.http, "acme"),
        await create_tenant(served.http, "globex"),
    )
    tool = echo_tool()
    tool["function"]["url"] = "https://api.example.com/echo"
    assert (
        await served.http.post("/tools/create", json=tool, headers=acme.headers)
    ).status_code == 201
    async with mcp_client(
        served, globex.headers["Authorization"].removeprefix("Bearer ")
    ) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert "echo_api" not in names and "roll_dice" in names
        with pytest.raises(MCPError, match="Unknown tool"):
            await session.call_tool("echo_api", {"q": "x"})
    async with mcp_client(served, acme.headers["Authorization"].removeprefix("Bearer ")) as session:
        assert "echo_api" in {t.name for t in (await session.list_tools()).tools}
        rolled = await session.call_tool("roll_dice", {"d": 6})
        assert not rolled.is_error and 1 <= int(rolled.content[0].text) <= 6
    assert (await served.http.post("/mcp", json={}, headers=ADMIN)).status_code == 403
    assert (await served.http.post("/mcp", json={})).status_code == 401


MODERN = "2026-07-28"


def _envelope(method: str, params: dict[str, Any], version: str, name: str = "") -> Any:
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version}
    if version == MODERN:
        params = {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            },
        }
        headers.update({"Mcp-Method": method, **({"Mcp-Name": name} if name else {})})
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, headers


async def test_direct_answers_match_the_sdks_own(served: Served) -> None:
    """tools/list and tools/call of handshake-era clients are answered without the SDK's
    per-request transport (a measured cost); the SDK answers the 2026 era. Same content."""
    acme = await create_tenant(served.http, "acme")
    tool = echo_tool()
    tool["function"]["url"] = "https://api.example.com/echo"
    created = await served.http.post("/tools/create", json=tool, headers=acme.headers)
    assert created.status_code == 201

    async def send(method: str, params: dict[str, Any], version: str, name: str = "") -> Any:
        body, headers = _envelope(method, params, version, name)
        response = await served.http.post("/mcp", json=body, headers={**acme.headers, **headers})
        assert response.status_code == 200, response.text
        return response.json()

    direct = await send("tools/list", {}, "2025-11-25")
    sdk = await send("tools/list", {}, MODERN)
    assert direct["id"] == sdk["id"] == 7
    assert direct["result"]["tools"] == sdk["result"]["tools"]
    echo = next(t for t in direct["result"]["tools"] if t["name"] == "echo_api")
    assert echo["annotations"] == {"readOnlyHint": True, "openWorldHint": True}
    assert echo["title"] == "Echo" and "user_id" not in json.dumps(echo["inputSchema"])

    direct = await send("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}}, "2025-06-18")
    sdk = await send("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}}, MODERN, "add")
    assert direct["result"]["content"] == sdk["result"]["content"]
    assert direct["result"]["isError"] is False and "42" in direct["result"]["content"][0]["text"]
    unknown = await send("tools/call", {"name": "nope", "arguments": {}}, "2025-06-18")
    assert unknown["error"] == {"code": -32602, "message": "Unknown tool: nope"}
