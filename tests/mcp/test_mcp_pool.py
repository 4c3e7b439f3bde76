"""Pooled MCP sessions: a tenant's runs share one session per server (a stdio server starts
once), never across tenants nor when a header carries a run's context value; idle sessions
close (the hub's clock is injected), the caps hold, and a full pool falls back to a run's own
session."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.http.netguard import OutboundPolicy
from app.mcp.config import McpServer, parse_operator_servers
from app.mcp.hub import McpHub, McpLimits
from app.mcp.pool import PoolLimits
from app.mcp.sessions import McpSessions
from tests.support.apps import create_tenant
from tests.support.clock import FakeClock
from tests.support.mcp_demo import McpDemoServer
from tests.support.mcp_service import demo_stdio, mcp_client, serve
from tests.support.processes import child_processes
from tests.support.waiting import within


def pooled_hub(clock: FakeClock, *, per_tenant: int = 8, total: int = 64) -> McpHub:
    limits = McpLimits(
        connect_timeout_s=10,
        cache_ttl_s=30,
        pool=PoolLimits(idle_s=60, per_tenant=per_tenant, total=total),
    )
    return McpHub(policy=OutboundPolicy(), limits=limits, clock=clock)


def http_servers(url: str, *names: str, **extra: Any) -> dict[str, McpServer]:
    entries = {name: {"type": "streamable-http", "url": url, **extra} for name in names}
    return parse_operator_servers(orjson.dumps({"mcpServers": entries}).decode())


async def add(run: McpSessions, server: str) -> None:
    outcome = await run.call(server, "add", {"a": 1, "b": 2})
    assert (outcome.status, outcome.content) == ("ok", "3"), outcome


@pytest.mark.slow
async def test_thirty_stdio_calls_over_mcp_start_the_server_once_per_tenant() -> None:
    before = set(child_processes())
    async with serve({"demo": demo_stdio()}, mcp_list_deadline_s=30) as service:
        acme = await create_tenant(service.http, "acme")
        async with mcp_client(service.url, acme.api_key) as client:
            for i in range(30):
                result = await client.call_tool("demo__add", {"a": i, "b": 1})
                assert not result.is_error and result.content[0].text == str(i + 1)
        assert service.hub.handshakes == 1  # the listing and 30 calls: one process

        globex = await create_tenant(service.http, "globex")  # never shared across tenants
        async with mcp_client(service.url, globex.api_key) as client:
            assert (await client.call_tool("demo__add", {"a": 1, "b": 1})).content[0].text == "2"
        assert service.hub.handshakes == 2 and len(service.hub.pool) == 2
        calls = 'toolgate_mcp_server_calls_total{outcome="ok",server="demo"}'
        assert await service.metric(calls) == 31
        assert await service.metric("toolgate_mcp_server_call_duration_seconds_count") == 31
    await within(lambda: set(child_processes()) <= before, 10)  # closed with the service


async def test_idle_sessions_close_and_the_next_run_opens_a_new_one(
    demo_http: McpDemoServer,
) -> None:
    clock = FakeClock()
    hub = pooled_hub(clock)
    servers = http_servers(demo_http.url, "demo")
    try:
        for _ in range(3):
            run = McpSessions(hub, servers, {}, tenant_id="acme")
            await add(run, "demo")
            await run.aclose()
        assert hub.handshakes == 1 and hub.open_sessions == len(hub.pool) == 1
        clock.advance(59)
        assert hub.pool.sweep() == 0
        clock.advance(2)
        assert hub.pool.sweep() == 1
        await within(lambda: hub.open_sessions == 0, 5)
        run = McpSessions(hub, servers, {}, tenant_id="acme")
        await add(run, "demo")
        await run.aclose()
        assert hub.handshakes == 2
    finally:
        await hub.aclose()
    assert hub.open_sessions == 0


async def test_a_full_pool_evicts_idle_sessions_or_lends_none(demo_http: McpDemoServer) -> None:
    hub = pooled_hub(FakeClock(), per_tenant=1, total=2)
    servers = http_servers(demo_http.url, "one", "two", "three")
    try:
        holder = McpSessions(hub, servers, {}, tenant_id="acme")
        await add(holder, "one")  # holds the tenant's one pooled session
        await add(holder, "two")  # no room, none idle: a session of the run's own
        assert len(hub.pool) == 1 and hub.open_sessions == 2
        await holder.aclose()
        assert hub.open_sessions == 1  # the run's own closed; the pooled one stays

        other = McpSessions(hub, servers, {}, tenant_id="acme")
        await add(other, "two")  # the idle "one" makes room
        await other.aclose()
        assert len(hub.pool) == 1 and hub.handshakes == 3

        globex = McpSessions(hub, servers, {}, tenant_id="globex")
        await add(globex, "three")  # the process-wide cap is 2: room for one more tenant
        await globex.aclose()
        assert len(hub.pool) == 2
    finally:
        await hub.aclose()
    assert hub.open_sessions == 0


async def test_a_server_with_a_context_header_is_never_pooled(demo_http: McpDemoServer) -> None:
    hub = pooled_hub(FakeClock())
    servers = http_servers(demo_http.url, "demo", context={"x_user": {"header": "X-User"}})
    try:
        for user in ("alice", "bob"):
            run = McpSessions(hub, servers, {"x_user": user}, tenant_id="acme")
            outcome = await run.call("demo", "whoami", {"user_id": user})
            assert outcome.content == f"user={user} header={user}"
            await run.aclose()
            assert len(hub.pool) == 0 and hub.open_sessions == 0
        assert hub.handshakes == 2
    finally:
        await hub.aclose()
