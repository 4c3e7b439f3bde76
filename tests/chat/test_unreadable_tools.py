"""A stored tool document that no longer parses never breaks the tenant's other tools."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.repositories.database import utc_now
from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel

BROKEN: list[dict[str, Any]] = [
    # Written by hand, or by another version: a field of the wrong type...
    {"tool_id": "broken-type", "type": "function", "function": {"name": 5}, "enabled": True},
    # ...a kind this version does not know...
    {"tool_id": "future-kind", "type": "graphql", "function": {"name": "q"}, "enabled": True},
    # ...and an external tool whose stored URL the HTTP client cannot use (httpx.InvalidURL).
    {
        "tool_id": "bad-url",
        "type": "external",
        "function": {"name": "bad_url", "url": "https://[::1/x", "method": "GET"},
        "context_parameters": [],
        "tags": [],
        "enabled": True,
    },
]


async def _store_broken(chat: ChatClient) -> None:
    database = chat.app.state.services.database
    collection = database.tools(chat.tenant.tenant_id)
    now = utc_now()
    for doc in BROKEN:
        await collection.insert_one(
            {"_id": doc["tool_id"], **doc, "created_at": now, "updated_at": now}
        )


async def test_other_tools_stay_listed_and_usable_in_chats(
    chat: ChatClient, fake: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    await _store_broken(chat)
    headers = chat.tenant.headers
    with caplog.at_level(logging.WARNING, logger="app.services.catalog"):
        page = (await chat.http.get("/tools/?limit=500", headers=headers)).json()
        ids = (await chat.http.get("/tools/ids", headers=headers)).json()
        fake.reset(script.tool_calls(("add", {"a": 2, "b": 3})), script.text("5"))
        response = await chat.chat()
        assert (await chat.http.get("/tools/?limit=500", headers=headers)).status_code == 200

    # Listed, with the reasons, beside the readable tools.
    by_id = {item["tool_id"]: item for item in page["items"]}
    assert "adder" in by_id and "function" in by_id["adder"]
    for doc in BROKEN:
        shown = by_id[doc["tool_id"]]
        assert shown["problems"] and "function" not in shown, shown
    assert any("function.name" in p for p in by_id["broken-type"]["problems"])
    assert any("function.url" in p for p in by_id["bad-url"]["problems"])
    unreadable = {i["tool_id"]: i for i in ids if i.get("problems")}
    assert set(unreadable) == {doc["tool_id"] for doc in BROKEN}

    # The chat ran with the readable tools only.
    assert response.status_code == 200, response.text
    assert response.json()["tool_calls"][0]["status"] == "ok"
    offered = {t["function"]["name"] for t in fake.requests[0]["tools"]}
    assert "add" in offered and not offered & {"bad_url", "q", "5"}

    # One warning per unreadable document, naming tenant and tool id, however often it loads.
    lines = [r.getMessage() for r in caplog.records if r.name == "app.services.catalog"]
    for doc in BROKEN:
        [line] = [m for m in lines if repr(doc["tool_id"]) in m]
        assert "tenant acme" in line


async def test_an_unreadable_tool_is_shown_fixed_and_deleted(chat: ChatClient) -> None:
    await _store_broken(chat)
    headers = chat.tenant.headers
    shown = await chat.http.get("/tools/broken-type", headers=headers)
    assert shown.status_code == 200 and shown.json()["problems"]
    as_openai = await chat.http.get("/tools/broken-type?format=openai", headers=headers)
    assert as_openai.status_code == 409 and "cannot read" in as_openai.json()["detail"]
    invoked = await chat.http.post("/tools/bad-url/invoke", json={}, headers=headers)
    assert invoked.status_code == 409, invoked.text

    fixed = {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    deleted = await chat.http.delete("/tools/adder", headers=headers)  # frees the name `add`
    assert deleted.status_code == 204
    replaced = await chat.http.put("/tools/broken-type", json=fixed, headers=headers)
    assert replaced.status_code == 200, replaced.text
    invoked = await chat.http.post(
        "/tools/broken-type/invoke", json={"arguments": {"a": 1, "b": 2}}, headers=headers
    )
    assert invoked.json()["content"] == "3"
    assert (await chat.http.delete("/tools/future-kind", headers=headers)).status_code == 204
    listed = (await chat.http.get("/tools/ids", headers=headers)).json()
    assert "future-kind" not in {i["tool_id"] for i in listed}
