"""Clients of an app whose model is the scripted fake: a chat tenant, and one with MCP servers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI

from app.mcp.hub import McpHub
from tests.support.apps import TenantCredentials
from tests.support.fake_model import FakeModel
from tests.support.processes import child_processes


@dataclass
class ChatClient:
    app: FastAPI
    http: httpx.AsyncClient
    tenant: TenantCredentials

    async def chat(self, **body: Any) -> httpx.Response:
        body.setdefault("messages", [{"role": "user", "content": "hello"}])
        return await self.http.post("/chat", json=body, headers=self.tenant.headers)

    async def add_tool(self, tool: dict[str, Any]) -> None:
        response = await self.http.post("/tools/create", json=tool, headers=self.tenant.headers)
        assert response.status_code == 201, response.text


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
