"""Progress over MCP, both ways: an MCP server's progress notifications reach a streamed chat
(the service asks for them with a progress token), and `/mcp` sends a tool's progress to a real
MCP client that asked for it (the SDK's `ClientSession` with a progress callback)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app.main import create_app
from tests.support import fake_model as script
from tests.support import mcp_demo, progress_functions
from tests.support.apps import ADMIN, make_settings
from tests.support.chat_clients import McpChat
from tests.support.secantus import free_port
from tests.support.waiting import runs_recorded, within

CANARY = "cnry-mcp-progress-77ab"


def _events(text: str) -> list[tuple[str, Any]]:
    return [
        (block.split("\n")[0].removeprefix("event: "), orjson.loads(block.split("data: ", 1)[1]))
        for block in text.strip().split("\n\n")
        if block.startswith("event:")
    ]


@pytest.mark.parametrize("name", ["demo-http", "demo-sse"])
async def test_an_mcp_servers_progress_reaches_a_streamed_chat(
    mcp_chat: McpChat, name: str
) -> None:
    mcp_chat.fake.reset(script.tool_calls((f"{name}__steps", {"count": 2})), script.text("ok"))
    response = await mcp_chat.chat(stream=True, mcp_servers=[name])
    events = _events(response.text)
    progress = [(d["message"], d["fraction"]) for n, d in events if n == "tool_progress"]
    assert progress == [("step 1 of 2", 0.5), ("step 2 of 2", 1.0)]
    assert mcp_chat.fake.requests[1]["messages"][-1]["content"] == "2 steps done"
    assert "steps" in mcp_demo.CALLS


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, str]]:
    """The service on a real port with the progress functions; (its URL, a tenant's key)."""
    app = create_app(make_settings(None, auth_cache_ttl_s=0), registry=progress_functions.registry)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    await within(lambda: server.started or task.done(), 10)
    assert not task.done(), "the service did not start"
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        created = await http.post("/tenants", json={"tenant_id": "acme"}, headers=ADMIN)
        yield url, created.json()["api_key"]
    server.should_exit = True
    await task


async def _session_call(
    url: str, key: str, name: str, arguments: dict[str, Any], with_progress: bool
) -> tuple[Any, list[tuple[float, float | None, str | None]]]:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        callback = on_progress if with_progress else None
        result = await session.call_tool(name, arguments, progress_callback=callback)
    return result, seen


async def test_mcp_forwards_progress_to_a_client_that_asked(served: tuple[str, str]) -> None:
    url, key = served
    result, seen = await _session_call(url, key, "countdown", {"count": 2}, with_progress=True)
    assert not result.is_error and result.content[0].text == "counted down from 2"
    assert seen == [(0.5, 1.0, "step 1 of 2"), (1.0, 1.0, "step 2 of 2")]
    plain, none = await _session_call(url, key, "plain_steps", {"count": 2}, with_progress=True)
    assert [s[0] for s in none] == [1, 2] and [s[1] for s in none] == [None, None]
    assert plain.content[0].text == '{"steps":2}'


async def _modern_call(
    url: str, key: str, name: str, arguments: dict[str, Any], with_progress: bool
) -> tuple[Any, list[tuple[float, float | None, str | None]]]:
    """The call through `mcp.Client`, which speaks 2026-07-28 (per-request envelopes, no
    session), on a loop of its own as a separate client program would be."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def use() -> Any:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with http, Client(transport) as client:
            callback = on_progress if with_progress else None
            return await client.call_tool(name, arguments, progress_callback=callback)

    return await asyncio.to_thread(asyncio.run, use()), seen


async def test_mcp_forwards_progress_to_a_2026_07_28_client(served: tuple[str, str]) -> None:
    url, key = served
    result, seen = await _modern_call(url, key, "countdown", {"count": 2}, with_progress=True)
    assert not result.is_error and result.content[0].text == "counted down from 2"
    assert seen == [(0.5, 1.0, "step 1 of 2"), (1.0, 1.0, "step 2 of 2")]
    quiet, none = await _modern_call(url, key, "countdown", {"count": 2}, with_progress=False)
    assert quiet.content[0].text == "counted down from 2" and none == []
    with pytest.raises(ExceptionGroup) as unknown:  # the error answer, raised by the client
        await _modern_call(url, key, "nope", {}, with_progress=True)
    assert unknown.group_contains(MCPError, match="Unknown tool: nope", depth=2)


async def test_mcp_sends_no_progress_without_a_token(served: tuple[str, str]) -> None:
    url, key = served
    result, seen = await _session_call(url, key, "countdown", {"count": 2}, with_progress=False)
    assert result.content[0].text == "counted down from 2" and seen == []


async def test_mcp_progress_is_scrubbed_and_errors_still_answer(served: tuple[str, str]) -> None:
    url, key = served
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        headers = {"Authorization": f"Bearer {key}"}
        token = await http.post(
            "/client-tokens",
            json={"name": "alice", "context_arguments": {"api_token": CANARY}},
            headers=headers,
        )
        assert token.status_code == 201, token.text
        bearer = token.json()["token"]
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "leaky_steps", "arguments": {}, "_meta": {"progressToken": "p1"}},
        }
        mcp_headers = {
            "Authorization": f"Bearer {bearer}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        response = await http.post("/mcp", json=body, headers=mcp_headers)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert CANARY not in response.text and "[redacted]" in response.text
        messages = [data for _, data in _events(response.text)]
        assert [m.get("method") for m in messages[:3]] == ["notifications/progress"] * 3
        assert messages[-1]["id"] == 7 and messages[-1]["result"]["content"][0]["text"] == "done"
        body["params"] = {"name": "nope", "arguments": {}, "_meta": {"progressToken": "p2"}}
        unknown = await http.post("/mcp", json=body, headers=mcp_headers)
        assert _events(unknown.text)[-1][1]["error"]["code"] == -32602
        body["params"] = {"name": "countdown", "arguments": {}, "_meta": {"progressToken": [1]}}
        confused = await http.post("/mcp", json=body, headers=mcp_headers)
        assert confused.status_code < 500
        assert confused.headers["content-type"].startswith("application/json")  # no stream
        [run] = await runs_recorded(http, headers, 1, "/runs")
        assert run["kind"] == "mcp" and run["tool_calls"][0]["name"] == "leaky_steps"
