"""`/mcp` as operators and OAuth-capable clients see it: labelled `/mcp` with its JSON-RPC
method in metrics and the access log; RFC 9728 metadata named by the 401's `WWW-Authenticate`,
and a wrong token reported by the SDK's client without any OAuth discovery."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.apps import create_tenant
from tests.support.logs import JsonLines
from tests.support.mcp_demo import McpDemoServer
from tests.support.mcp_service import mcp_client, serve


@pytest.fixture
def access_lines() -> Iterator[JsonLines]:
    handler = JsonLines()
    logger = logging.getLogger("app.access")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.slow
async def test_mcp_requests_are_labelled_with_route_and_json_rpc_method(
    access_lines: JsonLines,
) -> None:
    async with serve({}) as service:
        tenant = await create_tenant(service.http, "acme")
        async with mcp_client(service.url, tenant.api_key) as client:
            await client.list_tools()
            await client.call_tool("add", {"a": 1, "b": 2})
        odd = [{"jsonrpc": "2.0", "id": 1, "method": "x/made-up-by-a-client-1234"}, "not json-rpc"]
        for body in odd:
            await service.http.post("/mcp", json=body, headers=tenant.headers)
        requests = "toolgate_mcp_requests_total"
        for method in ("initialize", "tools/list", "tools/call", "other", "invalid"):
            assert await service.metric(f'{requests}{{method="{method}",') >= 1, method
        assert await service.metric(f'{requests}{{method="x/') == 0  # never a client's label
        http = "toolgate_http_requests_total"
        assert await service.metric(f'{http}{{method="POST",route="/mcp",status="200"}}') >= 3
        assert await service.metric(f'{http}{{method="POST",route="unmatched"') == 0
    logged = [e for e in access_lines.entries() if e.get("route") == "/mcp"]
    assert {e.get("mcp_method") for e in logged} >= {"initialize", "tools/list", "tools/call"}


async def test_a_401_names_the_protected_resource_metadata() -> None:
    async with serve({}) as service:
        metadata_url = f"{service.url}/.well-known/oauth-protected-resource/mcp"
        missing = await service.http.post("/mcp", json={})
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == (
            f'Bearer realm="toolgate", resource_metadata="{metadata_url}"'
        )
        wrong = await service.http.post("/mcp", json={}, headers={"Authorization": "Bearer tgc_x"})
        assert wrong.status_code == 401
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
        assert f'resource_metadata="{metadata_url}"' in wrong.headers["www-authenticate"]

        for url in (metadata_url, f"{service.url}/.well-known/oauth-protected-resource"):
            document = (await service.http.get(url)).json()
            assert document["resource"] == f"{service.url}/mcp"
            assert document["bearer_methods_supported"] == ["header"]
            assert "authorization_servers" not in document  # no OAuth flow to start
            assert "tenant's admin" in document["resource_name"]


async def test_a_wrong_token_is_a_clear_401_for_the_sdk_client() -> None:
    async with serve({}) as service:
        with pytest.raises(BaseExceptionGroup) as raised:
            async with mcp_client(service.url, "tgc_wrong-token"):
                pass
        # The SDK's plain bearer client ends with an error at `initialize`; it starts no OAuth.
        assert raised.group_contains(MCPError)
        gets = 'toolgate_http_requests_total{method="GET",route='
        for route in ("unmatched", "/.well-known/"):  # no probing for an OAuth server
            assert await service.metric(f'{gets}"{route}') == 0, route


@pytest.mark.slow
async def test_a_tool_added_upstream_is_offered_and_callable_after_its_list_changed() -> None:
    """The server's `notifications/tools/list_changed` (on the tenant's pooled session) drops
    its cached list: the next `tools/list` has the new tool, long before the cache's TTL."""
    # Its own server (`grow` changes it), started off the loop (the app shares this loop).
    upstream = await asyncio.to_thread(McpDemoServer("streamable-http").start)
    try:
        entry = {"type": "streamable-http", "url": upstream.url}
        async with serve({"up": entry}, mcp_tools_cache_ttl_s=3600) as service:
            tenant = await create_tenant(service.http, "acme")
            async with mcp_client(service.url, tenant.api_key) as client:
                served = client.initialize_result.capabilities.tools
                assert served is not None and not served.list_changed  # stateless: never sent
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert "up__add" in names and "up__sprouted" not in names
                grown = await client.call_tool("up__grow", {"name": "sprouted"})
                assert grown.content[0].text == "added sprouted"
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert "up__sprouted" in names
                called = await client.call_tool("up__sprouted", {})
                assert not called.is_error and called.content[0].text == "grown"
            assert service.hub.handshakes == 1  # listing, calls and relisting: one session
    finally:
        await asyncio.to_thread(upstream.stop)


async def test_batches_are_answered_for_2025_03_26_clients_only() -> None:
    async with serve({}) as service:
        tenant = await create_tenant(service.http, "acme")
        old = {**tenant.headers, "MCP-Protocol-Version": "2025-03-26"}
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {
                "jsonrpc": "2.0",
                "id": "two",
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 3, "method": "ping"},
            {"jsonrpc": "2.0", "id": 4, "method": "resources/list"},
            "type-confused",
            {"jsonrpc": "2.0", "id": None, "method": "ping"},
        ]
        answered = await service.http.post("/mcp", json=batch, headers=old)
        assert answered.status_code == 200, answered.text
        listed, called, pinged, unsupported, confused, null_id = answered.json()
        assert listed["id"] == 1 and "add" in {t["name"] for t in listed["result"]["tools"]}
        assert called["id"] == "two" and called["result"]["content"][0]["text"] == "5"
        assert pinged == {"jsonrpc": "2.0", "id": 3, "result": {}}
        assert unsupported["id"] == 4 and unsupported["error"]["code"] == -32601
        assert confused["id"] is None and confused["error"]["code"] == -32600
        assert null_id["error"]["code"] == -32600

        only_notes = [{"jsonrpc": "2.0", "method": "notifications/initialized"}]
        assert (await service.http.post("/mcp", json=only_notes, headers=old)).status_code == 202
        too_many = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(21)]
        for refused in (too_many, []):
            answer = await service.http.post("/mcp", json=refused, headers=old)
            assert answer.status_code == 400 and answer.json()["error"]["code"] == -32600
        # Later versions dropped batches: the SDK's refusal stands.
        newer = {**tenant.headers, "MCP-Protocol-Version": "2025-11-25"}
        assert (await service.http.post("/mcp", json=batch[:1], headers=newer)).status_code == 400
