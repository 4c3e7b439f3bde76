"""Chat fixtures: the app wired to the scripted fake model, and a real upstream HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import TenantCredentials, create_tenant, http_client, make_settings, running_app
from tests.support import functions
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer


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


@pytest.fixture(params=["http", "openai-sdk"])
def model_client(request: pytest.FixtureRequest) -> str:
    """Every chat test runs with both model clients: they must behave the same."""
    return str(request.param)


@pytest.fixture
async def chat(
    request: pytest.FixtureRequest,
    model_client: str,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> AsyncIterator[ChatClient]:
    """A tenant on an app whose model is the fake; `@pytest.mark.settings(...)` overrides."""
    marker = request.node.get_closest_marker("settings")
    overrides: dict[str, Any] = {
        "openai_base_url": f"{fake_model_server[1].url}/v1",
        "openai_api_key": "sk-test-key",
        "model_client": model_client,
        "model_timeout_s": 5.0,
        "outbound_allow": ["127.0.0.1"],
        **(marker.kwargs if marker else {}),
    }
    async with (
        running_app(make_settings(None, **overrides), functions.registry) as app,
        http_client(app) as http,
    ):
        yield ChatClient(app, http, await create_tenant(http, "acme"))


def external(tool_id: str, url: str, method: str = "GET", **extra: Any) -> dict[str, Any]:
    properties = extra.pop(
        "properties",
        {"city": {"type": "string"}, "days": {"type": "array", "items": {"type": "integer"}}},
    )
    return {
        "tool_id": tool_id,
        "type": "external",
        "function": {
            "name": tool_id.replace("-", "_"),
            "description": "An upstream API.",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": extra.pop("required", []),
            },
            "url": url,
            "method": method,
        },
        **extra,
    }
