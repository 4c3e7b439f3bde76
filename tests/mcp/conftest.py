"""MCP fixtures: real MCP servers (stdio children, streamable HTTP and SSE on 127.0.0.1) and an
app whose operator configuration names them."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.mcp.hub import McpHub
from tests.chat.conftest import ChatClient
from tests.conftest import create_tenant, http_client, make_settings, running_app
from tests.support import functions, mcp_demo
from tests.support.fake_model import FakeModel
from tests.support.mcp_demo import McpDemoServer
from tests.support.servers import ThreadedServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def demo_http() -> Iterator[McpDemoServer]:
    server = McpDemoServer("streamable-http").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def demo_sse() -> Iterator[McpDemoServer]:
    server = McpDemoServer("sse").start()
    yield server
    server.stop()


CONTEXT = {"user_id": {"argument": "user_id"}, "x_user": {"header": "X-User"}}


def operator_servers(http_url: str, sse_url: str) -> dict[str, Any]:
    demo_stdio = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_demo", "stdio"],
        "cwd": str(ROOT),
        "context": {"user_id": {"argument": "user_id"}},
    }
    return {
        "mcpServers": {
            # the reference server from PyPI; type left out, as Claude-style configs do
            "time": {
                "command": sys.executable,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            },
            "demo": demo_stdio,
            "demo-http": {"type": "streamable-http", "url": http_url, "context": CONTEXT},
            "demo-sse": {"type": "sse", "url": sse_url, "context": CONTEXT},
            "globex-only": {**demo_stdio, "tenants": ["globex"]},
        }
    }


@dataclass
class McpChat(ChatClient):
    fake: FakeModel
    baseline: frozenset[int]  # child processes from before (a SecantusDB server, for one)

    def new_children(self) -> list[int]:
        """Child processes started since the fixture began: MCP stdio servers still alive."""
        return [pid for pid in child_processes() if pid not in self.baseline]

    @property
    def hub(self) -> McpHub:
        return self.app.state.services.mcp_hub

    async def call(self, *steps: Any, **body: Any) -> dict[str, Any]:
        self.fake.reset(*steps)
        response = await self.chat(**body)
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture
async def mcp_chat(
    request: pytest.FixtureRequest,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    demo_http: McpDemoServer,
    demo_sse: McpDemoServer,
) -> AsyncIterator[McpChat]:
    """Tenant 'acme' on an app with the fake model and the operator's MCP servers."""
    marker = request.node.get_closest_marker("settings")
    overrides: dict[str, Any] = {
        "openai_base_url": f"{fake_model_server[1].url}/v1",
        "openai_api_key": "sk-test-key",
        "model_timeout_s": 5.0,
        "outbound_allow": ["127.0.0.1"],
        "mcp_servers": orjson.dumps(operator_servers(demo_http.url, demo_sse.url)).decode(),
        **(marker.kwargs if marker else {}),
    }
    mcp_demo.CALLS.clear()
    mcp_demo.RECEIVED.clear()
    async with (
        running_app(make_settings(None, **overrides), functions.registry) as app,
        http_client(app) as http,
    ):
        tenant = await create_tenant(http, "acme")
        yield McpChat(app, http, tenant, fake, frozenset(child_processes()))


def child_processes() -> list[int]:
    """This process's live children."""
    children: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        text = (task / "children").read_text().split()
        children += [int(pid) for pid in text]
    return [pid for pid in children if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def connections_to(port: int) -> int:
    """Established TCP connections from this process to 127.0.0.1:`port` (either direction
    shows up once per end; only the client end has `port` as its remote port)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01":
                count += 1
    return count
