"""An MCP server that lists a great many tools (issue 49): its list is capped, in tools
(MCP_MAX_SERVER_TOOLS) and in the bytes of one answer (MCP_MAX_LIST_BYTES, read no further),
with a clear reason, and the service stays responsive meanwhile (the loop watchdog of the suite
holds every test to its bound); a list within the caps is converted once, off the event loop."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.processes import ROOT
from tests.support.secantus import free_port
from tests.support.servers import ThreadedServer
from tests.support.waiting import within_blocking

pytestmark = pytest.mark.processes


@contextmanager
def many_tools_server(count: int, page: int | None = None) -> Iterator[str]:
    """tests/support/mcp_many.py in a process of its own, until the block ends."""
    port = free_port()
    args = [sys.executable, "-m", "tests.support.mcp_many", str(port), str(count)]
    process = subprocess.Popen([*args, *([str(page)] if page else [])], cwd=ROOT)
    try:

        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        within_blocking(listening, 30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@asynccontextmanager
async def chat_with(
    url: str, fake_model_server: tuple[FakeModel, ThreadedServer], **settings: Any
) -> AsyncIterator[ChatClient]:
    servers = {"mcpServers": {"many": {"type": "streamable-http", "url": url}}}
    config = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        mcp_servers=json.dumps(servers),
        mcp_list_deadline_s=20,
        **settings,
    )
    async with running_app(config, functions.registry) as app, http_client(app) as http:
        yield ChatClient(app, http, await create_tenant(http, "acme"))


@pytest.mark.parametrize(
    ("page", "reason"),
    [(None, "MCP_MAX_LIST_BYTES"), (500, "MCP_MAX_SERVER_TOOLS")],
    ids=["one answer", "paged"],
)
async def test_a_server_listing_ten_thousand_tools_is_skipped_with_the_reason(
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    page: int | None,
    reason: str,
) -> None:
    with many_tools_server(10_000, page) as url:
        async with chat_with(url, fake_model_server) as chat:
            fake.reset(script.text("hi"))
            response = await chat.chat(mcp_servers=["many"])
            assert response.status_code == 200, response.text
            [skipped] = response.json()["skipped_mcp_servers"]
            assert skipped["name"] == "many" and reason in skipped["reason"], skipped
            ids = await chat.http.get("/tools/ids", headers=chat.tenant.headers)
            assert ids.status_code == 200  # still answering


async def test_a_list_within_the_caps_is_offered_and_converted_once(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    with many_tools_server(600, 200) as url:
        async with chat_with(url, fake_model_server) as chat:
            fake.reset(script.text("hi"))
            listed = await chat.http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={**chat.tenant.headers, "Accept": "application/json, text/event-stream"},
            )
            assert listed.status_code == 200, listed.text
            hub = chat.app.state.services.mcp_hub
            typed = [await hub.typed_tools(server, tools) for server, tools in await _lists(chat)]
            again = [await hub.typed_tools(server, tools) for server, tools in await _lists(chat)]
            [first], [second] = typed, again
            assert len(first) == 600 and all(a is b for a, b in zip(first, second, strict=True))


async def test_the_listing_routes_convert_as_a_chat_does(
    fake_model_server: tuple[FakeModel, ThreadedServer],
) -> None:
    """`GET /mcp-servers/{name}/tools` and `POST .../test` take the chat's conversion (off the
    event loop, kept per listed tool): converting a thousand tools on the loop held it 50-100 ms
    (scripts/bench/mcp_listing_stall.py, the `at-the-cap` case)."""
    with many_tools_server(600, 200) as url:
        async with chat_with(url, fake_model_server) as chat:
            headers = chat.tenant.headers
            listed = await chat.http.get("/mcp-servers/many/tools", headers=headers)
            assert listed.status_code == 200, listed.text
            assert len(listed.json()) == 600
            tested = await chat.http.post("/mcp-servers/many/test", headers=headers)
            assert tested.status_code == 200 and len(tested.json()["tools"]) == 600, tested.text
            services = chat.app.state.services
            routes = await services.mcp_servers.tools("many", tenant_id="acme")
            [(server, tools)] = await _lists(chat)
            chats = await services.mcp_hub.typed_tools(server, tools)
            assert len(routes) == 600 and all(a is b for a, b in zip(routes, chats, strict=True))


async def _lists(chat: ChatClient) -> Any:
    services = chat.app.state.services
    servers = await services.mcp_servers.usable(tenant_id="acme")
    found, skipped = await services.mcp_hub.reachable_tools(servers, {}, tenant_id="acme")
    assert not skipped
    return found
