"""`/mcp` answers every single JSON-RPC request of both protocol eras with one answerer on the
SDK's kernel (`McpGateway._answer`, the 2026-07-28 transport checks in app/api/mcp_modern.py):
each answer must be the one the SDK's own transport gives, which is where the answerer sends
anything it does not take."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.inbound import InboundLadderRejection, InboundModernRoute
from starlette.requests import Request

from app.api.mcp_endpoint import McpGateway
from app.api.mcp_modern import modern_route
from tests.mcp.test_mcp_gateway import Served, served  # noqa: F401 - a fixture: a real port
from tests.support.apps import TenantCredentials, create_tenant

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}


HANDSHAKE = "2025-06-18"


def _request(
    method: str, params: dict[str, Any], version: str = MODERN, **headers: str
) -> tuple[Any, dict[str, str]]:
    sent = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version}
    if version == MODERN:
        sent["Mcp-Method"] = method
        if "name" in params and "Mcp-Name" not in headers:
            sent["Mcp-Name"] = str(params["name"])
        params = {**params, "_meta": META}
    sent.update(headers)
    return {"jsonrpc": "2.0", "id": 11, "method": method, "params": params}, sent


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


CASES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("server/discover", {}, {}),
    ("tools/list", {}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}}, {}),
    ("tools/call", {"name": "explode", "arguments": {"reason": "no"}}, {}),
    ("tools/call", {"name": "nope", "arguments": {}}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": "x", "b": 2}}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, {"Mcp-Name": "other"}),
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, {"Mcp-Param-A": "1"}),
    ("tools/call", {"arguments": {}}, {}),
    ("tools/list", {}, {"Accept": "text/event-stream"}),
    ("ping", {}, {}),
    # type-confused and deep: the same answer either way, never a 500
    ("tools/call", {"name": 7, "arguments": {}}, {"Mcp-Name": "7"}),
    ("tools/call", {"name": "add", "arguments": [1, 2]}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": _deep(60), "b": 1}}, {}),
    ("tools/list", {"cursor": {"x": 1}}, {}),
]


@pytest.fixture
async def acme(served: Served) -> AsyncIterator[TenantCredentials]:  # noqa: F811
    yield await create_tenant(served.http, "acme")


@pytest.mark.parametrize("version", [MODERN, HANDSHAKE])
async def test_every_answer_is_the_sdks_own(
    served: Served,  # noqa: F811
    acme: TenantCredentials,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
) -> None:
    async def send_all() -> list[tuple[int, Any]]:
        answers = []
        for method, params, headers in CASES:
            if version != MODERN and (method == "server/discover" or "Mcp-Name" in headers):
                continue  # of the 2026-07-28 era only
            body, sent = _request(method, params, version, **headers)
            response = await served.http.post("/mcp", json=body, headers={**acme.headers, **sent})
            content = response.json() if response.content else None
            answers.append((response.status_code, content))
        return answers

    answered: list[bool] = []
    original = McpGateway._answer

    async def watched(self: McpGateway, scope: Any, message: Any, send: Any) -> bool:
        answered.append(await original(self, scope, message, send))
        return answered[-1]

    monkeypatch.setattr(McpGateway, "_answer", watched)
    ours = await send_all()
    assert all(status < 500 for status, _ in ours)
    # what the SDK's transport answers: a refused Accept (406)
    assert answered.count(False) == 1 and len(answered) == len(ours)

    async def decline(self: McpGateway, scope: Any, message: Any, send: Any) -> bool:
        return False  # what the answerer does with anything it does not take

    monkeypatch.setattr(McpGateway, "_answer", decline)
    sdk = await send_all()
    for index, (mine, theirs) in enumerate(zip(ours, sdk, strict=True)):
        assert mine == theirs, index
    assert ours[2 if version == MODERN else 1][1]["result"]["content"][0]["text"] == "42"


async def test_the_sdks_client_in_the_2026_era_lists_and_calls(
    served: Served,  # noqa: F811
    acme: TenantCredentials,
) -> None:
    """`mcp.Client` 2.x speaks 2026-07-28 by default (it probes `server/discover`). It runs on a
    loop of its own: its first-use work (building its models) would otherwise stall the app's."""

    async def use() -> tuple[set[str], Any]:
        http = httpx.AsyncClient(headers=acme.headers, timeout=30)
        transport = streamable_http_client(f"{served.url}/mcp", http_client=http)
        async with http, Client(transport) as client:
            listed = await client.list_tools()
            added = await client.call_tool("add", {"a": 2, "b": 3})
        return {tool.name for tool in listed.tools}, added

    names, added = await asyncio.to_thread(asyncio.run, use())
    assert "add" in names
    assert not added.is_error and json.dumps(added.model_dump()).count('"5"') == 1


async def test_an_mcp_param_header_is_checked_against_the_called_tools_schema() -> None:
    """Only an upstream MCP server's tool can carry `x-mcp-header` (stored schemas refuse it):
    the header check runs against that one tool's schema; a disagreement is the SDK's
    rejection, an agreement routes the call."""
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    }
    asked: list[str] = []

    async def input_schema(request: Any, name: str) -> dict[str, Any] | None:
        asked.append(name)
        return schema if name == "regional" else None

    async def route(**headers: str) -> Any:
        body, sent = _request("tools/call", {"name": "regional", "arguments": {"region": "eu"}})
        raw = [(k.lower().encode(), v.encode()) for k, v in {**sent, **headers}.items()]
        scope = {"type": "http", "method": "POST", "headers": raw, "path": "/mcp"}
        return await modern_route(Request(scope), body, input_schema)

    assert isinstance(await route(), InboundLadderRejection)  # the header is missing
    assert isinstance(await route(**{"Mcp-Param-Region": "us"}), InboundLadderRejection)
    agreed = await route(**{"Mcp-Param-Region": "eu"})
    assert isinstance(agreed, InboundModernRoute) and agreed.protocol_version == MODERN
    assert asked == ["regional"] * 3
