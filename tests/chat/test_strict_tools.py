"""OpenAI's strict mode: `GET /tools/{id}?format=openai-strict` renders the strict form or says
exactly why it cannot, and a model provider with `strict_tools` sends it (issue 45, item 5)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer


@pytest.fixture
async def chat(fake_model_server: tuple[FakeModel, ThreadedServer]) -> AsyncIterator[ChatClient]:
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-operator",
        model_max_retries=0,
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        acme = await create_tenant(http, "acme")
        allowed = await http.put(
            "/tenants/acme/outbound", json={"allow": ["127.0.0.1"], "force": True}, headers=ADMIN
        )
        assert allowed.status_code == 200, allowed.text
        await http.put("/secrets/model-key", json={"value": "sk-acme"}, headers=acme.headers)
        yield ChatClient(app, http, acme)


NESTED = {
    "tool_id": "place",
    "type": "external",
    "function": {
        "name": "place",
        "url": "https://api.example.com/orders",
        "method": "POST",
        "parameters": {
            "type": "object",
            "properties": {
                "item": {"type": "string"},
                "note": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city"],
                },
                "size": {"oneOf": [{"type": "integer"}, {"enum": ["S", "M", "L"]}]},
            },
            "required": ["item"],
        },
    },
}


async def test_a_tool_in_openai_strict_form(chat: ChatClient) -> None:
    await chat.add_tool(NESTED)
    shown = await chat.http.get("/tools/place?format=openai-strict", headers=chat.tenant.headers)
    assert shown.status_code == 200, shown.text
    function = shown.json()["function"]
    assert function["strict"] is True
    parameters = function["parameters"]
    assert parameters["additionalProperties"] is False
    assert parameters["required"] == ["item", "note", "address", "size"]
    assert parameters["properties"]["note"]["type"] == ["string", "null"]
    address = parameters["properties"]["address"]
    assert address["anyOf"][1] == {"type": "null"}
    assert address["anyOf"][0]["required"] == ["city", "zip"]
    assert address["anyOf"][0]["properties"]["zip"]["type"] == ["string", "null"]
    assert address["anyOf"][0]["additionalProperties"] is False
    size = parameters["properties"]["size"]  # oneOf, which strict mode refuses, as anyOf
    assert "oneOf" not in str(size) and size["anyOf"][0]["anyOf"][0] == {"type": "integer"}


async def test_a_tool_that_cannot_be_strict_says_exactly_why(chat: ChatClient) -> None:
    tool = {**NESTED, "tool_id": "loose", "function": {**NESTED["function"], "name": "loose"}}
    tool["function"]["parameters"] = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "minLength": 3},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    await chat.add_tool(tool)
    shown = await chat.http.get("/tools/loose?format=openai-strict", headers=chat.tenant.headers)
    assert shown.status_code == 422, shown.text
    assert shown.json()["errors"] == [
        {"path": "$.function.parameters", "message": "code: minLength"},
        {
            "path": "$.function.parameters",
            "message": "labels: an object open to members of any name",
        },
    ]
    listed = await chat.http.get("/tools/?format=openai-strict", headers=chat.tenant.headers)
    by_name = {t["function"]["name"]: t["function"] for t in listed.json()}
    assert "strict" not in by_name["loose"]  # in a list: sent as it is, not strict


async def test_a_provider_with_strict_tools_sends_them_strict(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    """The model sends `null` for the optional `mode` it leaves out, as strict models do: read
    as absent, the function's default applies (without it: invalid_arguments)."""
    provider: dict[str, Any] = {
        "api": "chat_completions",
        "base_url": f"{fake_model_server[1].url}/v1",
        "api_key_secret": "model-key",
        "default_model": "gpt-test",
        "default": True,
        "max_retries": 0,
        "strict_tools": True,
    }
    put = await chat.http.put("/model-providers/strict", json=provider, headers=chat.tenant.headers)
    assert put.status_code == 201 and put.json()["strict_tools"] is True, put.text
    fake.reset(
        script.tool_calls(("count_items", {"items": ["a", "b"], "mode": None})), script.text("2")
    )
    answer = await chat.chat(tool_ids=["lister"])
    assert answer.status_code == 200, answer.text
    [call] = answer.json()["tool_calls"]
    assert call.get("error") is None and call["status"] == "ok", call
    [sent] = fake.requests[0]["tools"]
    assert sent["function"]["strict"] is True
    parameters = sent["function"]["parameters"]
    assert parameters["additionalProperties"] is False
    assert parameters["required"] == ["items", "mode"]
    assert "null" in parameters["properties"]["mode"]["type"]


def test_strict_tools_keep_a_chats_native_search_and_convert_a_list_once() -> None:
    """A provider with both `strict_tools` and a native search: the search in the API's own form
    still reaches the request (it was lost when strict made a plain list), and the strict form of
    a chat's tool list is made once, not on every turn."""
    from app.chat.model import NativeSearch, PreparedTools
    from app.chat.responses_api import ResponsesAPI
    from app.chat.strict_tools import StrictToolsAPI

    parameters = {
        "type": "object",
        "properties": {"item": {"type": "string"}, "note": {"type": "string"}},
        "required": ["item"],
    }
    schema = {"type": "function", "function": {"name": "place", "parameters": parameters}}
    search = NativeSearch("search_tools", "Find tools.", {"type": "object", "properties": {}})
    offered = PreparedTools.of((), [schema], search)
    api = StrictToolsAPI(ResponsesAPI())
    sent = [
        api.body(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=offered,
            parallel_tool_calls=True,
            stream=False,
        )
        for _turn in range(2)
    ]
    assert sent[0] == sent[1]
    assert b'"tool_search"' in sent[0], sent[0][:400]
    assert b'"strict":true' in sent[0]
    converted = api._strict_lists(offered)
    assert api._strict_lists(offered) is converted  # the same list: converted once
