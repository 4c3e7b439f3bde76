"""/chat with an end user's JWT (a tenant's identity provider): its mapped claims are the run's
context, bound exactly as a client token binds its own; the tenant is the one whose issuer and
audience the token carries."""

from __future__ import annotations

import orjson

from tests.support import fake_model as script
from tests.support import functions
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.issuer import Issuer

AUDIENCE = "api://toolgate-chat"


async def test_the_claims_are_the_context_and_a_request_cannot_override_them(
    chat: ChatClient, fake: FakeModel, issuer: Issuer
) -> None:
    provider = {
        "issuer": issuer.issuer,
        "jwks_uri": issuer.jwks_uri,
        "audience": AUDIENCE,
        "claims": {"user_id": "sub", "api_token": "tok"},
    }
    trusted = await chat.http.put("/identity", json=provider, headers=chat.tenant.headers)
    assert trusted.status_code == 200, trusted.text
    bearer = {"Authorization": f"Bearer {issuer.token(AUDIENCE, tok='bound-by-the-idp')}"}
    fake.reset(script.tool_calls(("get_profile", {"field": "email"})), script.text("ok"))
    body = {
        "messages": [{"role": "user", "content": "who am I?"}],
        "tool_ids": ["profile"],
        "context_arguments": {"user_id": "mallory", "api_token": "from-the-body"},
    }
    answer = await chat.http.post("/chat", json=body, headers=bearer)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tool_calls"][0]["status"] == "ok"
    assert functions.RECEIVED[-1] == {
        "user_id": "u-42",
        "api_token": "bound-by-the-idp",
        "field": "email",
    }
    assert "bound-by-the-idp" not in orjson.dumps(fake.requests).decode()  # never the model's
    # A value the token does not bind cannot be set by the request either.
    unbound = {"Authorization": f"Bearer {issuer.token(AUDIENCE)}"}  # no `tok` claim
    refused = await chat.http.post("/chat", json=body, headers=unbound)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["path"] == "$.context_arguments.api_token"
    # An end user cannot add MCP servers to a chat, as a client token cannot.
    servers = await chat.http.post(
        "/chat", json={**body, "context_arguments": {}, "mcp_servers": ["x"]}, headers=bearer
    )
    assert servers.status_code == 403


async def test_a_refused_token_is_a_401_saying_why(chat: ChatClient, issuer: Issuer) -> None:
    provider = {"issuer": issuer.issuer, "jwks_uri": issuer.jwks_uri, "audience": AUDIENCE}
    assert (
        await chat.http.put("/identity", json=provider, headers=chat.tenant.headers)
    ).status_code == 200
    expired = issuer.token(AUDIENCE, lifetime_s=-600)
    answer = await chat.http.post(
        "/chat",
        json={"messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {expired}"},
    )
    assert answer.status_code == 401
    assert answer.json()["detail"] == "The token is not accepted: it has expired (`exp`)."
