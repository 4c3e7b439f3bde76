"""The service on a real port with the operator's MCP servers of a test's choosing, and the
SDK's MCP client (`ClientSession` over streamable HTTP) on its `/mcp`."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import orjson
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from app.main import create_app
from app.mcp.hub import McpHub
from tests.support import functions
from tests.support.apps import make_settings
from tests.support.processes import ROOT
from tests.support.secantus import free_port
from tests.support.servers import ThreadedServer

# A stdio server whose process starts and never answers (not even `initialize`).
HUNG_STDIO = {"type": "stdio", "command": "sleep", "args": ["1000"]}


def demo_stdio(**extra: Any) -> dict[str, Any]:
    """tests/support/mcp_demo.py as an operator's stdio server."""
    return {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_demo", "stdio"],
        "cwd": str(ROOT),
        **extra,
    }


def refusing_http() -> dict[str, Any]:
    """A streamable-HTTP server entry on a port nobody listens on."""
    return {"type": "streamable-http", "url": f"http://127.0.0.1:{free_port()}/mcp"}


@dataclass
class Service:
    url: str
    http: httpx.AsyncClient
    app: Any

    @property
    def hub(self) -> McpHub:
        hub: McpHub = self.app.state.services.mcp_hub
        return hub

    async def metric(self, name: str) -> float:
        """The sum of a metric's samples whose line starts with `name` (labels included)."""
        text = (await self.http.get("/metrics")).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


@contextlib.asynccontextmanager
async def serve(servers: dict[str, Any], **settings: Any) -> AsyncIterator[Service]:
    """The service on a real port (MCP clients speak HTTP) with these operator MCP servers. It
    runs on a thread's loop of its own, started and stopped off this one: its start-up is not
    a stall of the loop the test watches."""
    document = orjson.dumps({"mcpServers": servers}).decode()
    config = make_settings(
        None, outbound_allow=["127.0.0.1"], auth_cache_ttl_s=0, mcp_servers=document, **settings
    )
    app = create_app(config, registry=functions.registry)
    server = await asyncio.to_thread(ThreadedServer(app, lifespan="on").start)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            yield Service(server.url, http, app)
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def mcp_client(
    url: str, bearer: str, *, timeout_s: float = 30
) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {bearer}"}, timeout=timeout_s
        ) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
