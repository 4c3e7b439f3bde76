"""`/mcp` at the edges of the protocol (hardening issue, items 7 and 9): no SSE stream (GET is
405), and a request whose JSON-RPC `id` is not a string or an integer is an invalid request,
not a notification."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.mcp.test_mcp_gateway import MODERN, _envelope
from tests.support.apps import TenantCredentials

ACCEPT = {"Accept": "application/json, text/event-stream"}


async def _within(request: Any) -> httpx.Response:
    """An SSE stream that never ends would hold the in-process client for ever."""
    return await asyncio.wait_for(request, timeout=10)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_only_post_is_served(
    client: httpx.AsyncClient, acme: TenantCredentials, method: str
) -> None:
    headers = {**acme.headers, **ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    answer = await _within(client.request(method, "/mcp", headers=headers))
    assert answer.status_code == 405, answer.text
    assert answer.headers["allow"] == "POST"
    assert answer.headers["content-type"].startswith("application/problem+json")
    # The credential first: a caller without one learns nothing about the endpoint.
    anonymous = await _within(client.request(method, "/mcp", headers=ACCEPT))
    assert anonymous.status_code == 401


@pytest.mark.parametrize("version", ["2025-11-25", MODERN, None])
async def test_an_id_that_is_not_a_string_or_an_integer_is_an_invalid_request(
    client: httpx.AsyncClient, acme: TenantCredentials, version: str | None
) -> None:
    for method in ("tools/list", "ping"):
        for request_id in (1.5, 1.0, None, True, False, {"a": 1}, [1]):
            body, headers = _envelope(method, {}, version or "2025-11-25")
            if version is None:
                del headers["MCP-Protocol-Version"]
            body["id"] = request_id
            answer = await client.post("/mcp", json=body, headers={**acme.headers, **headers})
            # 400, as the SDK answers other invalid requests
            assert answer.status_code == 400, (method, request_id, answer.text)
            assert answer.json()["id"] is None
            assert answer.json()["error"]["code"] == -32600
        body["id"] = 7  # the same request with a good id is answered (2026: no ping, -32601)
        answer = await client.post("/mcp", json=body, headers={**acme.headers, **headers})
        assert answer.json()["id"] == 7, answer.text


async def test_a_notification_is_still_accepted(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {**acme.headers, **ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    answer = await client.post("/mcp", json=body, headers=headers)
    assert answer.status_code == 202, answer.text
