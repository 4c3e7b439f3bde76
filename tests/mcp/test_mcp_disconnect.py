"""A client that leaves a streamed chat while an MCP tool runs: the chat is recorded and counted
as cancelled, and the MCP session is closed (stdio and streamable HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from app.main import create_app
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, make_settings
from tests.support.fake_model import FakeModel
from tests.support.mcp_demo import McpDemoServer
from tests.support.mcp_servers import operator_servers
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded, within


@pytest.fixture
def served(
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    demo_http: McpDemoServer,
    demo_sse: McpDemoServer,
) -> Iterator[tuple[str, dict[str, str]]]:
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test",
        mcp_servers=orjson.dumps(operator_servers(demo_http.url, demo_sse.url)).decode(),
        tool_timeout_s=10,
        mcp_list_deadline_s=30,  # a stdio server's start takes seconds on a loaded machine
    )
    server = ThreadedServer(create_app(settings, registry=functions.registry), lifespan="on")
    server.start()
    key = httpx.post(f"{server.url}/tenants", json={"tenant_id": "acme"}, headers=ADMIN).json()
    yield server.url, {"Authorization": f"Bearer {key['api_key']}"}
    server.stop()


def _cancelled(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith('toolgate_chats_total{stop_reason="cancelled"}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
@pytest.mark.parametrize("server_name", ["demo", "demo-http"])
async def test_leaving_during_an_mcp_tool_is_recorded_and_counted(
    served: tuple[str, dict[str, str]], fake: FakeModel, server_name: str
) -> None:
    base, headers = served
    fake.reset(
        script.streamed_tool_calls(("call_1", f"{server_name}__sleep", '{"seconds": 5}')),
        script.streamed_text("late"),
    )
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "mcp_servers": [server_name],
        "tool_ids": [],
        "stream": True,
    }
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{base}/chat", headers=headers, json=body) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("event: tool_call"):
                break  # the client goes away while the MCP tool runs
    async with httpx.AsyncClient(base_url=base) as client:
        runs = await runs_recorded(client, headers, 1, "/runs?status=cancelled")

        async def counted() -> bool:
            return bool(_cancelled((await client.get("/metrics")).text))

        await within(counted, 5)
        metrics = (await client.get("/metrics")).text
    assert [run["stop_reason"] for run in runs] == ["cancelled"]
    assert _cancelled(metrics) == 1
    assert "toolgate_mcp_open_sessions 0.0" in metrics
