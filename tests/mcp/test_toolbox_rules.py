"""The toolbox's rules hold on every entry point: `POST /chat`, `POST /tools/{id}/invoke` and `/mcp`
(`tools/list`, `tools/call`). One context contract for client tokens, one name-clash rule."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.support import fake_model as script
from tests.support.chat_clients import McpChat
from tests.support.documents import external
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED

ESCALATION = {"user_id": "alice", "role": "admin"}


async def _token(mcp_chat: McpChat, **body: Any) -> dict[str, str]:
    created = await mcp_chat.http.post(
        "/client-tokens", json={"name": "alice", **body}, headers=mcp_chat.tenant.headers
    )
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


async def _rpc(mcp_chat: McpChat, headers: dict[str, str], method: str, **params: Any) -> Any:
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = await mcp_chat.http.post("/mcp", json=message, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def _who_tool(mcp_chat: McpChat, upstream: ThreadedServer) -> None:
    """An endpoint that trusts its hidden `user_id` and `role` (both context parameters)."""
    await mcp_chat.add_tool(
        external(
            "who",
            f"{upstream.url}/echo",
            "GET",
            context_parameters=[{"name": "user_id"}, {"name": "role"}],
        )
    )


def _roles_received() -> list[str]:
    return [value for sent in RECEIVED for key, value in sent["query"] if key == "role"]


async def test_a_token_holder_cannot_set_a_hidden_value_the_token_does_not_bind(
    mcp_chat: McpChat, upstream: ThreadedServer
) -> None:
    await _who_tool(mcp_chat, upstream)
    bearer = await _token(mcp_chat, context_arguments={"user_id": "alice"}, tool_ids=["who"])
    RECEIVED.clear()
    mcp_chat.fake.reset(script.tool_calls(("who", {})), script.text("ok"))
    body = {"messages": [{"role": "user", "content": "hi"}], "context_arguments": ESCALATION}

    chat = await mcp_chat.http.post("/chat", json=body, headers=bearer)
    assert chat.status_code == 422, chat.text
    assert chat.json()["errors"] == [
        {"path": "$.context_arguments.role", "message": "not settable with this client token"}
    ]
    # invoke takes end users' credentials under the same contract: refused the same way
    invoked = await mcp_chat.http.post(
        "/tools/who/invoke", json={"arguments": {}, "context_arguments": ESCALATION}, headers=bearer
    )
    assert invoked.status_code == 422, invoked.text
    assert invoked.json()["errors"] == chat.json()["errors"]
    # /mcp: the only channel is the arguments, and hidden names there are never taken: the
    # token binds no role, so the tool cannot run
    called = await _rpc(mcp_chat, bearer, "tools/call", name="who", arguments={"role": "admin"})
    assert called["result"]["isError"] is True, called
    assert "role" in called["result"]["content"][0]["text"]
    assert _roles_received() == []
    assert mcp_chat.fake.requests == []  # the refused chat never reached the model


async def test_a_token_may_list_names_its_requests_set(
    mcp_chat: McpChat, upstream: ThreadedServer
) -> None:
    await _who_tool(mcp_chat, upstream)
    bearer = await _token(
        mcp_chat,
        context_arguments={"user_id": "alice"},
        settable_context=["role"],
        tool_ids=["who"],
    )
    listed = await mcp_chat.http.get("/client-tokens", headers=mcp_chat.tenant.headers)
    assert listed.json()[0]["settable_context"] == ["role"]
    RECEIVED.clear()
    mcp_chat.fake.reset(script.tool_calls(("who", {})), script.text("ok"))
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "context_arguments": {"user_id": "mallory", "role": "viewer"},
    }
    chat = await mcp_chat.http.post("/chat", json=body, headers=bearer)
    assert chat.status_code == 200, chat.text
    [sent] = RECEIVED
    assert ["user_id", "alice"] in [list(pair) for pair in sent["query"]]  # the token's wins
    assert _roles_received() == ["viewer"]


async def test_without_a_token_the_callers_context_is_the_context(
    mcp_chat: McpChat, upstream: ThreadedServer
) -> None:
    await _who_tool(mcp_chat, upstream)
    RECEIVED.clear()
    invoked = await mcp_chat.http.post(
        "/tools/who/invoke",
        json={"arguments": {}, "context_arguments": ESCALATION},
        headers=mcp_chat.tenant.headers,
    )
    assert invoked.status_code == 200 and invoked.json()["status"] == "ok", invoked.text
    assert _roles_received() == ["admin"]


@pytest.fixture
async def clash(mcp_chat: McpChat, upstream: ThreadedServer) -> McpChat:
    """A stored tool named like the `add` tool of the operator's `demo-http` server."""
    tool = external("clash", f"{upstream.url}/echo", "GET")
    tool["function"]["name"] = "demo-http__add"
    await mcp_chat.add_tool(tool)
    return mcp_chat


async def test_a_name_offered_twice_is_refused_on_every_entry_point(clash: McpChat) -> None:
    chat = await clash.chat(mcp_servers=["demo-http"])
    assert chat.status_code == 422
    assert chat.json()["errors"][0]["message"] == (
        "'demo-http__add' is offered twice; rename or deselect one"
    )
    headers = clash.tenant.headers
    listed = await _rpc(clash, headers, "tools/list")
    assert "'demo-http__add' is offered twice" in listed["error"]["message"], listed
    called = await _rpc(clash, headers, "tools/call", name="demo-http__add", arguments={})
    assert "'demo-http__add' is offered twice" in called["error"]["message"], called
    assert "result" not in called
    # invoke names one tool by its id, which no other tool shares: nothing is ambiguous
    stored = await clash.http.post("/tools/clash/invoke", json={}, headers=headers)
    assert stored.status_code == 200 and orjson.loads(stored.content)["tool_id"] == "clash"
    served = await clash.http.post(
        "/tools/demo-http__add/invoke", json={"arguments": {"a": 1, "b": 2}}, headers=headers
    )
    assert served.status_code == 200 and served.json()["content"] == "3", served.text


async def test_a_token_that_selects_one_of_the_two_sees_no_clash(clash: McpChat) -> None:
    bearer = await _token(clash, tool_ids=["demo-http__add"])
    listed = await _rpc(clash, bearer, "tools/list")
    assert [tool["name"] for tool in listed["result"]["tools"]] == ["demo-http__add"]
    called = await _rpc(clash, bearer, "tools/call", name="demo-http__add", arguments={"a": 2})
    assert called["result"]["content"][0]["text"] != "", called
