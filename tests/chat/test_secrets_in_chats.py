"""Tenant secrets reach the tools that refer to them, at execution time, and nothing else."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from tests.support import fake_model as script
from tests.support import functions
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED
from tests.support.waiting import runs_recorded

CANARY = "sk-canary-5be01f9a7c3d2e48"


async def put_secret(chat: ChatClient, name: str, value: str) -> None:
    response = await chat.http.put(
        f"/secrets/{name}", json={"value": value}, headers=chat.tenant.headers
    )
    assert response.status_code in (200, 201), response.text


async def run_recorded(chat: ChatClient, run_id: str) -> str:
    """The stored run (written off the response path: wait, bounded, until it is there)."""
    [run] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert run["run_id"] == run_id
    response = await chat.http.get(f"/runs/{run_id}", headers=chat.tenant.headers)
    assert response.status_code == 200
    return response.text


async def test_a_header_template_sends_the_secret_and_nothing_else_sees_it(
    chat: ChatClient,
    fake: FakeModel,
    upstream: ThreadedServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await put_secret(chat, "weather_key", CANARY)
    tool = external("echo", f"{upstream.url}/echo", "GET")
    tool["function"]["headers"] = {
        "Authorization": "Bearer {secret:weather_key}",
        "X-Client": "toolgate-{secret:weather_key}-suffix",
        "X-Static": "plain",
    }
    await chat.add_tool(tool)
    fake.reset(script.tool_calls(("echo", {"city": "Paris"})), script.text("done"))
    with caplog.at_level(logging.DEBUG, logger="app"):
        response = await chat.chat()
    assert response.status_code == 200, response.text
    sent = RECEIVED[-1]["headers"]
    assert isinstance(sent, dict)
    assert sent["authorization"] == f"Bearer {CANARY}"
    assert sent["x-client"] == f"toolgate-{CANARY}-suffix" and sent["x-static"] == "plain"
    # The endpoint echoed the Authorization header: scrubbed before the model read it.
    echoed = orjson.loads(response.json()["messages"][2]["content"])
    assert echoed["authorization"] == "Bearer [redacted]"
    model_traffic = orjson.dumps(fake.requests).decode()
    for text in (model_traffic, response.text, await run_recorded(chat, response.json()["run_id"])):
        assert CANARY not in text
    assert CANARY not in caplog.text


async def test_a_secret_backed_context_parameter_wins_over_the_caller(
    chat: ChatClient, fake: FakeModel
) -> None:
    await put_secret(chat, "profile_token", CANARY)
    current = (await chat.http.get("/tools/profile", headers=chat.tenant.headers)).json()
    body = {k: current[k] for k in ("type", "function", "tags")}
    body["context_parameters"] = [
        {"name": "user_id"},
        {"name": "api_token", "secret": "profile_token"},
    ]
    updated = await chat.http.put("/tools/profile", json=body, headers=chat.tenant.headers)
    assert updated.status_code == 200, updated.text
    fake.reset(
        script.tool_calls(("get_profile", {"api_token": "from-the-model"})), script.text("ok")
    )
    response = await chat.chat(
        context_arguments={"user_id": "u-1", "api_token": "from-the-caller"}, tool_ids=["profile"]
    )
    assert response.status_code == 200, response.text
    assert response.json()["tool_calls"][0]["status"] == "ok"
    assert functions.RECEIVED[-1] == {"user_id": "u-1", "api_token": CANARY, "field": "name"}
    # The model's schema never offered it.
    [offered] = fake.requests[0]["tools"]
    assert "api_token" not in orjson.dumps(offered).decode()


async def test_an_unset_or_deleted_secret_fails_the_call_naming_it(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    tool = external("echo", f"{upstream.url}/echo", "GET")
    tool["function"]["headers"] = {"Authorization": "Bearer {secret:weather_key}"}
    await chat.add_tool(tool)
    calls_before = len(RECEIVED)

    async def call() -> dict[str, Any]:
        fake.reset(script.tool_calls(("echo", {"city": "Paris"})), script.text("done"))
        response = await chat.chat()
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["tool_calls"][0]
        return result

    missing = await call()
    assert missing["status"] == "error"
    assert missing["error"] == (
        "Error: the secret 'weather_key' is not set for this tenant (PUT /secrets/weather_key)"
    )
    assert len(RECEIVED) == calls_before  # the endpoint was never called without its key
    await put_secret(chat, "weather_key", CANARY)
    assert (await call())["status"] == "ok"
    deleted = await chat.http.delete("/secrets/weather_key", headers=chat.tenant.headers)
    assert deleted.status_code == 204
    assert (await call())["status"] == "error"


async def test_a_secret_with_a_line_break_never_reaches_a_header(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await put_secret(chat, "pem", "line1\nInjected: yes")
    tool = external("echo", f"{upstream.url}/echo", "GET")
    tool["function"]["headers"] = {"X-Key": "{secret:pem}"}
    await chat.add_tool(tool)
    calls_before = len(RECEIVED)
    fake.reset(script.tool_calls(("echo", {"city": "Paris"})), script.text("done"))
    response = await chat.chat()
    [call] = response.json()["tool_calls"]
    invoked = await chat.http.post(
        "/tools/echo/invoke", json={"arguments": {"city": "Paris"}}, headers=chat.tenant.headers
    )
    mcp = await chat.http.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"city": "Paris"}},
        },
        headers={**chat.tenant.headers, "Accept": "application/json, text/event-stream"},
    )
    [mcp_text] = mcp.json()["result"]["content"]
    assert mcp.json()["result"]["isError"] is True
    for error in (call["error"], invoked.json()["error"]["message"], mcp_text["text"]):
        assert "'X-Key' cannot be sent: its value holds a control character" in error
        assert "'pem'" in error and "Injected" not in error
    assert call["status"] == "error" and invoked.json()["status"] == "error"
    assert len(RECEIVED) == calls_before


async def test_chats_without_secret_references_never_read_secrets(
    chat: ChatClient, fake: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[set[str]] = []
    secrets = chat.app.state.services.secrets
    original = secrets.resolve

    async def counting(names: set[str], *, tenant_id: str) -> dict[str, str | None]:
        reads.append(names)
        return await original(names, tenant_id=tenant_id)

    monkeypatch.setattr(secrets, "resolve", counting)
    fake.reset(script.tool_calls(("add", {"a": 1, "b": 2})), script.text("3"))
    assert (await chat.chat(tool_ids=["adder"])).status_code == 200
    assert reads == []
