"""/chat with a client token: its bound context wins over the body, only its tools are offered."""

from __future__ import annotations

import orjson

from tests.support import fake_model as script
from tests.support import functions
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel


async def test_bound_context_wins_and_only_the_tokens_tools_are_offered(
    chat: ChatClient, fake: FakeModel
) -> None:
    created = await chat.http.post(
        "/client-tokens",
        json={
            "name": "alice",
            "context_arguments": {"user_id": "alice", "api_token": "bound-token"},
            "tool_ids": ["profile"],
        },
        headers=chat.tenant.headers,
    )
    assert created.status_code == 201, created.text
    bearer = {"Authorization": f"Bearer {created.json()['token']}"}
    fake.reset(script.tool_calls(("get_profile", {"field": "email"})), script.text("ok"))
    body = {
        "messages": [{"role": "user", "content": "who am I?"}],
        "context_arguments": {"user_id": "mallory", "api_token": "from-the-body"},
    }
    answer = await chat.http.post("/chat", json=body, headers=bearer)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tool_calls"][0]["status"] == "ok"
    assert functions.RECEIVED[-1] == {
        "user_id": "alice",
        "api_token": "bound-token",
        "field": "email",
    }
    offered = [tool["function"]["name"] for tool in fake.requests[0]["tools"]]
    assert offered == ["get_profile"]
    assert "bound-token" not in orjson.dumps(fake.requests).decode()

    # Asking for a tool outside the selection is asking for a tool that is not there.
    other = await chat.http.post("/chat", json={**body, "tool_ids": ["rolldice"]}, headers=bearer)
    assert other.status_code == 422
    servers = await chat.http.post("/chat", json={**body, "mcp_servers": ["x"]}, headers=bearer)
    assert servers.status_code == 403
