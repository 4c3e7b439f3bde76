"""The toolkit suites' function dictionary (categories, post-processors, presets, shaping) and
the app they run: the scripted model, two tenants."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.tools.builtin import roll_dice
from app.tools.registry import FunctionRegistry, ToolRequest
from tests.support.apps import TenantCredentials, create_tenant, http_client, make_settings
from tests.support.apps import running_app as app_running

registry = FunctionRegistry()
registry.register(roll_dice, tool_id="rolldice")
SEEN: list[dict[str, Any]] = []  # what the functions were called with


def names_only(request: ToolRequest, result: Any) -> Any:
    """The operator's post-processor: row names only, and which tool asked."""
    return {"names": [row["name"] for row in result["rows"]], "tool": request.tool_id}


@registry.register(
    tool_id="sales", category="reports", postprocess=names_only, context_parameters=["region"]
)
def sales_report(limit: int, region: str) -> dict[str, Any]:
    """Sales of a region, with the margins nobody should see.

    Args:
        limit: How many rows.
        region: The region, from the server.
    """
    SEEN.append({"limit": limit, "region": region})
    rows = [{"name": f"{region}-{i}", "margin": 0.31} for i in range(limit)]
    return {"rows": rows, "region": region}


@registry.register(tool_id="inventory", category="reports", blocking=False)
def inventory(item: str) -> dict[str, Any]:
    """Stock of an item in every warehouse.

    Args:
        item: The item.
    """
    return {
        "item": item,
        "stock": [{"warehouse": "north", "count": 3}, {"warehouse": "south", "count": 5}],
        "internal": {"cost": 12.5},
    }


@registry.register(tool_id="fetch-page", context_parameters=["base_path", "retries"])
def fetch_page(page: str, base_path: str, retries: int) -> dict[str, Any]:
    """Read a page under the preset base path.

    Args:
        page: The page.
        base_path: Where pages live (a preset).
        retries: How often to retry (a preset).
    """
    SEEN.append({"page": page, "base_path": base_path, "retries": retries})
    return {"path": f"{base_path}/{page}", "retries": retries}


@registry.register(tool_id="plain")
def plain_text() -> str:
    """Text that is not JSON."""
    return "just words, not JSON"


@registry.register(tool_id="nap")
async def nap(seconds: float) -> str:
    """Sleep without blocking.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "rested"


def _fails(request: ToolRequest, result: Any) -> Any:
    raise RuntimeError("the post-processor broke")


@registry.register(tool_id="broken-post", postprocess=_fails)
def broken_post() -> str:
    """A function whose post-processor raises."""
    return "fine"


@dataclass
class Kit:
    app: FastAPI
    http: httpx.AsyncClient
    acme: TenantCredentials
    globex: TenantCredentials

    async def post(self, path: str, body: Any, who: TenantCredentials | None = None) -> Any:
        return await self.http.post(path, json=body, headers=(who or self.acme).headers)

    async def chat(self, **body: Any) -> httpx.Response:
        body.setdefault("messages", [{"role": "user", "content": "hello"}])
        return await self.post("/chat", body)


@asynccontextmanager
async def toolkit_app(model_url: str | None = None, **overrides: Any) -> AsyncIterator[Kit]:
    """Two tenants on the app of this dictionary; with `model_url`, chats use that model."""
    model = {"openai_base_url": f"{model_url}/v1", "openai_api_key": "sk-test"} if model_url else {}
    settings = make_settings(
        None, outbound_allow=["127.0.0.1"], tool_timeout_s=5.0, **model, **overrides
    )
    async with app_running(settings, registry) as app, http_client(app) as http:
        acme, globex = await create_tenant(http, "acme"), await create_tenant(http, "globex")
        yield Kit(app, http, acme, globex)


async def reshape(kit: Kit, tool_id: str, **fields: Any) -> httpx.Response:
    """PUT the stored tool again with `fields` replaced (a tenant editing its tool)."""
    doc = (await kit.http.get(f"/tools/{tool_id}", headers=kit.acme.headers)).json()
    for shown_only in ("created_at", "updated_at", "incompatible_providers"):
        doc.pop(shown_only, None)
    return await kit.http.put(f"/tools/{tool_id}", json={**doc, **fields}, headers=kit.acme.headers)


async def mcp_call(kit: Kit, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC request to `/mcp` with acme's key, answered as JSON."""
    headers = {
        **kit.acme.headers,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    answer = await kit.http.post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def tool_messages(request: dict[str, Any]) -> list[str]:
    """The tool results a model request carried."""
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def offered(request: dict[str, Any]) -> set[str]:
    """The names of the tools a model request offered."""
    return {tool["function"]["name"] for tool in request.get("tools") or []}


FORECAST_SEEN: list[dict[str, str]] = []


async def _forecast(request: Request) -> JSONResponse:
    """A forecast API's answer: more than a model needs (the docs shape it down)."""
    FORECAST_SEEN.append(dict(request.query_params))
    days = [
        {"date": "2026-11-25", "temp_max": 19, "temp_min": 12, "hourly": list(range(24))},
        {"date": "2026-11-26", "temp_max": 17, "temp_min": 11, "hourly": list(range(24))},
    ]
    query = request.query_params
    return JSONResponse({"city": query.get("city"), "units": query.get("units"), "days": days})


forecast_api = Starlette(routes=[Route("/forecast", _forecast, methods=["GET"])])
