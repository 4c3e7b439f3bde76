"""Listings that a hung server cannot slow: each server within the listing deadline, failures
remembered as down with backoff (the hub's clock is injected, so backoffs pass without waiting),
a late answer kept for the next listing; and the same seen by an MCP client on `/mcp`."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from app.http.netguard import OutboundPolicy
from app.mcp.config import McpServer, parse_operator_servers
from app.mcp.hub import RETRY_GRACE_S, McpHub, McpLimits
from tests.support.apps import create_tenant
from tests.support.clock import FakeClock
from tests.support.mcp_service import HUNG_STDIO, demo_stdio, mcp_client, refusing_http, serve
from tests.support.processes import child_processes
from tests.support.waiting import within


def hub_with(clock: FakeClock, skips: list[tuple[str, str]], deadline_s: float) -> McpHub:
    return McpHub(
        policy=OutboundPolicy(),
        limits=McpLimits(connect_timeout_s=20, cache_ttl_s=30, list_deadline_s=deadline_s),
        clock=clock,
        on_skip=lambda source, reason: skips.append((source, reason)),
    )


def servers(**entries: dict[str, Any]) -> dict[str, McpServer]:
    return parse_operator_servers(orjson.dumps({"mcpServers": entries}).decode())


async def test_a_refusing_server_is_down_until_its_backoff_has_passed() -> None:
    clock, skips = FakeClock(), list[tuple[str, str]]()
    hub = hub_with(clock, skips, deadline_s=2)
    [gone] = servers(gone=refusing_http()).values()
    try:
        found, skipped = await hub.reachable_tools([gone], {}, tenant_id="acme")
        assert found == [] and "is unavailable" in skipped["gone"].message
        assert hub.handshakes == 1 and hub.down_servers() == 1

        for _ in range(3):  # within the first backoff (5 s): skipped without a connect
            clock.advance(1.5)
            _, skipped = await hub.reachable_tools([gone], {}, tenant_id="acme")
            assert "is unavailable" in skipped["gone"].message
        assert hub.handshakes == 1
        assert skips == [("operator", "unavailable")] + [("operator", "down")] * 3

        clock.advance(1)  # 5.5 s: tried again, failed again; the backoff doubles to 10 s
        await hub.reachable_tools([gone], {}, tenant_id="acme")
        assert hub.handshakes == 2
        clock.advance(9)
        await hub.reachable_tools([gone], {}, tenant_id="acme")
        assert hub.handshakes == 2
        clock.advance(1.5)
        await hub.reachable_tools([gone], {}, tenant_id="acme")
        assert hub.handshakes == 3

        # Asking for this one server (an admin's check, a one-tool call) always tries.
        with pytest.raises(Exception, match="is unavailable"):
            await hub.server_tools(gone, {}, tenant_id="acme")
        assert hub.handshakes == 4
    finally:
        await hub.aclose()


async def test_after_its_backoff_a_hung_server_is_waited_for_briefly() -> None:
    """A server that takes connections and never answers: the first listing waits the
    deadline for it; the listing after its backoff asks again but waits only the grace."""
    clock, skips = FakeClock(), list[tuple[str, str]]()
    hub = hub_with(clock, skips, deadline_s=0.5)
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read nothing, answer nothing

    listener = await asyncio.start_server(hold, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/mcp"
    [stalled] = servers(stalled={"type": "streamable-http", "url": url}).values()
    try:
        _, skipped = await hub.reachable_tools([stalled], {}, tenant_id="acme")
        assert skipped["stalled"].message == (
            "MCP server 'stalled' did not list its tools within 0.5 s."
        )
        clock.advance(2)  # within the backoff: not asked
        _, skipped = await hub.reachable_tools([stalled], {}, tenant_id="acme")
        clock.advance(4)  # past it: asked, for the grace only
        _, again = await hub.reachable_tools([stalled], {}, tenant_id="acme")
        assert again["stalled"].message == (
            f"MCP server 'stalled' did not list its tools within {RETRY_GRACE_S:g} s."
        )
        assert skips == [("operator", "timeout"), ("operator", "down"), ("operator", "timeout")]
    finally:
        await hub.aclose()
        listener.close()
        for writer in held:
            writer.close()


@pytest.mark.slow
async def test_a_server_slower_than_the_deadline_is_skipped_once_then_listed_from_the_cache() -> (
    None
):
    """A stdio server takes longer to start than a 0.05 s deadline: the first listing goes on
    without it; its fetch goes on and fills the cache, so the next listing has it, unasked."""
    clock, skips = FakeClock(), list[tuple[str, str]]()
    hub = hub_with(clock, skips, deadline_s=0.05)
    [demo] = servers(demo=demo_stdio()).values()
    try:
        found, skipped = await hub.reachable_tools([demo], {}, tenant_id="acme")
        assert found == [] and skipped["demo"].message == (
            "MCP server 'demo' did not list its tools within 0.05 s."
        )
        assert skips == [("operator", "timeout")] and hub.down_servers() == 1
        await within(lambda: hub.down_servers() == 0, 30)  # its answer came in the background
        found, skipped = await hub.reachable_tools([demo], {}, tenant_id="acme")
        assert skipped == {} and "add" in {tool.name for tool in found[0][1]}
        assert hub.handshakes == 1
    finally:
        await hub.aclose()


@pytest.mark.slow
async def test_mcp_tools_list_with_a_hung_and_a_refusing_server_answers_within_the_deadline() -> (
    None
):
    """Through `/mcp` with the SDK's client: the first `tools/list` costs the listing deadline
    (not the 20 s connect timeout), the next ones nothing (no connect); the skips are counted;
    the hung server's process ends with the service."""
    before = set(child_processes())
    hung = {"hung": HUNG_STDIO, "gone": refusing_http()}
    async with serve(hung, mcp_list_deadline_s=0.5, mcp_connect_timeout_s=20) as service:
        tenant = await create_tenant(service.http, "acme")
        async with mcp_client(service.url, tenant.api_key) as client:
            listed = await client.list_tools()
            names = {tool.name for tool in listed.tools}
            assert names and not any(n.startswith(("hung__", "gone__")) for n in names)
            handshakes = service.hub.handshakes
            for _ in range(3):
                again = await client.list_tools()
                assert {tool.name for tool in again.tools} == names
            assert service.hub.handshakes == handshakes  # nothing asked of either server again
        skips = "toolgate_mcp_listing_skips_total"
        # The first listing: the hung one was cut at the listing deadline ("timeout": the 20 s
        # connect timeout would have made it "unavailable"); the refusing one failed (or, on a
        # loaded machine, was slower to fail than the 0.5 s deadline).
        timeouts = await service.metric(f'{skips}{{reason="timeout",source="operator"}}')
        failures = await service.metric(f'{skips}{{reason="unavailable",source="operator"}}')
        assert timeouts >= 1 and timeouts + failures == 2
        assert await service.metric(f'{skips}{{reason="down",source="operator"}}') == 6
        assert await service.metric("toolgate_mcp_servers_down") == 2
    await within(lambda: set(child_processes()) <= before, 10)
